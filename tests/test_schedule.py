"""LR schedule: warmup never starts at 0, milestones and ends land right, epoch progress rules."""

import argparse
import math

import pytest
import torch

from utils.schedule import build_lr_scheduler


def schedule(steps_per_epoch, **kw):
    """[lr in force before optimizer step s, for s = 0 .. total] for the given options."""
    args = argparse.Namespace(**{"epochs": 6, "warmup_epochs": 1.0, "warmup_start_factor": 0.1, "min_lr": 0.0,
                                 "lr_schedule": "cosine", "lr_milestones": None, "lr_gamma": 0.1, **kw})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=kw.get("lr", 0.4))
    sched = build_lr_scheduler(opt, args, steps_per_epoch)
    lrs = []
    for _ in range(args.epochs * steps_per_epoch + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_warmup_starts_at_start_factor_and_reaches_peak():
    lrs = schedule(10)
    assert lrs[0] == pytest.approx(0.04)  # 0.1 x 0.4, never 0
    assert lrs[5] == pytest.approx(0.04 + 0.5 * 0.36)  # linear
    assert lrs[10] == pytest.approx(0.4)  # end of warmup: peak


def test_cosine_reaches_min_lr_at_the_last_step():
    lrs = schedule(10, min_lr=0.01)
    assert lrs[-1] == pytest.approx(0.01)
    assert lrs[10 + 25] == pytest.approx(0.01 + 0.39 * 0.5)  # half-way through the decay
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def test_step_decay_at_milestones():
    lrs = schedule(10, lr_schedule="step", lr_milestones=[3.0, 4.5], lr_gamma=0.5)
    assert lrs[29] == pytest.approx(0.4) and lrs[30] == pytest.approx(0.2)
    assert lrs[44] == pytest.approx(0.2) and lrs[45] == pytest.approx(0.1)
    assert lrs[-1] == pytest.approx(0.1)


def test_no_warmup():
    lrs = schedule(10, warmup_epochs=0.0)
    assert lrs[0] == pytest.approx(0.4)


def test_fractional_warmup():
    lrs = schedule(10, warmup_epochs=0.5)
    assert lrs[0] == pytest.approx(0.04) and lrs[5] == pytest.approx(0.4) and lrs[4] < 0.4


def closed_form(progress, lr=0.4, warmup=1.0, start=0.1, epochs=6, min_lr=0.0):
    if progress < warmup:
        return lr * (start + (1 - start) * progress / warmup)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (progress - warmup) / (epochs - warmup))) / 2


@pytest.mark.parametrize("steps_per_epoch", [1, 3, 4, 8, 23])
def test_lr_is_a_function_of_epoch_progress(steps_per_epoch):
    # 1 vs 2 processes, or accumulation 1 vs 2, only change the steps per epoch.
    lrs = schedule(steps_per_epoch)
    for step, lr in enumerate(lrs):
        assert lr == pytest.approx(closed_form(step / steps_per_epoch), rel=1e-9, abs=1e-12)


def test_same_point_same_lr_across_step_counts():
    one, two, four = schedule(8), schedule(4), schedule(2)
    for s in range(len(four)):
        assert one[4 * s] == pytest.approx(two[2 * s], rel=1e-12) == pytest.approx(four[s], rel=1e-12)


def test_the_default_warmup_fits_short_runs_and_an_explicit_one_is_checked(capsys):
    from utils.config import parse_args
    from utils.schedule import warmup_epochs

    assert warmup_epochs(parse_args([])) == 1.0  # the default job: unchanged
    assert warmup_epochs(parse_args(["--epochs", "1"])) == pytest.approx(0.2)  # fits instead of failing
    assert warmup_epochs(parse_args(["--epochs", "3"])) == pytest.approx(0.6)
    assert warmup_epochs(parse_args(["--epochs", "1", "--warmup_epochs", "0.5"])) == 0.5
    args = parse_args(["--epochs", "1"])
    scheduler = build_lr_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.lr), args, 10)
    lrs = []
    for _ in range(10):
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    assert lrs[0] == pytest.approx(0.1 * args.lr) and lrs[2] == pytest.approx(args.lr)  # 2 warmup steps of 10
    with pytest.raises(SystemExit) as e:
        parse_args(["--epochs", "1", "--warmup_epochs", "1"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().endswith("warmup_epochs: must be in [0, epochs=1), got 1.0")
