"""The run folder: which checkpoint a run continues from, and where its files go."""

import re
from datetime import datetime
from pathlib import Path

from accelerate.utils import broadcast_object_list

from utils import checkpoints
from utils.presets import source_name


class FolderError(Exception):
    """A --resume or --output_dir that cannot be used as asked."""


# Options that lay out the LR schedule: a resumed run must use the values its checkpoint was made with.
SCHEDULE_KEYS = ("epochs", "batch_size", "grad_accum_steps", "lr", "lr_schedule", "warmup_epochs",
                 "warmup_start_factor", "min_lr", "lr_milestones", "lr_gamma")


def resume_folder(args, world_size):
    """The checkpoint to continue from (None: a fresh start); refuses one that cannot continue exactly.

    Also refuses to write into a folder that holds another run. Runs on every rank before any rank
    writes (main() puts a barrier after it).
    """
    folder = None
    if args.resume == "latest":
        folder = checkpoints.latest(args.output_dir)
        if folder is None:
            print(f"resume: no complete checkpoint under {args.output_dir}: starting afresh", flush=True)
    elif args.resume is not None:
        folder = Path(args.resume)
        if not checkpoints.is_complete(folder):
            raise FolderError(f"resume: {args.resume} is not a complete checkpoint folder "
                              f"(no {checkpoints.STATE_FILE} in it)")
    if folder is not None and not args.eval_only:  # scoring weights needs no matching schedule
        state = checkpoints.read_state(folder)
        changed = [k for k in SCHEDULE_KEYS if state["schedule"].get(k) != getattr(args, k)]
        if state["world_size"] != world_size:
            changed.append(f"world size ({state['world_size']} -> {world_size})")
        if changed:
            raise FolderError(f"resume: the checkpoint's schedule was laid out for other values of: "
                              f"{', '.join(changed)}; resume with the same ones")
    run_dir = folder.resolve().parent.parent if folder is not None else None
    if args.output_dir is not None and (Path(args.output_dir) / "config.yaml").exists() \
            and Path(args.output_dir).resolve() != run_dir and args.resume != "latest":
        raise FolderError(f"output_dir: {args.output_dir} already holds a run; pick another folder or --resume "
                          f"its checkpoint")
    return folder


def output_dir_for(args, accelerator, resume_from):
    """The run folder: --output_dir, the resumed run's folder, or runs/<time>-<dataset>-<model>."""
    if args.output_dir is not None:
        return Path(args.output_dir)
    if resume_from is not None and not args.eval_only:  # an evaluation gets a folder of its own
        return resume_from.resolve().parent.parent
    # The name holds a timestamp: take the main process's, so that every rank writes to one folder.
    name = [None]
    if accelerator.is_main_process:
        dataset = re.sub(r"[^\w.-]+", "_", source_name(args))  # a Hub name or a path: no slashes
        base = f"runs/{datetime.now():%Y%m%d-%H%M%S}-{dataset}-{args.model}"
        name[0] = next(f"{base}{suffix}" for suffix in [""] + [f"-{i}" for i in range(2, 1000)]
                       if not Path(f"{base}{suffix}").exists())
    broadcast_object_list(name)
    return Path(name[0])
