"""When the training loop validates, checkpoints and ends: its options (LoopOptions; the checkpoints' own are
CheckpointOptions, utils/training/checkpoints.py), and the cadence they ask for as pure functions of where training
stands, which train_classification.py's loop asks at each step and epoch."""

from dataclasses import dataclass


@dataclass(frozen=True)
class LoopOptions:
    """The training loop's own (train_classification.py): when it validates, logs and ends (here), and what it does
    with a step that cannot go on as usual."""

    max_train_steps: int  # stop after this many optimizer steps (None: the epochs decide)
    val_every: int  # validate every N epochs, and after the last
    log_every: int  # a training line every N optimizer steps
    clip_grad_norm: float  # the global gradient norm's ceiling (None: no clipping)
    skip_nonfinite_steps: int  # optimizer steps with a NaN/inf loss skipped before the run stops


def checkpoint_due(cadence, epoch, global_step, epoch_end, finished=False, validated=False):
    """The checkpoint cadence (CheckpointOptions `cadence`): every --checkpoint_every_steps optimizer steps, and at an
    epoch's end every --save_every epochs or after a validation that --keep_best may keep; never at training's end,
    which saves its own (as does a stop)."""
    every_steps = bool(cadence.checkpoint_every_steps) and global_step % cadence.checkpoint_every_steps == 0
    if not epoch_end:
        return every_steps
    every_epochs = bool(cadence.save_every) and (epoch + 1) % cadence.save_every == 0
    return (every_epochs or every_steps or bool(cadence.keep_best) and validated) and not finished


def reached_end(loop, epochs, epoch, global_step, epoch_end):
    """Whether training of `epochs` epochs has ended at `global_step` of `epoch`: its last epoch run to its end
    (`epoch_end`; a stop mid-way through it leaves steps to train, and no validation owed), or --max_train_steps
    reached (LoopOptions `loop`)."""
    last_epoch_done = epoch_end and epoch + 1 == epochs
    return last_epoch_done or (loop.max_train_steps is not None and global_step >= loop.max_train_steps)


def validation_due(loop, epoch, finished):
    """Whether the end of `epoch` validates: every --val_every epochs, and when training has `finished`."""
    return (epoch + 1) % loop.val_every == 0 or finished
