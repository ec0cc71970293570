"""--lr_find and --lr auto: the LR range test run before the run (utils/training/lr_range.py for its arithmetic), on a
job of its own that is freed after it; and what a resumed run takes instead of searching again (resumed_choices)."""

import contextlib
from dataclasses import replace

from accelerate.utils import set_seed

from utils.core.errors import ConfigError
from utils.reporting.lr_range import SweepLogger, write_lr_find
from utils.run.job import build_job
from utils.training import checkpoints
from utils.training.lr_range import LossDiverged, sweep_schedule
from utils.training.objective import NonFiniteLoss


def find_lr(settings, accelerator, out, train_epoch):
    """--lr_find and --lr auto: the LR range test (utils/training/lr_range.py) as --lr_find_steps steps of this
    run's own training loop (`train_epoch`, train_classification.train_one_epoch: accumulation, mixed precision, MixUp,
    the NaN check) at an LR swept exponentially from --lr_find_min to --lr_find_max, on a job of its own built from
    Settings `settings` made for it (quietly; without EMA, checkpoints or records) and freed after it: the run is then
    built from scratch, so that --lr auto trains as the run with the suggestion typed by hand. Each step's loss is the
    mean over every sample of every process; every process stops at the same step, where that mean diverges. Writes
    lr_find.csv and lr_find.png (not with --no_plots); returns ({"suggested": lr, "lowest": lr, "steepest": lr} or
    None when the curve holds no LR, the BatchPlan the job took); (None, None) without either option. --lr auto on a
    curve that holds no LR is refused in one line."""
    test, lr = settings.range_test, settings.optimizer.lr
    if not (test.lr_find or lr == "auto"):
        return None, None
    set_seed(settings.data.seed)
    steps, low, high = test.lr_find_steps, test.lr_find_min, test.lr_find_max
    sweep = replace(settings, model=replace(settings.model, ema=False), optimizer=replace(settings.optimizer, lr=high),
                    loop=replace(settings.loop, max_train_steps=steps),
                    checkpoints=replace(settings.checkpoints, checkpoint_every_steps=None))
    with quiet(accelerator):
        job, _, _ = build_job(sweep, accelerator, out)
    job.scheduler = sweep_schedule(job.optimizer, low, high, steps)
    job.logger = SweepLogger(accelerator, low, high, steps, job.steps_per_epoch)
    stopped, epoch, global_step = f"the last at lr {high:g}", 0, 0  # (or where the loss diverged)
    try:
        while global_step < steps:
            global_step = train_epoch(job, epoch, global_step).global_step
            epoch += 1
    except (LossDiverged, NonFiniteLoss) as e:
        stopped = f"{e}" if isinstance(e, LossDiverged) else f"diverged at step {len(job.logger.curve.lrs) + 1}: {e}"
    finally:
        job.close()  # its workers, and an epoch left mid-way
        accelerator.free_memory()  # Accelerate's references to its model, optimizer, scheduler and loaders
    curve, plots = job.logger.curve, not settings.end.no_plots
    suggestions, why = curve.reading()
    written = [out / "lr_find.csv", out / "lr_find.json"] + ([out / "lr_find.png"] if plots else [])
    if accelerator.is_main_process:
        write_lr_find(out, curve, suggestions, why, stopped, plots=plots)
    said = reading_line(f"{len(curve.lrs)} steps from {low:g} to {high:g} ({stopped})", suggestions, why, lr)
    accelerator.print(f"lr_find: {said} -> {', '.join(map(str, written))}")
    if test.lr_find:
        accelerator.end_training()  # the range test alone: the run ends here
    return suggestions, job.settings.plan


def reading_line(swept, suggestions, why, lr):
    """The range test's reading in words (`swept`: how far it went); --lr auto on a curve that holds no LR (`why`) is
    refused in one line."""
    if suggestions is None:
        if lr == "auto":
            raise ConfigError(f"lr auto: {swept}: no LR suggested, {why}; give --lr (the recipe's, or one read from "
                              f"lr_find.csv), or sweep over more --lr_find_steps")
        return f"{swept}: no LR suggested, {why} (a longer sweep, --lr_find_steps, may learn enough to show one)"
    return (f"{swept}; suggested peak LR {suggestions['suggested']:g}{' (--lr auto trains with it)' * (lr == 'auto')}: "
            f"a third of {suggestions['lowest']:g}, where the smoothed loss is lowest (steepest fall at "
            f"{suggestions['steepest']:g})")


@contextlib.contextmanager
def quiet(accelerator):
    """The accelerator's lines silenced in the block (a job built a second time: its lines are said once)."""
    accelerator.print = lambda *args, **kwargs: None
    try:
        yield
    finally:
        del accelerator.print  # the method again


def resumed_choices(settings, folder, say):
    """--batch_size auto and --lr auto, resumed from checkpoint `folder`: the Settings with the micro-batch,
    accumulation and LR it was trained with, found when its run started (a resumed run never searches again: it must
    train on bitwise)."""
    optimizer = settings.optimizer
    if folder is None or "auto" not in (optimizer.batch_size, optimizer.lr):
        return settings
    recorded = checkpoints.read_state(folder)["options"]
    if optimizer.batch_size == "auto":
        micro, accumulation = recorded["batch_size"], recorded["grad_accum_steps"]
        say(f"batch_size auto: micro-batch {micro} x {accumulation} accumulation step(s), as the checkpoint was "
            f"trained (not tried again)")
        optimizer = replace(optimizer, batch_size=micro, grad_accum_steps=accumulation)
        settings = replace(settings, data=replace(settings.data, batch_size=micro, grad_accum_steps=accumulation))
    if optimizer.lr == "auto":
        optimizer = replace(optimizer, lr=recorded["lr"])
        say(f"lr auto: {optimizer.lr:g}, as the checkpoint was trained (the range test not run again)")
    return replace(settings, optimizer=optimizer)  # the plan: build_job's take_batch


def with_found(settings, found, plan):
    """The Settings of the run after its LR range test (`found`: find_lr's suggestions, `plan`: the BatchPlan its job
    took, None without one): --lr auto's LR the suggestion, from here on the run that has it typed; the plan in force.
    """
    if plan is not None:
        settings = replace(settings, plan=plan)
    if settings.optimizer.lr != "auto":
        return settings
    return replace(settings, optimizer=replace(settings.optimizer, lr=found["suggested"]))
