"""FSDP (accel_configs/fsdp.yaml, FSDP2) through the script: sharded training, sharded checkpoints, exact
resume, full-state export. Accelerate runs FSDP on accelerators only, so the processes here get it from
tests/helpers/fsdp_on_cpu.py (PyTorch's FSDP2 itself runs on CPU over gloo)."""

import pytest
import torch

from conftest import ROOT, SMALL_MODEL, TINY, assert_same_weights, read_json, resume_job, resumed_from
from ranks import run_ranks


def fsdp(script, *argv):
    """`script argv` on 2 forked CPU ranks (tests/ranks.py) with the environment `accelerate launch` gives them
    under the project's FSDP config (fp32, as the DDP reference runs; the config's bf16 autocast would only slow
    the CPU), FSDP on CPU from tests/helpers/fsdp_on_cpu.py."""
    return run_ranks([script, *argv], nproc=2, target="helpers.fsdp_on_cpu:main",
                     launcher_args=["--config_file", str(ROOT / "accel_configs" / "fsdp.yaml"),
                                    "--mixed_precision", "no"])


@pytest.mark.slow
def test_fsdp_trains_as_ddp_checkpoints_in_shards_and_resumes_bitwise(images, reference, tmp_path):
    """SIGKILL at step 7 (DataLoader workers on), --resume latest from the sharded step_6: the weights end
    bitwise-equal to the uninterrupted DDP run (FSDP's reduce-scatter sums as DDP's all-reduce does, and
    every rank scores the BatchNorm statistics that are saved), with the same validation figures; the
    exported weights are a full, plain state dict; --eval_only under FSDP scores them alike."""
    from safetensors.torch import load_file
    import timm

    out = tmp_path / "run"
    argv = resume_job(images, out, 2, "--checkpoint_every_steps", "1")
    killed = fsdp("tests/helpers/signal_at.py", "step:7", "KILL", "group", "0", *argv)
    assert killed.returncode != 0 and not (out / "results.json").exists()
    shards = out / "checkpoints" / "step_6" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]  # one per rank
    assert (out / "checkpoints" / "step_6" / "optimizer_0").is_dir()
    resumed = fsdp("train_classification.py", *argv, "--resume", "latest")
    assert resumed.returncode == 0, resumed.report()
    assert resumed_from(resumed.stdout) == out / "checkpoints" / "step_6"
    assert_same_weights(out, reference[2])
    figures = ("val_top1", "val_topk", "val_loss", "val_samples")
    ours, ddp = read_json(out / "results.json"), read_json(reference[2] / "results.json")
    assert [ours[k] for k in figures] == [ddp[k] for k in figures]
    weights = load_file(out / "model" / "model.safetensors")  # the model folder: its library loads it as is
    timm.create_model(SMALL_MODEL.removeprefix("timm/"), num_classes=3).load_state_dict(weights)
    assert all(torch.equal(v, load_file(out / "model.safetensors")[k]) for k, v in weights.items())
    scored = fsdp("train_classification.py", *resume_job(images, tmp_path / "eval", 0), "--eval_only",
                  "--resume", out / "checkpoints" / "epoch_2")
    assert scored.returncode == 0, scored.report()
    assert [read_json(tmp_path / "eval" / "results.json")[k] for k in figures] == [ddp[k] for k in figures]


@pytest.mark.slow
def test_what_fsdp_cannot_do_is_refused_in_one_line(tmp_path):
    proc = fsdp("train_classification.py", *TINY, "--model_ema", "--output_dir", tmp_path / "run")
    assert proc.returncode != 0
    assert "train_classification.py: error: --model_ema: not available with FSDP" in proc.stderr
    # (FSDP1 is refused too, on GPUs: Accelerate cannot even build its FSDP1 plugin without a device.)
    assert not (tmp_path / "run").exists()


def test_an_fsdp_config_on_a_cpu_machine_says_it_trains_as_plain_data_parallel(tmp_path, monkeypatch, capsys,
                                                                                fresh_accelerate_state):
    import train_classification

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch` with fsdp.yaml sets
    train_classification.main([*TINY, "--epochs", "1", "--max_train_steps", "1", "--output_dir", str(tmp_path / "r")])
    assert "fsdp: not on cpu (Accelerate runs FSDP on GPUs and other accelerators); these processes train as " \
           "plain data parallel" in capsys.readouterr().out
