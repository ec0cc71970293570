"""The run folder: where a run's files go, one live run per folder, and which checkpoint it continues from.

Decisions are the main process's, broadcast to the others: with node-local storage each node would
otherwise find its own `latest` (or none) and the replicas would diverge. Every rank then checks
that it can read the chosen checkpoint: a run folder must be on storage that every node shares.
"""

import contextlib
import fcntl
import os
import re
import time
import uuid
from datetime import datetime
from pathlib import Path

import psutil
from accelerate.utils import broadcast_object_list, gather_object

from utils.core.errors import UserError
from utils.core.io import first_free
from utils.training import checkpoints


class FolderError(UserError):
    """A --resume or --output_dir that cannot be used as asked."""


def _decided(accelerator, decide):
    """Run `decide()` on the main process only; every rank gets its value, or raises its FolderError."""
    box = [None]
    if accelerator.is_main_process:
        try:
            box[0] = ("ok", decide())
        except FolderError as e:
            box[0] = ("error", str(e))
        except OSError as e:  # a folder that cannot be created or read: the same line on every rank
            box[0] = ("error", f"output_dir: {e.strerror}: {e.filename}")
    broadcast_object_list(box)
    kind, value = box[0]
    if kind == "error":
        raise FolderError(value)
    return value


def output_dir_for(args, accelerator, data_name):
    """The run folder: --output_dir, the resumed checkpoint's run, or runs/<time>-<data_name>-<model>."""
    def check_resume():  # on the main process: a rank that cannot read it is named later (resume_folder)
        if not checkpoints.is_complete(args.resume):
            raise FolderError(f"resume: {args.resume} is not a complete checkpoint folder "
                              f"(no {checkpoints.STATE_FILE} in it)")
    if args.resume not in (None, "latest"):
        _decided(accelerator, check_resume)
    if args.output_dir is not None:
        return Path(args.output_dir)
    if args.resume not in (None, "latest") and not args.eval_only:  # an evaluation gets a folder of its own
        return Path(args.resume).resolve().parent.parent

    def new_name():  # holds a timestamp: one name for every rank
        dataset, model = (re.sub(r"[^\w.-]+", "_", name).strip("_") for name in (data_name, args.model))
        return str(first_free(f"runs/{datetime.now():%Y%m%d-%H%M%S}-{dataset}-{model}"))  # names, paths: no slashes
    return Path(_decided(accelerator, new_name))


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


def _sees(path, text=None):
    """Whether this process finds `path` (holding `text`). One it may not even read (EACCES) counts as not
    found, so that every rank still reaches the gather that reports it."""
    try:
        return path.exists() if text is None else text in path.read_text()
    except OSError:
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


def _check_options(args, state, world_size, keys):
    """`keys`: the options a resumed run must keep (config.options.resume_keys); one a checkpoint did not
    record (written before the option was a resume key) is not compared."""
    recorded = state.get("options") or state["schedule"]  # "schedule": checkpoints of earlier versions
    changed = [f"{k} ({recorded[k]} -> {getattr(args, k)})" for k in keys
               if k in recorded and recorded[k] != getattr(args, k)]
    if state["world_size"] != world_size:
        changed.append(f"world size ({state['world_size']} -> {world_size})")
    if changed:
        raise FolderError(f"resume: the checkpoint was made with other values of: {', '.join(changed)}; resume "
                          f"with the same ones (the LR schedule, sample order and optimizer state depend on them), "
                          f"or start a new run from its weights with --init_from <checkpoint>")


def check_data(accelerator, state, signature):
    """Refuse to continue on other training data: the schedule's steps, the sample order and the
    classifier's shape come from it. Every rank compares (a node with another copy of the data too)."""
    recorded = state.get("data")
    seen = gather_object([signature])
    if any(other != seen[0] for other in seen):
        raise FolderError("resume: the processes see different training data (every node needs the same copy)")
    if recorded is not None and recorded != signature:
        changed = [f"{recorded[k]} -> {signature[k]} {k.replace('train_samples', 'images')}"
                   for k in ("train_samples", "classes") if k in recorded and recorded[k] != signature[k]]
        raise FolderError(f"resume: the training data changed since the checkpoint "
                          f"({', '.join(changed) or 'other labels or order'}); resume on the same data, or start "
                          f"a new run from its weights with --init_from <checkpoint>")


def check_teacher(state, identity):
    """Refuse to continue a distillation with another teacher (other weights, wherever they lie and whatever they
    are called), or without the one it had, or with one when it had none. A checkpoint written before teachers were
    recorded holds none: it had no teacher."""
    recorded = state.get("teacher")
    if (recorded or {}).get("weights_sha256") == (identity or {}).get("weights_sha256"):
        return

    def describe(teacher):
        return f"{teacher['teacher']} (weights sha256 {teacher['weights_sha256'][:12]})" if teacher else "no teacher"
    raise FolderError(f"resume: the checkpoint was distilled from {describe(recorded)}, this run has "
                      f"{describe(identity)}; resume with the same teacher, or start a new run from its weights with "
                      f"--init_from <checkpoint>")


def abandon_newer(accelerator, args, out, resume_from):
    """Resuming from an older checkpoint of this run, once every check has passed: the newer history
    moves aside (utils/checkpoints.set_aside_newer), so that `latest` and pruning see only the new one."""
    if resume_from is None or args.eval_only or resume_from.resolve().parent.parent != out.resolve():
        return
    if accelerator.is_main_process:
        moved = checkpoints.set_aside_newer(out, resume_from)
        if moved:
            print(f"resume: {resume_from.name} is older than this run's newest checkpoint: moved the newer "
                  f"{', '.join(moved['names'])} to {moved['to']}", flush=True)
    accelerator.wait_for_everyone()


def _choose(args, out, world_size, keys):
    """The main process's choice of checkpoint; moves a newer, abandoned history out of the way."""
    folder = None
    checkpoints.recover(out)
    if args.resume == "latest":
        folder = checkpoints.latest(out)
        if folder is None:
            print(f"resume: no complete checkpoint under {out}: starting afresh", flush=True)
    elif args.resume is not None:
        folder = Path(args.resume)  # complete: output_dir_for checked
    if folder is not None and not args.eval_only:  # scoring weights needs no matching schedule
        _check_options(args, checkpoints.read_state(folder), world_size, keys)
    same_run = folder is not None and folder.resolve().parent.parent == out.resolve()
    if (out / "config.yaml").exists() and not same_run and args.resume != "latest":
        raise FolderError(f"output_dir: {out} already holds a run; pick another folder or --resume its checkpoint")
    return None if folder is None else str(folder)


def resume_folder(args, accelerator, out, keys):
    """The checkpoint to continue from (None: a fresh start), decided once and readable on every rank.

    Refuses one that cannot continue exactly (`keys`: the options it must share, resume_keys()), and a
    folder that holds another run.
    """
    chosen = _decided(accelerator, lambda: _choose(args, out, accelerator.num_processes, keys))
    if chosen is None:
        return None
    folder = Path(chosen)
    blind = [rank for rank, ok in enumerate(gather_object([_sees(folder / checkpoints.STATE_FILE)])) if not ok]
    if blind:
        raise FolderError(f"resume: process(es) {', '.join(map(str, blind))} cannot read the checkpoint {chosen} "
                          f"that the main process chose: every node must see the run folder at the same path "
                          f"(shared storage)")
    return folder
