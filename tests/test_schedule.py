"""LR schedule: warmup never starts at 0, milestones and ends land right, epoch progress rules."""

import math

import pytest
import torch

from utils.training.schedule import ScheduleOptions, build_lr_scheduler


def schedule(steps_per_epoch, **kw):
    """[lr in force before optimizer step s, for s = 0 .. total] for the given options."""
    lr = kw.pop("lr", 0.4)
    args = ScheduleOptions(**{"epochs": 6, "warmup_epochs": 1.0, "warmup_start_factor": 0.1, "min_lr": 0.0,
                              "kind": "cosine", "milestones": None, "gamma": 0.1, **kw})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
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
    lrs = schedule(10, kind="step", milestones=(3.0, 4.5), gamma=0.5)
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
    from utils.config.options import parse
    from utils.training.schedule import warmup_epochs

    def schedule_of(argv):
        return parse(argv).schedule

    assert warmup_epochs(schedule_of([])) == 1.0  # the default job: unchanged
    assert warmup_epochs(schedule_of(["--epochs", "1"])) == pytest.approx(0.2)  # fits instead of failing
    assert warmup_epochs(schedule_of(["--epochs", "3"])) == pytest.approx(0.6)
    assert warmup_epochs(schedule_of(["--epochs", "1", "--warmup_epochs", "0.5"])) == 0.5
    settings = parse(["--epochs", "1"])
    lr = settings.optimizer.lr
    scheduler = build_lr_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr),
                                   settings.schedule, 10)
    lrs = []
    for _ in range(10):
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    assert lrs[0] == pytest.approx(0.1 * lr) and lrs[2] == pytest.approx(lr)  # 2 warmup steps of 10
    with pytest.raises(SystemExit) as e:
        parse(["--epochs", "1", "--warmup_epochs", "1"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().endswith("warmup_epochs: must be in [0, epochs=1), got 1.0")


def test_weight_decay_groups_and_linear_lr_scaling(tmp_path):
    import torchvision

    from utils.config.options import parse, parse_args
    from utils.config.recipes import save_config
    from utils.training.schedule import build_optimizer, lr_notes, parameter_groups

    def optimizer_of(argv):
        return parse(argv).optimizer

    model = torchvision.models.resnet18(num_classes=3)
    weights, norms, biases = (g["params"] for g in parameter_groups(model, optimizer_of([])))
    bn = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert {id(p) for p in norms} == {id(p) for m in bn for p in m.parameters()}
    assert [id(p) for p in biases] == [id(model.fc.bias)]
    # with the defaults, the same split as before (no decay on anything 1-d), so the default job is unchanged
    assert {id(p) for p in weights} == {id(p) for p in model.parameters() if p.ndim > 1}

    def one_step(*extra):  # zero gradients: only weight decay moves a parameter
        net = torchvision.models.resnet18(num_classes=3)
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.fill_(2.0)
        opt = build_optimizer(net, optimizer_of(["--momentum", "0", *extra]))
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        return net.bn1.weight[0].item(), net.fc.bias.detach().clone(), net.conv1.weight.detach().clone()

    bn_weight, _, _ = one_step()
    assert bn_weight == 2.0  # no decay on norms by default
    bn_weight, _, _ = one_step("--norm_weight_decay", "0.01")
    assert bn_weight == pytest.approx(2.0 * (1 - 0.1 * 0.01))
    scaled = ["--lr", "0.1", "--batch_size", "64", "--grad_accum_steps", "2", "--lr_scale_batch", "128"]
    opt = build_optimizer(model, optimizer_of(scaled), num_processes=2)  # global batch 256 = 2 x 128
    assert all(g["lr"] == pytest.approx(0.2) for g in opt.param_groups)
    assert build_optimizer(model, optimizer_of(["--lr", "0.1"]), num_processes=2).param_groups[0]["lr"] == 0.1
    notes = lr_notes(optimizer_of(scaled), 2)
    args = parse_args(scaled)
    assert notes == ["lr: 0.2 in force (--lr 0.1 is for a global batch of 128; this run's is 256)"]
    save_config(vars(args), tmp_path / "config.yaml", notes=notes)  # a comment: config.yaml stays a recipe
    assert (tmp_path / "config.yaml").read_text().startswith("# lr: 0.2 in force")
    assert parse_args(["--config", str(tmp_path / "config.yaml")]).lr_scale_batch == 128
