"""One live run per run folder: the main process holds the folder's lock (an flock on .lock) for as long as it lives,
and every rank checks that it sees the folder the main process locked (shared storage, not a node-local disk)."""

import contextlib
import fcntl
import os
import re
import time
import uuid
from pathlib import Path

import psutil
from accelerate.utils import gather_object

from utils.training.run_folder import FolderError, _decided, _sees


# The lock files this process holds. A child forked while one is held (a DataLoader worker) gets a copy of its
# descriptor, and an flock belongs to the open file, not to a process: the child would hold the folder for as long
# as it lives, past its parent's death (a SIGKILLed run's workers live on for up to 5 s, until their watchdog looks).
# The child closes its copies at once, so the lock dies with the process that took it.
_HELD = set()


def _let_go_in_child():
    for file in _HELD:
        file.close()  # this process's descriptor only: the parent's lock stands
    _HELD.clear()


os.register_at_fork(after_in_child=_let_go_in_child)

# How long a new run waits for processes that outlive a dead run holding its lock (children that kept the
# descriptor: DataLoader workers leave within 5 s of their parent's death).
LEFTOVER_WAIT_S = 15.0


def _pid_alive(pid):
    """Whether process `pid` of this machine still runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _holder(text):
    """(pid, host) of the run that wrote the lock file's first line ("pid N on HOST"); (None, None) if unreadable."""
    found = re.match(r"pid (\d+) on (\S+)", text)
    return (int(found[1]), found[2]) if found else (None, None)


class RunLock:
    """One live run per folder: an exclusive lock on <out>/.lock, held by the main process until it exits.

    flock locks die with the last descriptor of their open file, SIGKILL included: the main process's own, since a
    forked child lets go of its copy at once (_let_go_in_child), so a killed run never leaves the folder locked.
    (On network filesystems without flock support, the lock is advisory at best.)"""

    def __init__(self, out):
        self.out, self.file, self.created, self.token = Path(out), None, [], None

    def acquire(self):
        lock = self.out / ".lock"
        self.created = [p for p in (self.out, lock) if not p.exists()]  # what a failed run removes again
        self.out.mkdir(parents=True, exist_ok=True)
        self.file = open(lock, "a+")
        deadline, waiting = time.monotonic() + LEFTOVER_WAIT_S, False
        while not self._try_lock():
            self.file.seek(0)
            line = self.file.readline().strip()
            pid, host = _holder(line)
            ended = pid is not None and host == os.uname().nodename and not _pid_alive(pid)
            if ended and time.monotonic() < deadline:  # its leftover processes are on their way out
                if not waiting:
                    print(f"output_dir: {self.out} is still locked by processes that the ended run pid {pid} left "
                          f"behind (its DataLoader workers?): waiting up to {LEFTOVER_WAIT_S:.0f} s for them to exit",
                          flush=True)
                waiting = True
                time.sleep(0.2)
                continue
            self.file.close()
            self.file = None
            if ended:
                raise FolderError(f"output_dir: {self.out} is still locked by processes that the ended run pid {pid} "
                                  f"left behind (after {LEFTOVER_WAIT_S:.0f} s); `fuser -v {lock}` names them: stop "
                                  f"them, then rerun") from None
            raise FolderError(f"output_dir: {self.out} is in use by a live run ({line or 'another process'}); wait "
                              f"for it to end (or stop it) before starting another run there") from None
        self.file.seek(0)
        self.file.truncate()
        # The token is new with every run: a rank that reads it here sees this folder, not a copy of it.
        self.token = uuid.uuid4().hex
        self.file.write(f"pid {os.getpid()} on {os.uname().nodename}\nrun {self.token}\n")
        self.file.flush()
        os.fsync(self.file.fileno())  # on network storage, visible to other nodes now
        _HELD.add(self.file)
        return self

    def _try_lock(self):
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def release(self, failed=False):
        """Unlock. After a failure, remove the lock file and the folder if this run created them and
        wrote nothing else: bad input leaves no trace."""
        if self.file is None or self.file.closed:  # closed: a forked child's copy (_let_go_in_child)
            return
        _HELD.discard(self.file)
        fcntl.flock(self.file, fcntl.LOCK_UN)
        if failed:
            for path in reversed(self.created):  # the file, then the folder if it is empty now
                if path.is_dir():
                    with contextlib.suppress(OSError):
                        path.rmdir()
                else:
                    path.unlink(missing_ok=True)
        self.file.close()
        self.file = None


def is_held(out):
    """Whether a live run holds the lock of run folder `out` (asked with a non-blocking flock, let go at once)."""
    try:
        with open(Path(out) / ".lock") as file:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        return False
    except BlockingIOError:
        return True
    return False


def lock_run_folder(accelerator, out):
    """The main process takes the folder's lock (None elsewhere); if it cannot, every rank fails with its line.

    Then every rank reads the lock file for the token the main process has just written there: a rank
    that does not find it has another folder under that path (a node-local disk), where the run would
    be split silently (its checkpoint shards and RNG states written where the main process never looks).
    """
    held = []

    def lock():
        held.append(RunLock(out).acquire())
        return held[0].token

    token = _decided(accelerator, lock)
    blind = [rank for rank, seen in enumerate(gather_object([_sees(out / ".lock", token)])) if not seen]
    if blind:
        if held:
            held[0].release(failed=True)
        raise FolderError(f"output_dir: process(es) {', '.join(map(str, blind))} do not see the run folder {out} as "
                          f"the main process does: every node must see it at the same path (shared storage); give "
                          f"--output_dir a path on storage that every node mounts")
    return held[0] if held else None
