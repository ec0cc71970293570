"""--lr_find and --lr auto: the LR range test on the run's own training steps, its loss the mean over every sample of
every process, every process stopping at the same step; --lr auto trains bitwise as the suggestion typed by hand."""

import csv
import math
import re

import numpy as np
import pytest
import torch
from conftest import TINY, assert_same_weights, drawn, main_fails, read_json, run_main
from ranks import ranks_ok

from utils.training.lr_range import Curve, LossDiverged, sweep_lr, sweep_schedule

BASE = [*drawn(TINY), "--model", "resnet18", "--epochs", "2", "--warmup_epochs", "0.5"]  # its curve falls then diverges


def rows(path):
    return list(csv.DictReader(open(path)))


def test_the_sweep_is_exponential_and_keeps_each_layers_ratio():
    assert [round(sweep_lr(1e-4, 1.0, 5, s), 12) for s in range(5)] == [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    weights = [torch.nn.Parameter(torch.zeros(2)) for _ in range(2)]
    optimizer = torch.optim.SGD([{"params": [weights[0]], "lr": 0.5}, {"params": [weights[1]], "lr": 0.05}], lr=0.5)
    schedule = sweep_schedule(optimizer, 1e-4, 1.0, 5)
    seen = []
    for _ in range(5):
        seen.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        schedule.step()
    assert [head for head, _ in seen] == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1, 1.0], rel=1e-9)
    assert all(slow == pytest.approx(head / 10, rel=1e-9) for head, slow in seen)  # --layer_decay's ratio kept


def test_the_curve_is_smoothed_stops_where_it_diverges_and_suggests_a_third_of_its_lowest_points_lr():
    """A loss that falls between 1e-4 and 1e-2 and rises after: the smoothed curve (debiased: its first value is the
    first loss) stops at the step past 4x its lowest; the suggestion is a third of the LR where it is lowest (just past
    1e-2: the average lags), the steepest fall inside the fall."""
    lrs = [sweep_lr(1e-6, 10, 60, s) for s in range(60)]
    losses = [2.0 if lr < 1e-4 else 2.0 - 0.7 * math.log10(lr / 1e-4) if lr < 1e-2 else 0.6 * (lr / 1e-2) ** 0.9
              for lr in lrs]
    curve = Curve(60)
    with pytest.raises(LossDiverged, match="^diverged at lr"):
        for lr, loss in zip(lrs, losses):
            curve.add(lr, loss)
    assert curve.smoothed[0] == losses[0] and len(curve.lrs) < 60
    assert curve.smoothed[-1] > 4 * min(curve.smoothed) >= curve.smoothed[-2]  # the first step past it
    suggested, why = curve.reading()
    lowest = curve.lrs[int(np.argmin(curve.smoothed))]
    assert why is None and suggested == {"suggested": float(f"{lowest / 3:.2g}"), "lowest": float(f"{lowest:.2g}"),
                                         "steepest": suggested["steepest"]}, suggested  # 2 digits: typed, one float
    assert 1e-2 <= lowest < 5e-2 and 1e-4 < suggested["steepest"] < 3e-2
    nan = Curve()
    nan.add(1e-3, 1.0)
    with pytest.raises(LossDiverged):
        nan.add(1e-2, float("nan"))
    assert nan.reading() == (None, "2 steps are too few to read an LR from")
    assert len(nan.lrs) == len(nan.losses) == len(nan.smoothed) == 2  # the step it stopped at has its row too


@pytest.mark.slow
def test_lr_auto_trains_bitwise_as_its_suggestion_typed_and_a_resumed_run_does_not_search_again(tmp_path, capsys,
                                                                                               monkeypatch):
    from utils.run import job

    tries, trial_steps = [], job.trial_steps  # --batch_size auto's tries: the range test's job's, taken by the run
    monkeypatch.setattr(job, "trial_steps", lambda *args, **kwargs: tries.append(1) or trial_steps(*args, **kwargs))
    found = run_main([*BASE, "--lr", "auto", "--lr_find_steps", "30", "--save_every", "1", "--global_batch_size", "8",
                      "--batch_size", "auto", "--output_dir", tmp_path / "auto"])
    said = capsys.readouterr().out
    valley = found["lr_found"]["suggested"]
    assert read_json(tmp_path / "auto" / "run.json")["lr_found"] == found["lr_found"]
    assert found["batch"]["found"] and found["batch"]["tried"] == [[8, "fits"]]  # what the range test's job found
    assert len(tries) == 1  # found once, by the range test's job: the run is built with its plan, not tried again
    assert "lr: " + repr(valley) in (tmp_path / "auto" / "config.yaml").read_text().splitlines()  # the run's LR
    assert said.count(" steps from ") == 1 and "(--lr auto trains with it)" in said  # the one line of its reading
    curve = rows(tmp_path / "auto" / "lr_find.csv")
    assert 3 <= len(curve) <= 30 and (tmp_path / "auto" / "lr_find.png").stat().st_size > 10_000
    assert [float(r["lr"]) for r in curve] == pytest.approx([sweep_lr(1e-7, 10, 30, s) for s in range(len(curve))],
                                                            rel=1e-5)
    typed = run_main([*BASE, "--lr", repr(valley), "--output_dir", tmp_path / "typed"])
    assert_same_weights(tmp_path / "auto", tmp_path / "typed")
    assert typed["val_top1"] == found["val_top1"]
    # resumed from its first epoch with --lr auto: the checkpoint's LR, no range test, the same end
    written = (tmp_path / "auto" / "lr_find.csv").stat().st_mtime_ns
    resumed = run_main([*BASE, "--lr", "auto", "--global_batch_size", "8", "--batch_size", "auto", "--output_dir",
                        tmp_path / "auto", "--resume", tmp_path / "auto" / "checkpoints" / "epoch_0"])
    said = capsys.readouterr().out
    assert f"lr auto: {valley:g}, as the checkpoint was trained" in said and "lr_find:" not in said
    # what the first start found, kept by its checkpoint for the records: the suggestions, the batch's tries
    assert resumed["lr_found"] == found["lr_found"] == read_json(tmp_path / "auto" / "run.json")["lr_found"]
    assert resumed["batch"] == found["batch"] == read_json(tmp_path / "auto" / "run.json")["batch"]
    assert (tmp_path / "auto" / "lr_find.csv").stat().st_mtime_ns == written
    assert_same_weights(tmp_path / "auto", tmp_path / "typed")


@pytest.mark.slow
def test_lr_find_writes_its_curve_and_exits_without_training(tmp_path, capsys):
    """With loader workers: the sweep's job is closed at its end, its workers stopped with it (the run built after
    it has its own). It says where it is every tenth of the sweep, as training says it every --log_every steps."""
    import psutil

    out, before = tmp_path / "run", {child.pid for child in psutil.Process().children(recursive=True)}
    found = run_main([*BASE, "--num_workers", "1", "--lr_find", "--lr_find_steps", "30", "--output_dir", out,
                      "--checkpoint_every_steps", "5"])  # the sweep's job checkpoints nothing, whatever the run asks
    left = [c for c in psutil.Process().children(recursive=True) if c.pid not in before and c.status() != "zombie"]
    assert not left, left
    assert set(found["lr_find"]) == {"suggested", "lowest", "steepest"}
    steps = [int(line.split()[2]) for line in capsys.readouterr().out.splitlines() if line.startswith("lr_find: step ")]
    curve = rows(out / "lr_find.csv")
    assert steps == list(range(3, min(len(curve), 30), 3)), steps  # every 3rd of 30, up to the step it stopped at
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == ["lr_find.csv", "lr_find.json",
                                                                          "lr_find.png"]  # no more
    assert read_json(out / "lr_find.json") == {"steps": len(curve),
                                               "stopped": read_json(out / "lr_find.json")["stopped"],
                                               "suggestions": found["lr_find"], "no_suggestion": None}


@pytest.mark.slow
def test_the_sweeps_loss_is_the_mean_over_every_process_one_or_two_alike(tmp_path, capsys):
    """A model without BatchNorm or dropout (squeezenet1_1, --dropout 0): a global batch of 16 on one process or 8 + 8
    on two is the same 16 samples and the same mean loss, step by step, until the steps' float sums part. With
    --no_plots: lr_find.csv and lr_find.json alone, and said so."""
    job = ["--dataset", "synthetic", "--image_size", "32", "--num_classes", "5", "--synthetic_train_samples", "64",
           "--synthetic_val_samples", "10", "--num_workers", "0", "--model", "squeezenet1_1", "--dropout", "0",
           "--lr_find", "--lr_find_steps", "10", "--lr_find_max", "0.1", "--global_batch_size", "16", "--no_plots"]
    run_main([*job, "--batch_size", "16", "--output_dir", tmp_path / "one"])
    assert capsys.readouterr().out.splitlines()[-1].endswith(f" -> {tmp_path / 'one' / 'lr_find.csv'}, "
                                                             f"{tmp_path / 'one' / 'lr_find.json'}")
    assert sorted(p.name for p in (tmp_path / "one").iterdir() if p.name != ".lock") == ["lr_find.csv",
                                                                                           "lr_find.json"]
    ranks_ok([*job, "--batch_size", "8", "--output_dir", tmp_path / "two"], nproc=2)
    one, two = rows(tmp_path / "one" / "lr_find.csv"), rows(tmp_path / "two" / "lr_find.csv")
    assert len(one) == len(two) == 10
    losses = np.array([[float(r["loss"]) for r in rs] for rs in (one, two)])
    assert np.abs(losses[0] - losses[1]).max() < 1e-4, losses
    assert np.ptp(losses[0]) > 1e-3  # the loss moved: the steps trained


@pytest.mark.parametrize("extra, message", [
    (["--lr", "auto", "--eval_only", "--init_from", "x.safetensors"], "lr: sweeps training steps, and --eval_only"),
    (["--lr_find", "--resume", "latest"], "lr_find: tests the LR of a run about to start: not with --resume"),
    (["--lr", "auto", "--lr_scale_batch", "256"], "lr_scale_batch: scales a given --lr; --lr auto finds the LR"),
    (["--lr_find", "--lr_find_min", "1", "--lr_find_max", "0.1"], "lr_find_min: must be > 0 and below --lr_find_max"),
    (["--lr_find", "--lr_find_steps", "2"], "lr_find_steps: must be >= 3"),
    (["--lr_find_steps", "50"], "lr_find_steps: sets the LR range test: add --lr_find or --lr auto"),
    (["--lr_find_max", "1"], "lr_find_max: sets the LR range test: add --lr_find or --lr auto"),
])
def test_what_the_range_test_cannot_do_is_one_line(extra, message, tmp_path, capsys):
    code, err = main_fails([*BASE, *extra, "--output_dir", tmp_path / "run"], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert not (tmp_path / "run" / "lr_find.csv").exists()


def swept(fall, start=2.4, seed=0):
    """A curve in the embedded digits' shape: flat (noise, and a slow drift down) up to 0.001, down by `fall` of its
    start at 0.01, level to 2 (the average, over a quarter of the sweep, catches up), then diverging."""
    rng = np.random.default_rng(seed)
    lrs = [sweep_lr(1e-7, 10, 100, s) for s in range(100)]
    bottom = start * (1 - fall)
    losses = [start - 0.0005 * s + rng.normal(0, 0.03) if lr < 0.001 else
              start - (start - bottom) * math.log10(lr / 0.001) if lr < 0.01 else
              bottom if lr < 2 else bottom * (lr / 2) ** 6 for s, lr in enumerate(lrs)]
    curve = Curve(100)
    with pytest.raises(LossDiverged):
        for lr, loss in zip(lrs, losses):
            curve.add(lr, loss)
    return curve


def test_a_long_flat_start_drifting_down_by_noise_is_not_taken_for_the_descent():
    """Down by a third from 0.001 to 0.01, then level: its lowest point on the level (the average catching up), its
    steepest fall in the fall, not in the plateau's drift."""
    suggested, why = swept(fall=1 / 3).reading()
    assert why is None and 0.01 <= suggested["lowest"] <= 4 and 1e-3 <= suggested["steepest"] <= 0.02, suggested


@pytest.mark.parametrize("fall", [0.05, 0.09])
def test_a_curve_that_barely_falls_holds_no_lr(fall):
    """The default job's curves fall by 5-9 % before they diverge (resnet18 learns little in 100 steps): an LR read
    from them (0.015 there) trained worse than the recipe's 0.1. None is read, and the line says why."""
    suggested, why = swept(fall).reading()
    said = re.fullmatch(r"the smoothed loss falls by (\d+)% of its start \(2\.4\d* -> [\d.]+\), "
                        r"too little to read an LR from \(at least 17%\)", why)
    assert suggested is None and said and abs(int(said.group(1)) - 100 * fall) <= 2, why


def test_a_curve_still_falling_at_the_sweeps_end_holds_no_lr():
    curve = Curve(40)
    for step in range(40):
        curve.add(sweep_lr(1e-5, 1, 40, step), 2.0 - 0.04 * step)
    assert curve.reading() == (None, "the smoothed loss still falls at the sweep's last LR, 1")


def test_the_suggestion_is_a_third_of_the_lowest_points_lr_and_the_steepest_where_it_falls_fastest():
    """A curve laid out by hand: flat for 10 steps, then down 20 steps (slowly, fast in steps 20-24, slowly), its
    lowest at step 29, rising after. The descent starts at the first step below 2 - 0.2 x (2 - lowest)."""
    lrs = [sweep_lr(1e-5, 1, 40, s) for s in range(40)]
    down = [2.0 - 0.02 * i for i in range(10)] + [1.8 - 0.1 * i for i in range(1, 6)] + \
        [1.3 - 0.02 * i for i in range(1, 6)]  # steps 10-29: 2.0 ... 1.2
    curve = Curve(40)
    curve.lrs, curve.losses = lrs[:35], [2.0] * 10 + down + [1.3, 1.5, 1.8, 2.2, 2.8]
    curve.smoothed = list(curve.losses)
    assert curve.reading() == ({"suggested": float(f"{lrs[29] / 3:.2g}"), "lowest": float(f"{lrs[29]:.2g}"),
                                "steepest": float(f"{lrs[20]:.2g}")}, None)  # the first of the fast steps


@pytest.mark.parametrize("extra, said", [(["--lr", "auto"], "--lr auto, --lr_find: not available with FSDP"),
                                         (["--lr_find"], "--lr auto, --lr_find: not available with FSDP"),
                                         (["--global_batch_size", "16", "--batch_size", "auto"],
                                          "--batch_size auto: not available with FSDP")])
def test_fsdp_refuses_what_tries_steps_before_the_run(extra, said, monkeypatch):
    """Under an FSDP config the range test and --batch_size auto are refused in one line (utils/run/accelerator.py
    check_fsdp), not run on unsharded twins."""
    import types

    from accelerate.utils import DistributedType

    from utils.config.options import parse
    from utils.run.accelerator import check_fsdp

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    fsdp = types.SimpleNamespace(distributed_type=DistributedType.FSDP,
                                 state=types.SimpleNamespace(fsdp_plugin=types.SimpleNamespace(fsdp_version=2)))
    problem = check_fsdp(parse([*BASE, *extra]), fsdp)
    assert problem is not None and problem.startswith(said), problem
    assert check_fsdp(parse(BASE), fsdp) is None  # the plain run is FSDP's to train


def test_lr_auto_on_a_curve_that_holds_no_lr_is_one_line_and_trains_nothing(tmp_path, capsys):
    """A sweep kept below what moves the weights (1e-7 to 1e-5): its loss does not fall; --lr auto says so and why, in
    one line, exit 2, with the curve written for a look; --lr_find alone writes it and says the same (exit 0)."""
    sweep = [*BASE, "--lr_find_steps", "12", "--lr_find_max", "1e-5"]
    code, err = main_fails([*sweep, "--lr", "auto", "--output_dir", tmp_path / "auto"], capsys)
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(lines) == 1 and re.search(
        r"lr auto: 12 steps from 1e-07 to 1e-05 \(the last at lr 1e-05\): no LR suggested, the smoothed loss falls by "
        r"-?\d+% of its start \([\d.]+ -> [\d.]+\), too little to read an LR from \(at least 17%\); give --lr",
        lines[0])
    assert not (tmp_path / "auto" / "results.json").exists() and (tmp_path / "auto" / "lr_find.csv").is_file()
    found = run_main([*sweep, "--lr_find", "--output_dir", tmp_path / "find"])
    said = read_json(tmp_path / "find" / "lr_find.json")
    assert found["lr_find"] is None and said["suggestions"] is None and said["no_suggestion"].startswith(
        "the smoothed loss falls by")
