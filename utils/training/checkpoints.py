"""Checkpoints that are complete or absent: written aside, renamed into place, found by `latest`, pruned; where
training stands in one (Position)."""

import errno
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from accelerate.utils import gather_object

from utils.core.errors import UserError
from utils.core.io import first_free, usual_permissions, write_json_atomic

STATE_FILE = "training_state.json"  # written last: a folder holding it is a complete checkpoint


@dataclass(frozen=True)
class CheckpointOptions:
    """When the loop checkpoints and what it keeps (--checkpoint_every_steps, --save_every, --keep_last,
    --keep_best)."""

    checkpoint_every_steps: int  # also mid-epoch, every N optimizer steps (None: not by steps)
    save_every: int  # at an epoch's end, every N epochs (0: only at the end)
    keep_last: int  # the newest N checkpoints kept (0: all)
    keep_best: int  # also the K best by the tracked figure, best/ the best weights (0: none)


class CheckpointError(UserError):
    """A checkpoint the disk could not take: the run stops, the last complete checkpoint kept."""


class Position(NamedTuple):
    """Where training stands: the epoch to run, its optimizer steps already done, the global step, the epoch whose
    validation is still owed (an interrupt at an epoch's end) or None, and whether its weights were validated."""
    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    owed_epoch: int = None
    validated: bool = False  # the checkpoint's weights were validated, their row written, before it was saved


def resume_position(state):
    """The Position a checkpoint's training_state.json continues from."""
    owed = state["epoch"] if state.get("validation_pending") else None
    validated = state.get("val_score") is not None
    if state["epoch_end"]:
        return Position(state["epoch"] + 1, 0, state["global_step"], owed, validated)
    return Position(state["epoch"], state["step_in_epoch"], state["global_step"], owed, validated)


def carried(state, lr_found, batch):
    """(TrainTime, --lr auto's suggestions, BatchPlan) of a run resumed from checkpoint `state`: what its first start
    found, kept for its records (run.json, results.json): its seconds of training so far, the suggestions and
    --batch_size auto's tries (the resumed run searches for neither again). A checkpoint written before they were kept
    leaves `lr_found` and `batch` as they are."""
    tried = (state.get("batch") or {}).get("tried")
    if tried and batch is not None:
        batch = replace(batch, tried=tuple(tuple(attempt) for attempt in tried))
    return TrainTime(state.get("train_time_s", 0.0)), state.get("lr_found", lr_found), batch


class TrainTime:
    """Seconds spent training (in the epochs' steps, not validating or saving), over every attempt of a resumed run:
    a checkpoint keeps what it had (`seconds()`, the running epoch's part included), its resumed run goes on from
    there."""

    def __init__(self, before=0.0):
        self.before, self.since = before, None  # since: when the running epoch began (None between epochs)

    def start(self):
        self.since = time.perf_counter()

    def stop(self):
        self.before, self.since = self.seconds(), None

    def seconds(self):
        return self.before + (time.perf_counter() - self.since if self.since is not None else 0.0)


def folder_of(out):
    return Path(out) / "checkpoints"


def is_complete(folder):
    folder = Path(folder)
    return not folder.name.startswith(".") and (folder / STATE_FILE).is_file()


def read_state(folder):
    return json.loads((Path(folder) / STATE_FILE).read_text())


def _order(state):
    """Where a checkpoint stands in its run: by global step, an epoch's end after a step of the same number."""
    return state["global_step"], state["epoch_end"]


def _with_states(out):
    """[(folder, state)] of the complete checkpoints, oldest first."""
    root = folder_of(out)
    found = [(f, read_state(f)) for f in root.iterdir() if is_complete(f)] if root.is_dir() else []
    return sorted(found, key=lambda fs: _order(fs[1]))


def complete_checkpoints(out):
    """Complete checkpoints under <out>/checkpoints, oldest first."""
    return [folder for folder, _ in _with_states(out)]


def latest(out):
    found = complete_checkpoints(out)
    return found[-1] if found else None


def save(accelerator, out, name, state, own_files=None):
    """accelerator.save_state into a hidden folder, then rename it into place once every rank is done.
    `own_files(folder)`, when given, writes this rank's files of its own there (every rank calls it).

    A process killed mid-save leaves only the hidden folder, which `latest` ignores: the previous
    checkpoint stays the newest complete one.
    """
    final, aside = folder_of(out) / name, folder_of(out) / f".partial-{name}"
    if accelerator.is_main_process and aside.exists():
        shutil.rmtree(aside)  # left by a process killed while saving
    accelerator.wait_for_everyone()
    failed = _written(lambda: (accelerator.save_state(str(aside)), own_files and own_files(aside)))
    if not any(gather_object([failed])) and accelerator.is_main_process:  # every rank's files (RNG states too) are in
        failed = _written(lambda: (usual_permissions(aside), write_json_atomic(aside / STATE_FILE, state)))
    if any(failures := gather_object([failed])):
        line = None
        if accelerator.is_main_process:
            shutil.rmtree(aside, ignore_errors=True)
            line = _disk_line(accelerator, out, aside, next(f for f in failures if f))
        raise CheckpointError(next(said for said in gather_object([line]) if said))
    if accelerator.is_main_process:
        old = folder_of(out) / f".replaced-{name}"
        shutil.rmtree(old, ignore_errors=True)  # left by a process killed while replacing (recover() ran first)
        if final.exists():  # the same name saved again (e.g. after a resume that redid the same steps)
            # Renamed aside (atomic), never deleted in place: a kill mid-delete would leave a folder
            # that still holds its state file and looks complete. A kill between the two renames
            # leaves this name absent until recover() renames the old one back.
            os.replace(final, old)
        os.replace(aside, final)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


# What torch, safetensors and Python say when a file cannot be written for want of space (torch's own writer gives
# only its "unexpected pos" when the disk fills); any other error is left to raise as it is.
WRITE_FAILED = re.compile(r"unexpected pos|file write failed|No space left|Disk quota|File too large|os error 2[78]")


def _written(write):
    """None once `write()` has written its files, or what stopped it when the disk could not take them."""
    try:
        write()
    except Exception as error:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return error.strerror
        if not WRITE_FAILED.search(str(error)):
            raise
        reason = re.search(r"I/O error: (.*?) \(os error", str(error))
        return reason.group(1) if reason else "a file could not be written"
    return None


def _disk_line(accelerator, out, aside, reason):
    """The line a save the disk could not take stops the run with: the folder, the space a checkpoint takes (the last
    one's size, else the weights' and optimizer's tensors), the space free, and that the last checkpoint is whole."""
    previous = latest(out)
    if previous is not None:
        need = sum(f.stat().st_size for f in previous.rglob("*") if f.is_file())
    else:
        states = [m.state_dict() for m in accelerator._models] + [o.state_dict() for o in accelerator._optimizers]
        need = sum(t.numel() * t.element_size() for t in _tensors(states))
    free = shutil.disk_usage(aside.parent).free
    kept = f"the last one, {previous.name}, is whole" if previous is not None else "none was saved before"
    return (f"checkpoint: could not write {aside.with_name(aside.name.removeprefix('.partial-'))} ({reason}): a "
            f"checkpoint takes about {need / 2**20:.1f} MiB, {free / 2**20:.1f} MiB are free there; {kept}. Free space "
            f"on that disk (or move the run folder to another) and run again with --resume latest")


def _tensors(value):
    if hasattr(value, "element_size"):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def recover(out):
    """Put back a checkpoint that a process killed mid-replacement left renamed aside (see save)."""
    for old in folder_of(out).glob(".replaced-*"):
        final = old.with_name(old.name.removeprefix(".replaced-"))
        if not final.exists() and (old / STATE_FILE).is_file():
            os.replace(old, final)


def set_aside_newer(out, resumed):
    """Resuming from an older checkpoint of this run: its newer checkpoints (and best/ weights from
    after it) belong to a history that is being abandoned. Move them to <out>/abandoned/<time>/, where
    neither `latest` nor pruning sees them, rather than delete them. Returns what moved, or None.
    """
    position = _order(read_state(resumed))
    newer = [f for f, st in _with_states(out) if _order(st) > position]
    best = Path(out) / "best" / "metrics.json"
    best_is_newer = best.is_file() and json.loads(best.read_text())["global_step"] > position[0]
    if not newer and not best_is_newer:
        return None
    to = first_free(Path(out) / "abandoned" / f"{datetime.now():%Y%m%d-%H%M%S}-after-{Path(resumed).name}")
    (to / "checkpoints").mkdir(parents=True)
    for folder in newer:
        os.replace(folder, to / "checkpoints" / folder.name)
    if best_is_newer:
        os.replace(best.parent, to / "best")
    return {"names": [f.name for f in newer] + (["best/"] if best_is_newer else []), "to": str(to)}


def prune(out, keep_last, keep_best=0):
    """Keep the newest `keep_last` (0: all of them) and, besides, the `keep_best` best-scoring complete
    checkpoints; remove the rest, and leftovers of killed processes.

    Call it only after a newer checkpoint is complete, when no save is in flight. A folder is
    renamed out of the way before it is deleted, so a kill mid-delete leaves a hidden leftover (which
    the next prune removes), never a half-deleted folder that looks like a checkpoint.
    """
    found = _with_states(out)  # each state file read once
    drop = []
    if keep_last:  # keep_last 0 keeps every checkpoint, whatever keep_best says
        scored = [(f, st) for f, st in found if score(st) is not None]
        # Ties go to the earlier checkpoint, the one whose weights <output_dir>/best/ holds.
        ranked = [f for f, _ in sorted(scored, key=lambda fs: (score(fs[1]), -fs[1]["global_step"]))]
        keep = set(ranked[-keep_best:] if keep_best else []) | {f for f, _ in found[-keep_last:]}
        drop = [f for f, _ in found if f not in keep]
    for folder in drop:
        os.replace(folder, folder.with_name(f".deleting-{folder.name}"))
    for leftover in folder_of(out).glob(".*"):
        shutil.rmtree(leftover, ignore_errors=True)


def score(state):
    """A checkpoint's validation figure that --keep_best ranks by (val top-1, or mAP for multi-label data; the
    EMA's with --model_ema), None when none was taken; `val_top1` in checkpoints written before it was named so."""
    return state.get("val_score", state.get("val_top1"))


def keep_if_best(accelerator, model, out, record, summary, key="val_top1"):
    """--keep_best: weights that beat the best `key` figure so far (record[-1]) go to <out>/best/
    (the EMA's weights and val_ema_top1 with --model_ema).

    Call it on every rank (save_model may be collective) with the same gathered figures.
    """
    best = out / "best" / "metrics.json"
    if not record:  # first call: a resumed run continues its record
        record.append(json.loads(best.read_text())[key] if best.exists() else -1.0)
    if summary[key] <= record[-1]:
        return
    record.append(summary[key])
    accelerator.save_model(model, str(out / "best"))
    if accelerator.is_main_process:
        usual_permissions(out / "best")
        write_json_atomic(best, summary)
