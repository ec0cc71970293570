"""--optimizer: torch's SGD and AdamW, or timm.optim's by name over our weight-decay groups and LR; a bad name, keyword
or value is one line before start-up; a timm optimizer's state resumes bitwise after a SIGKILL on 2 processes."""

import pytest
import torch
from conftest import assert_same_weights, parse_fails, read_json, resume_job, resumed_from
from ranks import ranks_killed, ranks_ok

from utils.config.options import parse_args
from utils.config.settings import typed_options
from utils.training.schedule import build_optimizer


@pytest.mark.parametrize("name, kind, state", [("lamb", "Lamb", {"exp_avg", "exp_avg_sq"}),
                                               ("lion", "Lion", {"exp_avg"}), ("adamw", "AdamW", None)])
def test_an_optimizer_by_name_keeps_our_groups_lr_and_its_own_keywords(name, kind, state):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    args = parse_args(["--optimizer", name, "--lr", "0.4", "--lr_scale_batch", "128", "--batch_size", "32",
                       "--weight_decay", "0.05", "--opt_betas", "0.8", "0.95"])
    optimizer = build_optimizer(model, typed_options(args)["optimizer"], num_processes=2)  # global batch 64: lr 0.2
    assert type(optimizer).__name__ == kind and (name == "adamw") == (type(optimizer).__module__.startswith("torch"))
    weights, norms, biases = optimizer.param_groups
    assert [g["weight_decay"] for g in (weights, norms, biases)] == [0.05, 0.0, 0.0]
    assert all(g["lr"] == 0.2 and g["betas"] == (0.8, 0.95) for g in optimizer.param_groups)
    if state:  # a step, and the state is the optimizer's own
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
        assert set(optimizer.state[weights["params"][0]]) >= state


def test_the_default_optimizer_is_torchs_sgd_with_nesterov_momentum():
    optimizer = build_optimizer(torch.nn.Linear(2, 2), typed_options(parse_args([]))["optimizer"])
    assert (type(optimizer) is torch.optim.SGD and optimizer.defaults["nesterov"]
            and optimizer.defaults["momentum"] == 0.9)


@pytest.mark.parametrize("argv, message", [
    (["--optimizer", "lanb"], "optimizer: neither sgd, adamw nor a timm.optim name (did you mean lamb"),
    (["--optimizer", "lamb", "--opt_kwargs", "trust_clip"], "opt_kwargs: 'trust_clip': give KEY=VALUE"),
    (["--optimizer", "lamb", "--opt_kwargs", "bogus=1"], "unexpected keyword argument 'bogus'"),
    (["--opt_eps", "1e-8"], "optimizer: sgd with --opt_eps/--opt_betas/--opt_kwargs {'eps': 1e-08}"),
    (["--optimizer", "lion", "--opt_betas", "0.9", "1.5"], "Invalid beta parameter at index 1: 1.5"),
])
def test_a_bad_optimizer_name_keyword_or_value_is_one_line_exit_2(argv, message, capsys):
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


@pytest.mark.slow
@pytest.mark.parametrize("name, extra", [("lamb", ("--opt_kwargs", "trust_clip=True")), ("lion", ())])
def test_sigkill_mid_epoch_then_resume_is_bitwise_with_a_timm_optimizer(name, extra, images, tmp_path):
    """2 processes with a worker each, 5 steps an epoch over 3 epochs: killed after step 7, resumed from step_6."""
    job = ("--optimizer", name, "--lr", "0.002", "--weight_decay", "0.01", *extra)
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(resume_job(images, whole, 1, *job), nproc=2)
    argv = resume_job(images, out, 1, *job, "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:7", nproc=2)
    assert not (out / "results.json").exists()
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_6"
    assert_same_weights(out, whole)
    assert read_json(out / "results.json")["val_loss"] == read_json(whole / "results.json")["val_loss"]
