"""--skip_nonfinite_steps: one poisoned optimizer step leaves weights and optimizer state exactly as they were,
the LR schedule goes on as if nothing happened, and without the allowance the run stops naming that step.

In-process, as tests/test_accumulation.py: train_one_epoch on a hand-built Job (tests/loop_harness.py) over
a tiny dataset whose samples of exactly one known optimizer step are NaN.
"""

import pytest
import torch
from conftest import read_jsonl
from loop_harness import (Points, assert_bitwise_equal, epoch_order, make_job, run_epoch, run_settings, snapshot,
                          train_until)

from train_classification import NonFiniteLoss, train_one_epoch
from utils.run.accelerator import build_accelerator

BATCH = 8


def arguments(*extra):
    # Momentum and weight decay on: a step that moved anything would show in weights or momentum buffers.
    # A schedule that changes every step (warmup, then cosine), so that "the scheduler stepped" shows in the LR.
    return run_settings(["--batch_size", str(BATCH), "--lr", "0.5", "--momentum", "0.9", "--weight_decay", "0.01",
                         "--warmup_epochs", "0.5", "--epochs", "2", "--label_smoothing", "0", "--num_workers", "0",
                         "--log_every", "1", *map(str, extra)])


def poison_step(job, dataset, epoch, step_in_epoch):
    """Make every sample of optimizer step `step_in_epoch` (1-based) of `epoch` NaN; returns its indices."""
    micro = epoch_order(job.train_loader, epoch)
    g = job.settings.plan.accumulation
    group = micro[(step_in_epoch - 1) * g:step_in_epoch * g]
    # Poison only the last micro-batch of the group: the clean micro-batches before it are dropped too.
    dataset.poison = {(epoch, i) for i in group[-1]}
    assert len(dataset.poison) == BATCH
    return dataset.poison


@pytest.mark.parametrize("accum", [1, 2])
def test_a_skipped_step_changes_nothing_and_the_schedule_goes_on(tmp_path, fresh_accelerate_state, accum):
    # batch 8: 8 micro-batches an epoch; accumulation 2: 4 optimizer steps. Epoch 1 (the second), so that
    # the step before the poisoned one has momentum buffers to keep.
    settings = arguments("--skip_nonfinite_steps", "1", "--grad_accum_steps", accum)
    accelerator = build_accelerator(settings)
    dataset = Points()
    job = make_job(settings, accelerator, tmp_path / "poisoned", dataset)
    clean = make_job(arguments("--grad_accum_steps", accum), accelerator, tmp_path / "clean", Points())
    steps = job.steps_per_epoch
    assert steps == 8 // accum
    poison_step(job, dataset, epoch=1, step_in_epoch=3)
    poisoned = steps + 3  # its global step

    assert run_epoch(job, 0, 0) == (steps, True)
    assert train_until(job, 1, steps, 0, poisoned - 1) == (poisoned - 1, False)
    before = snapshot(job)
    assert len(before[1]) == 2  # momentum buffers exist (weight and bias): "unchanged" means something
    assert train_until(job, 1, poisoned - 1, 2, poisoned) == (poisoned, False)
    after = snapshot(job)
    assert job.nonfinite_steps == [poisoned]
    assert_bitwise_equal(before[0], after[0])  # weights
    assert_bitwise_equal(before[1], after[1])  # SGD momentum buffers
    assert train_until(job, 1, poisoned, 3, None) == (2 * steps, True)
    assert job.nonfinite_steps == [poisoned]  # that step only
    final = snapshot(job)
    assert all(torch.isfinite(p).all() for p in final[0].values())
    assert not torch.equal(final[0]["weight"], after[0]["weight"])  # training went on after the skipped step

    # The scheduler stepped on the skipped step too: the LR at every step, and after the epoch, is that of
    # a run that never met a NaN.
    assert run_epoch(clean, 0, 0) == (steps, True)
    assert run_epoch(clean, 1, steps) == (2 * steps, True)
    assert job.scheduler.get_last_lr() == clean.scheduler.get_last_lr()
    assert [g["lr"] for g in job.optimizer.param_groups] == [g["lr"] for g in clean.optimizer.param_groups]

    def lrs(out):
        return [(r["step"], r["lr"]) for r in read_jsonl(out / "metrics.jsonl") if "lr" in r]

    assert lrs(job.out) == lrs(clean.out) and [s for s, _ in lrs(job.out)] == list(range(1, 2 * steps + 1))
    assert len({lr for _, lr in lrs(job.out)}) > steps  # the LR really changes from step to step


def test_without_the_allowance_the_nan_stops_training_naming_the_step(tmp_path, fresh_accelerate_state):
    settings = arguments("--skip_nonfinite_steps", "0")
    accelerator = build_accelerator(settings)
    dataset = Points()
    job = make_job(settings, accelerator, tmp_path, dataset)
    poison_step(job, dataset, epoch=0, step_in_epoch=5)
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss at global step 5;"):
        train_one_epoch(job, 0, 0)
    assert job.nonfinite_steps == [5]
    params, _ = snapshot(job)
    assert all(torch.isfinite(p).all() for p in params.values())  # the poisoned gradients never reached them


def test_the_allowance_counts_steps_not_micro_batches(tmp_path, fresh_accelerate_state):
    # Both micro-batches of one accumulated step are NaN: that is one skipped step, within an allowance of 1.
    settings = arguments("--skip_nonfinite_steps", "1", "--grad_accum_steps", "2")
    accelerator = build_accelerator(settings)
    dataset = Points()
    job = make_job(settings, accelerator, tmp_path, dataset)
    micro = epoch_order(job.train_loader, 0)
    dataset.poison = {(0, i) for i in micro[2] + micro[3]}  # optimizer step 2
    assert run_epoch(job, 0, 0) == (4, True)
    assert job.nonfinite_steps == [2]
    # a second poisoned step is one too many
    dataset.poison = {(1, i) for i in epoch_order(job.train_loader, 1)[6]}  # epoch 1, step 4: global step 8
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss at global step 8;"):
        train_one_epoch(job, 1, 4)
    assert job.nonfinite_steps == [2, 8]


def batchnorm_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3))


def buffers(module):
    return {name: b.detach().clone() for name, b in module.named_buffers()}


@pytest.mark.parametrize("accum", [1, 2])
def test_a_skipped_step_leaves_batchnorm_statistics_and_the_ema_as_they_were(tmp_path, fresh_accelerate_state,
                                                                             accum):
    """The poisoned batch's forward pass ran BatchNorm in training mode: its running statistics (and, folded in at
    that step, the EMA's) would be NaN although the weights were protected. They are put back as they were before
    the skipped step's first micro-batch; training goes on finite."""
    from utils.models.ema import build_ema

    settings = arguments("--skip_nonfinite_steps", "1", "--grad_accum_steps", accum, "--model_ema", "--model_ema_decay",
                     "0.5", "--no-model_ema_warmup")
    accelerator = build_accelerator(settings)
    dataset = Points()
    job = make_job(settings, accelerator, tmp_path, dataset, model=batchnorm_model())
    job.ema = build_ema(job.bare_model(), accelerator.device, decay=0.5, warmup=False)
    poison_step(job, dataset, epoch=0, step_in_epoch=3)
    assert train_until(job, 0, 0, 0, 2) == (2, False)
    model_before, ema_before = buffers(job.bare_model()), buffers(job.ema.module)
    assert train_until(job, 0, 2, 2, 3) == (3, False)
    assert job.nonfinite_steps == [3]
    assert_bitwise_equal(model_before, buffers(job.bare_model()))  # running mean, var and batch count
    ema = buffers(job.ema.module)
    assert all(torch.isfinite(v).all() for v in ema.values())
    # the EMA averaged the model's unchanged statistics in: its buffers moved towards them, nothing else
    for name, value in ema.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.5 * ema_before[name] + 0.5 * model_before[name], msg=name)
    assert train_until(job, 0, 3, 3, None) == (job.steps_per_epoch, True)
    assert all(torch.isfinite(v).all() for v in buffers(job.bare_model()).values())
    assert not torch.equal(buffers(job.bare_model())["1.running_mean"], model_before["1.running_mean"])
