"""SIGTERM / SIGINT on any rank, or a launcher that died: every rank finishes its step, checkpoints, and exits.

Where the signals come from, and who must not act on them:
- SLURM signals every process of the job step, and torchrun (`accelerate launch` with several
  processes) signals each rank's whole process group: DataLoader workers get the signal too. A worker
  that died of it would take its rank down with a traceback and no checkpoint, so workers leave
  both signals to their rank (`leave_signals_to_rank`, their loaders' worker_init_fn).
- A one-process `accelerate launch` forwards nothing: killed, the launcher exits and its training
  process would train on, orphaned. Linux's parent-death signal turns that into our SIGTERM.
"""

import atexit
import ctypes
import functools
import os
import signal
import sys

import torch

EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: "try again" -- rerun with --resume latest
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Interrupted(Exception):
    """Raised on every rank once the interrupt checkpoint is saved."""


def leave_signals_to_rank(closing, worker_id):
    """DataLoader worker_init_fn (bind `closing`): the rank that owns this worker handles SIGTERM/SIGINT.

    SIGINT is ignored. SIGTERM cannot simply be: at exit, the rank ends the workers still alive with
    SIGTERM and waits for them (multiprocessing's exit handler). So a worker leaves on SIGTERM only
    once its rank has set `closing` (a shared flag, see worker_init_fn), and ignores it otherwise.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0) if closing.item() else None)


def worker_init_fn():
    """A worker_init_fn for this rank's DataLoaders, and what makes their workers leave at its exit."""
    closing = torch.zeros((), dtype=torch.uint8).share_memory_()
    atexit.register(closing.fill_, 1)  # runs before multiprocessing's own exit handler (registered earlier)
    return functools.partial(leave_signals_to_rank, closing)


def _started_by_launcher():
    # accelerate launch exports ACCELERATE_DYNAMO_BACKEND to its children; torchrun exports TORCHELASTIC_RUN_ID.
    return "ACCELERATE_DYNAMO_BACKEND" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def follow_launcher(launcher_pid):
    """Get SIGTERM when the launcher that started this process dies (Linux).

    `launcher_pid`: our parent as read first thing at start-up. Only under a launcher: a run started
    from a shell (nohup, tmux) must not stop when the shell ends. Until StopRequest.install, the
    signal's default action ends the process, which has written nothing yet.
    """
    if not (sys.platform.startswith("linux") and _started_by_launcher()):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    # Re-parented since start-up: the launcher died before the signal was armed. (Not "parent is 1":
    # in a container the launcher itself is often process 1.)
    if os.getppid() != launcher_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent_pid):
    """A forked helper (utils/reporting/drawing.py) killed when its parent dies, whatever killed it (Linux): it must
    not write into a run folder that a resumed run may already be using."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


class StopRequest:
    """Remembers a stop signal; the training loop agrees on it across ranks once a step."""

    def __init__(self):
        self.signal_name = None
        self._before = {}  # the handlers install replaced, put back by restore

    def install(self):
        for signum in STOP_SIGNALS:
            self._before[signum] = signal.signal(signum, self._note)

    def restore(self):
        """The handlers from before install, once the run is over: a process that called main() (a notebook, a
        test) is interrupted by Ctrl-C again, and what it forks later (a library's multiprocessing child) dies of
        SIGTERM instead of noting it for a run that has ended."""
        while self._before:
            signum, handler = self._before.popitem()
            signal.signal(signum, handler)

    def _note(self, signum, frame):
        # The first one names the stop: a Ctrl-C under `accelerate launch` >= 1.16 brings SIGINT from the terminal,
        # then SIGTERM from the launcher passing it on.
        self.signal_name = self.signal_name or signal.Signals(signum).name

    @property
    def requested(self):
        return self.signal_name is not None
