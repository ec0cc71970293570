"""fp16: the scheduler steps on every optimizer step, also one that loss scaling skipped (docs/distributed.md,
"Mixed precision"), so the LR stays a function of epoch progress.

Accelerate 1.15 accepts mixed_precision="fp16" on a CPU but makes neither a GradScaler nor an autocast
there (Accelerator.native_amp stays False: it trains in fp32). torch itself has both on the CPU, so the
test gives the project's own Accelerator (build_accelerator, whose step_scheduler_with_optimizer=False is
what the rule rests on) the two pieces Accelerate would make on a GPU, before anything is prepared: then
prepare wraps the model's forward in fp16 autocast and the optimizer in the scaler, as on a GPU. The huge
initial scale overflows fp16 in the first backward, so the scaler skips optimizer step 1.
"""

import pytest
import torch
from conftest import read_jsonl
from loop_harness import Points, assert_bitwise_equal, make_job, run_epoch, run_settings, snapshot, train_until

from utils.run.accelerator import build_accelerator
from utils.training.schedule import build_lr_scheduler

INIT_SCALE = 2.0 ** 40  # fp16 tops out at 65504: the scaled gradients of step 1 overflow
BACKOFF = 2.0 ** -30  # one overflow brings the scale down to 1024, where nothing overflows any more


def fp16_accelerator(settings):
    accelerator = build_accelerator(settings)
    assert accelerator.mixed_precision == "fp16"
    # On a CPU, Accelerate 1.15 leaves scaler None and native_amp False; on a GPU it made its own scaler,
    # replaced here by one that surely overflows at step 1.
    accelerator.native_amp = True
    accelerator.scaler = torch.amp.GradScaler(accelerator.device.type, init_scale=INIT_SCALE, backoff_factor=BACKOFF)
    return accelerator


def schedule(settings, steps_per_epoch, steps):
    """The LR after each of `steps` scheduler steps, from the project's schedule on a throwaway optimizer."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=settings.optimizer.lr)
    scheduler = build_lr_scheduler(optimizer, settings.schedule, steps_per_epoch)
    lrs = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    return lrs


# torch warns when a scheduler steps before its optimizer ever did: here that is the very point.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_a_step_skipped_by_loss_scaling_still_steps_the_schedule(tmp_path, fresh_accelerate_state):
    settings = run_settings(["--mixed_precision", "fp16", "--batch_size", "8", "--lr", "0.5", "--momentum", "0.9",
                       "--warmup_epochs", "0.5", "--epochs", "2", "--label_smoothing", "0", "--num_workers", "0",
                       "--log_every", "1"])
    accelerator = fp16_accelerator(settings)
    job = make_job(settings, accelerator, tmp_path, Points())
    steps = job.steps_per_epoch
    expected = schedule(settings, steps, 2 * steps)
    assert steps == 8 and len(set(expected)) == 2 * steps  # the LR changes at every step: a missed one shows

    start = snapshot(job)
    assert train_until(job, 0, 0, 0, 1) == (1, False)
    assert job.optimizer.step_was_skipped  # the scaler found inf gradients and did not step
    assert accelerator.scaler.get_scale() == INIT_SCALE * BACKOFF
    assert_bitwise_equal(start[0], snapshot(job)[0])  # weights unchanged by step 1
    assert job.nonfinite_steps == []  # the loss itself was finite: not a --skip_nonfinite_steps matter
    assert job.scheduler.get_last_lr()[0] == expected[0]  # but the schedule advanced to step 1's value

    assert train_until(job, 0, 1, 1, None) == (steps, True)
    assert run_epoch(job, 1, steps) == (2 * steps, True)
    assert not job.optimizer.step_was_skipped
    final = snapshot(job)[0]
    assert not torch.equal(final["weight"], start[0]["weight"]) and all(torch.isfinite(p).all() for p in final.values())
    assert job.scheduler.get_last_lr()[0] == expected[-1]
    # the LR in force at every step, as logged, is the schedule's: laid out in steps of epoch progress
    logged = [(r["step"], r["lr"]) for r in read_jsonl(tmp_path / "metrics.jsonl") if "lr" in r]
    assert logged == list(zip(range(1, 2 * steps + 1), expected))
