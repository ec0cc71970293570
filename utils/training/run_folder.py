"""The run folder: where a run's files go and which checkpoint it continues from (one live run per folder:
run_lock.py).

Decisions are the main process's, broadcast to the others: with node-local storage each node would
otherwise find its own `latest` (or none) and the replicas would diverge. Every rank then checks
that it can read the chosen checkpoint: a run folder must be on storage that every node shares.
"""

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from accelerate.utils import broadcast_object_list, gather_object

from utils.core.errors import UserError
from utils.core.io import first_free
from utils.models.lora import frozen_names
from utils.training import checkpoints


class FolderError(UserError):
    """A --resume or --output_dir that cannot be used as asked."""


@dataclass(frozen=True)
class FolderOptions:
    """What the options ask of the run folder, read from them once (utils/config/settings.py): each field is its
    option's value."""

    output_dir: str
    resume: str  # a checkpoint folder, latest, or None
    eval_only: bool  # an evaluation scores a checkpoint in a folder of its own, whatever its schedule
    model: str  # a new folder's name holds it


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


def output_dir_for(options, accelerator, data_name):
    """The run folder: --output_dir, the resumed checkpoint's run, or runs/<time>-<data_name>-<model>."""
    def check_resume():  # on the main process: a rank that cannot read it is named later (resume_folder)
        if not checkpoints.is_complete(options.resume):
            raise FolderError(f"resume: {options.resume} is not a complete checkpoint folder "
                              f"(no {checkpoints.STATE_FILE} in it)")
    if options.resume not in (None, "latest"):
        _decided(accelerator, check_resume)
    if options.output_dir is not None:
        return Path(options.output_dir)
    if options.resume not in (None, "latest") and not options.eval_only:  # an evaluation gets a folder of its own
        return Path(options.resume).resolve().parent.parent

    def new_name():  # holds a timestamp: one name for every rank
        dataset, model = (re.sub(r"[^\w.-]+", "_", name).strip("_") for name in (data_name, options.model))
        return str(first_free(f"runs/{datetime.now():%Y%m%d-%H%M%S}-{dataset}-{model}"))  # names, paths: no slashes
    return Path(_decided(accelerator, new_name))


def _sees(path, text=None):
    """Whether this process finds `path` (holding `text`). One it may not even read (EACCES) counts as not
    found, so that every rank still reaches the gather that reports it."""
    try:
        return path.exists() if text is None else text in path.read_text()
    except OSError:
        return False


def _check_options(kept, state, world_size):
    """`kept`: {option: value} of the options a resumed run must keep (config.options.resume_values); one a
    checkpoint did not record (written before the option was a resume key) is not compared."""
    recorded = state.get("options") or state["schedule"]  # "schedule": checkpoints of earlier versions
    changed = [f"{k} ({recorded[k]} -> {value})" for k, value in kept.items() if k in recorded and recorded[k] != value]
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


def check_frozen(model, fingerprint, state, folder):
    """A --lora checkpoint holds every tensor of `model` but its frozen weights, which must be the ones this run built
    (`fingerprint`: the same --pretrained / --init_from weights; None: a run without adapters); else a FolderError."""
    from safetensors import safe_open

    if fingerprint is None:
        return

    with safe_open(str(folder / "model.safetensors"), framework="pt") as saved:
        keys = set(saved.keys())
    if keys != set(model.state_dict()) - frozen_names(model) or state.get("frozen_sha256") != fingerprint:
        raise FolderError(f"resume: {folder} was trained on other frozen weights than this run built (other "
                          f"--pretrained or --init_from weights, or other adapters); resume with the weights it was "
                          f"made from")


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


def abandon_newer(accelerator, options, out, resume_from):
    """Resuming from an older checkpoint of this run, once every check has passed: the newer history
    moves aside (utils/checkpoints.set_aside_newer), so that `latest` and pruning see only the new one."""
    if resume_from is None or options.eval_only or resume_from.resolve().parent.parent != out.resolve():
        return
    if accelerator.is_main_process:
        moved = checkpoints.set_aside_newer(out, resume_from)
        if moved:
            print(f"resume: {resume_from.name} is older than this run's newest checkpoint: moved the newer "
                  f"{', '.join(moved['names'])} to {moved['to']}", flush=True)
    accelerator.wait_for_everyone()


def _choose(options, out, world_size, kept, probe):
    """The main process's choice of checkpoint; moves a newer, abandoned history out of the way. `probe`: --probe's
    kind, whose run has no checkpoints (its feature pass continues from its files: utils/run/probe.py)."""
    folder = None
    checkpoints.recover(out)
    if options.resume == "latest":
        folder = checkpoints.latest(out)
        if folder is None and probe:
            print(f"resume: a probe has no checkpoints; its feature pass continues from the files under "
                  f"{out / 'features'}", flush=True)
        elif folder is None:
            print(f"resume: no complete checkpoint under {out}: starting afresh", flush=True)
    elif options.resume is not None:
        folder = Path(options.resume)  # complete: output_dir_for checked
    if folder is not None and not options.eval_only:  # scoring weights needs no matching schedule
        _check_options(kept, checkpoints.read_state(folder), world_size)
    same_run = folder is not None and folder.resolve().parent.parent == out.resolve()
    if (out / "config.yaml").exists() and not same_run and options.resume != "latest":
        raise FolderError(f"output_dir: {out} already holds a run; pick another folder or --resume its checkpoint")
    return None if folder is None else str(folder)


def resume_folder(options, accelerator, out, kept, probe=None):
    """The checkpoint to continue from (None: a fresh start), decided once and readable on every rank; `options`:
    FolderOptions; `probe`: --probe's kind (its run has no checkpoints).

    Refuses one that cannot continue exactly (`kept`: {option: value} of those it must share, resume_values()), and
    a folder that holds another run.
    """
    chosen = _decided(accelerator, lambda: _choose(options, out, accelerator.num_processes, kept, probe))
    if chosen is None:
        return None
    folder = Path(chosen)
    blind = [rank for rank, ok in enumerate(gather_object([_sees(folder / checkpoints.STATE_FILE)])) if not ok]
    if blind:
        raise FolderError(f"resume: process(es) {', '.join(map(str, blind))} cannot read the checkpoint {chosen} "
                          f"that the main process chose: every node must see the run folder at the same path "
                          f"(shared storage)")
    return folder
