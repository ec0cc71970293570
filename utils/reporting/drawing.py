"""The end-of-run pictures drawn while the run goes on: a child process forked as soon as the last validation's figures
are known draws them (matplotlib, about half of what a run pays after its last step) while the parent saves the last
checkpoint, exports the weights and runs the multi-view test; the parent collects them before report.html embeds them.

Matplotlib's drawing holds the GIL, so a thread would not overlap it; a forked child shares the figures without
copying them. The child sets torch to one thread (as DataLoader workers do: an OpenMP pool does not survive a fork),
takes the default signal handlers (a stop signal is the parent's business), dies with its parent (a SIGKILLed run's
child does not draw into the folder its resumed run uses) and leaves with os._exit (no atexit handlers: the dashboards
and the process group are the parent's). Where fork is missing, or the child fails, the parent draws them itself: no
picture is lost.
"""

import gc
import os
import signal

import torch

from utils.core.preemption import STOP_SIGNALS, die_with_parent
from utils.reporting.plots import save


def draw(pictures):
    """Draw and save each (make the figure, path) of `pictures` (a maker may return None: nothing to draw); returns
    the paths written, in order."""
    written = []
    for make, path in pictures:
        fig = make()
        if fig is not None:
            save(fig, path)
            written.append(path)
    return written


class Drawing:
    """Pictures being drawn by a child process (`pid`), which names those it wrote on a pipe; `collect` waits for
    it. Without a child (`pid` None) `collect` draws them."""

    def __init__(self, pictures, pid=None, told=None):
        self.pictures, self.pid, self.told = pictures, pid, told

    @classmethod
    def start(cls, pictures):
        if not pictures or not hasattr(os, "fork"):
            return cls(pictures)
        read_end, write_end = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _draw_in_child(pictures, write_end, parent)  # never returns
        os.close(write_end)
        return cls(pictures, pid, read_end)

    def collect(self):
        """The paths of the pictures written, in order, once all are on disk."""
        if self.pid is None:
            return draw(self.pictures)
        with os.fdopen(self.told, "rb") as pipe:
            told = pipe.read().decode().splitlines()
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.waitstatus_to_exitcode(status) != 0:  # it failed on its way: draw them here, as it would have
            return draw(self.pictures)
        return [path for _, path in self.pictures if str(path) in told]


def _draw_in_child(pictures, write_end, parent):
    code = 1
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        die_with_parent(parent)
        # No garbage collection in the child: a full pass would walk (and so copy, page by page) the parent's heap
        # it shares, a quarter of a second; what the drawing leaves is freed when it exits.
        gc.disable()
        torch.set_num_threads(1)
        written = draw(pictures)
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write("\n".join(map(str, written)).encode())
        code = 0
    finally:
        os._exit(code)
