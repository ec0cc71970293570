"""Checkpoints that are complete or absent: written aside, renamed into place, found by `latest`, pruned."""

import json
import os
import shutil
from pathlib import Path

from utils.io import write_json_atomic

STATE_FILE = "training_state.json"  # written last: a folder holding it is a complete checkpoint


def folder_of(out):
    return Path(out) / "checkpoints"


def is_complete(folder):
    folder = Path(folder)
    return not folder.name.startswith(".") and (folder / STATE_FILE).is_file()


def read_state(folder):
    return json.loads((Path(folder) / STATE_FILE).read_text())


def _with_states(out):
    """[(folder, state)] of the complete checkpoints, oldest first (by global step, epoch ends last)."""
    root = folder_of(out)
    found = [(f, read_state(f)) for f in root.iterdir() if is_complete(f)] if root.is_dir() else []
    return sorted(found, key=lambda fs: (fs[1]["global_step"], fs[1]["epoch_end"]))


def complete_checkpoints(out):
    """Complete checkpoints under <out>/checkpoints, oldest first."""
    return [folder for folder, _ in _with_states(out)]


def latest(out):
    found = complete_checkpoints(out)
    return found[-1] if found else None


def save(accelerator, out, name, state):
    """accelerator.save_state into a hidden folder, then rename it into place once every rank is done.

    A process killed mid-save leaves only the hidden folder, which `latest` ignores: the previous
    checkpoint stays the newest complete one.
    """
    final, aside = folder_of(out) / name, folder_of(out) / f".partial-{name}"
    if accelerator.is_main_process and aside.exists():
        shutil.rmtree(aside)  # left by a process killed while saving
    accelerator.wait_for_everyone()
    accelerator.save_state(str(aside))
    accelerator.wait_for_everyone()  # every rank's files (its RNG states among them) are in
    if accelerator.is_main_process:
        write_json_atomic(aside / STATE_FILE, state)
        if final.exists():  # the same name saved again (e.g. a re-run of the same last step)
            shutil.rmtree(final)
        os.replace(aside, final)
    accelerator.wait_for_everyone()
    return final


def prune(out, keep_last, keep_best=0):
    """Keep the newest `keep_last` and the `keep_best` best-scoring complete checkpoints (0: no limit of
    that kind; both 0: keep all); remove the rest, and leftovers of killed processes.

    Call it only after a newer checkpoint is complete, when no save is in flight. A folder is
    renamed out of the way before it is deleted, so a kill mid-delete leaves a hidden leftover (which
    the next prune removes), never a half-deleted folder that looks like a checkpoint.
    """
    found = _with_states(out)  # each state file read once
    drop = []
    if keep_last or keep_best:
        scored = [(f, st) for f, st in found if st.get("val_top1") is not None]
        # Ties go to the earlier checkpoint, the one whose weights <output_dir>/best/ holds.
        ranked = [f for f, _ in sorted(scored, key=lambda fs: (fs[1]["val_top1"], -fs[1]["global_step"]))]
        keep = set(ranked[-keep_best:] if keep_best else []) | {f for f, _ in (found[-keep_last:] if keep_last else [])}
        drop = [f for f, _ in found if f not in keep]
    for folder in drop:
        os.replace(folder, folder.with_name(f".deleting-{folder.name}"))
    for leftover in folder_of(out).glob(".*"):
        shutil.rmtree(leftover, ignore_errors=True)


def keep_if_best(accelerator, model, out, record, summary):
    """--keep_best: weights that beat the best val top-1 so far (record[-1]) go to <out>/best/.

    Call it on every rank (save_model may be collective) with the same gathered figures.
    """
    best = out / "best" / "metrics.json"
    if not record:  # first call: a resumed run continues its record
        record.append(json.loads(best.read_text())["val_top1"] if best.exists() else -1.0)
    if summary["val_top1"] <= record[-1]:
        return
    record.append(summary["val_top1"])
    accelerator.save_model(model, str(out / "best"))
    if accelerator.is_main_process:
        write_json_atomic(best, summary)
