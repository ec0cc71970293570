"""--model_ema: the averaged weights' arithmetic, their validation figures, files and exact resume."""

import argparse

import pytest
import torch
import torchvision

from conftest import killed, read_json, resume_job, resumed_from, run_ok
from utils.ema import build_ema, update_ema


def test_ema_follows_the_weights_and_buffers_with_timms_warmup():
    model = torchvision.models.resnet18(num_classes=3)
    ema = build_ema(model, argparse.Namespace(model_ema=True, model_ema_decay=0.9, model_ema_warmup=True), "cpu")
    start = model.fc.weight.detach().clone()
    update_ema(ema, model, 2, every=2)  # the first update copies
    assert torch.equal(ema.module.fc.weight, start)
    with torch.no_grad():
        model.fc.weight.add_(1.0)
        model.bn1.running_mean.add_(2.0)
        model.bn1.num_batches_tracked += 5
    update_ema(ema, model, 3, every=2)  # not a multiple of 2: no update
    assert torch.equal(ema.module.fc.weight, start)
    update_ema(ema, model, 4, every=2)  # 1 update so far: decay min(0.9, 2 / 11)
    d = 2 / 11
    assert torch.allclose(ema.module.fc.weight, d * start + (1 - d) * (start + 1))
    assert torch.allclose(ema.module.bn1.running_mean, torch.full((64,), (1 - d) * 2.0))  # BatchNorm statistics too
    assert int(ema.module.bn1.num_batches_tracked) == 5  # a counter is copied, not averaged
    assert build_ema(model, argparse.Namespace(model_ema=False), "cpu") is None


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_continues_the_ema_bitwise(images, tmp_path):
    from safetensors.torch import load_file

    extra = ("--model_ema", "--model_ema_steps", "2", "--model_ema_decay", "0.9", "--keep_best", "1")
    whole, out = tmp_path / "whole", tmp_path / "run"
    run_ok(resume_job(images, whole, 2, *extra))
    argv = resume_job(images, out, 2, *extra, "--checkpoint_every_steps", "1")
    killed(argv, "step:14")
    assert not (out / "results.json").exists()
    proc = run_ok([*argv, "--resume", "latest"])
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_13"
    for name in ("model.safetensors", "model_ema.safetensors", "best/model.safetensors"):
        a, b = load_file(whole / name), load_file(out / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    ours, theirs = read_json(out / "results.json"), read_json(whole / "results.json")
    assert ours["val_ema_top1"] == theirs["val_ema_top1"] and ours["val_ema_loss"] == theirs["val_ema_loss"]
    assert read_json(out / "best" / "metrics.json")["val_ema_top1"] == max(  # best/ follows the EMA figure
        r["val_ema_top1"] for r in map(__import__("json").loads, (out / "metrics.jsonl").read_text().splitlines())
        if "val_ema_top1" in r)
