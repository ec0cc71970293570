"""The batch plan a run takes (utils/training/batch_size.py): the options' (given_batch), put in force everywhere it is
read (take_batch); and --batch_size auto's tries, one training step of a micro-batch on the run's own model, optimizer
and input, built for the tries and thrown away after them.

What a step holds on the device is what the run will: the model as the options build it (its library, dtype under
--mixed_precision, channels-last, gradient checkpointing, frozen layers), its optimizer's state after a step, the
EMA's copy of the weights and the teacher's forward pass, at the run's largest train input (the last size of a
progressive-resize schedule, a clip's frames for video). The step runs eager: --compile's graphs are not tried.
The tries' objects are the run's twins, not the run's: its weights, optimizer, BatchNorm statistics and loaders are
built afterwards as they would have been, and the random streams are put back as they were, so a run with
--batch_size auto trains bitwise as the same run with the numbers found typed by hand. DDP's gradient buckets (one
more copy of the gradients) are not in the tries: MEMORY_MARGIN leaves room for them.
"""

import contextlib
import copy
import gc
import random
from dataclasses import replace

import numpy as np
import torch

from utils.training.batch_size import DEFAULT_ACCUMULATION, MEMORY_MARGIN, BatchPlan, plan_for


@contextlib.contextmanager
def random_state_kept(device):
    """Python's, numpy's, torch's and the device's random streams as they were before the block."""
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else None, device_type=device.type):
        yield
    random.setstate(python)
    np.random.set_state(numpy)


def largest_input(inp, epochs):
    """The shape of one sample of the run's largest train input: (C, H, W), or (C, T, H, W) for clips."""
    side = max(inp.train_crop(epoch) for epoch in range(max(epochs, 1)))
    return (inp.channels, inp.frames, side, side) if inp.video else (inp.channels, side, side)


def trial_steps(build, accelerator, inp, epochs, chosen, teacher=None):
    """(attempt, release): `attempt(micro)` trains one step of `micro` random samples on the model and optimizer that
    `build()` returns (the run's, built anew), raising the device's out-of-memory error when it does not fit in the
    device's memory less MEMORY_MARGIN; `release()` frees them. `chosen`: ModelOptions (its EMA, channels-last)."""
    device = accelerator.device
    model, optimizer = build()
    model.train()
    shadow = copy.deepcopy(model) if chosen.ema else None  # --model_ema's averaged copy of the weights
    shape = largest_input(inp, epochs)
    memory_format = (torch.channels_last_3d if inp.video else torch.channels_last) if chosen.channels_last else None

    def attempt(micro):
        measured = device.type != "cpu"
        if measured:
            torch.accelerator.reset_peak_memory_stats(device)
        try:
            pixels = torch.randn((micro, *shape), device=device)
            if memory_format is not None:
                pixels = pixels.contiguous(memory_format=memory_format)
            with accelerator.autocast():
                outputs = model(pixels)
                if teacher is not None:
                    with torch.no_grad():
                        teacher.model(pixels)
            outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            sum(out.float().logsumexp(dim=1).mean() for out in outputs).backward()
            optimizer.step()
        finally:
            optimizer.zero_grad(set_to_none=True)
            pixels = outputs = None
        if measured:
            torch.accelerator.synchronize(device)
            free, total = torch.accelerator.get_memory_info(device)
            held = torch.accelerator.max_memory_reserved(device)
            if held > (1 - MEMORY_MARGIN) * total:
                raise torch.OutOfMemoryError(f"{held / 2**30:.1f} GiB held of {total / 2**30:.1f} GiB: past the "
                                             f"{MEMORY_MARGIN:.0%} margin")

    def release():
        nonlocal model, optimizer, shadow
        model = optimizer = shadow = None
        gc.collect()
        if device.type != "cpu":
            torch.accelerator.empty_cache()

    return attempt, release


def given_batch(settings, processes):
    """The BatchPlan of the options as given: --global_batch_size split into micro-batches of --batch_size, or the
    global batch that --batch_size and --grad_accum_steps make; None while --batch_size auto is still to be found."""
    micro, accumulation = settings.optimizer.batch_size, settings.optimizer.grad_accum_steps
    if micro == "auto":
        return None
    if settings.batch_size.global_batch_size is None:
        return BatchPlan(micro * accumulation * processes, processes, micro, accumulation)
    asked = accumulation if accumulation != DEFAULT_ACCUMULATION else None  # else the plan picks it
    return plan_for(settings.batch_size.global_batch_size, processes, micro, asked)


def with_batch(settings, plan):
    """Settings with BatchPlan `plan` in force: its micro-batch and accumulation wherever they are read (the
    optimizer's LR scaling, the data's stream length; config.yaml and the checkpoints record them)."""
    micro, accumulation = plan.micro, plan.accumulation
    return replace(settings, plan=plan,
                   optimizer=replace(settings.optimizer, batch_size=micro, grad_accum_steps=accumulation),
                   data=replace(settings.data, batch_size=micro, grad_accum_steps=accumulation))


def take_batch(settings, accelerator, plan):
    """The Settings with BatchPlan `plan` in force (with_batch), the Accelerator's accumulation with it; the plan
    said in a line when it is not simply what was typed. `settings` as they are while `plan` is None."""
    if plan is None:
        return settings
    accelerator.gradient_accumulation_steps = plan.accumulation
    if settings.batch_size.global_batch_size is not None:
        accelerator.print(plan.line())
    return with_batch(settings, plan)
