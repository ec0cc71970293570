"""Starting weights, evaluation only, non-finite losses, and a rank that dies."""

import os

import pytest
import torch
import torchvision
from safetensors.torch import load_file, save_file

from conftest import TINY, launch, main_fails, read_json, read_jsonl, run_main
from ranks import ranks_ok

FAST = [*TINY, "--model", "resnet18", "--warmup_epochs", "0"]  # torchvision's weights


def test_init_from_with_another_class_count_reinitialises_the_head_and_can_freeze(tmp_path, capsys):
    donor = torchvision.models.get_model("resnet18", num_classes=3)
    save_file(donor.state_dict(), tmp_path / "donor.safetensors")
    out = tmp_path / "run"
    run_main([*FAST, "--epochs", "1", "--init_from", tmp_path / "donor.safetensors", "--freeze_backbone",
              "--output_dir", out])
    assert "re-initialised (other shape): fc.bias, fc.weight" in capsys.readouterr().out
    trained = load_file(out / "model.safetensors")
    assert trained["fc.weight"].shape == (7, 512)
    frozen = [k for k in trained if not k.startswith("fc.") and "running" not in k and "num_batches" not in k]
    assert all(torch.equal(trained[k], donor.state_dict()[k]) for k in frozen)  # the backbone did not move
    assert not torch.equal(trained["fc.weight"][:3], donor.state_dict()["fc.weight"])


def test_init_from_rejects_foreign_keys_and_pickles(tmp_path, capsys):
    save_file({"encoder.weight": torch.zeros(2)}, tmp_path / "other.safetensors")
    code, err = main_fails([*FAST, "--init_from", tmp_path / "other.safetensors", "--output_dir", tmp_path / "a"],
                           capsys)
    assert code == 2 and "init_from: keys do not match ResNet: missing [" in err
    torch.save({"model": object()}, tmp_path / "evil.pth")  # weights_only refuses arbitrary objects
    code, err = main_fails([*FAST, "--init_from", tmp_path / "evil.pth", "--output_dir", tmp_path / "b"], capsys)
    assert code == 2 and "is not a plain tensor state dict" in err


def test_pretrained_offline_says_which_file_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # read by torch.hub at each call
    code, err = main_fails([*FAST, "--pretrained", "--output_dir", tmp_path / "run"], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1
    assert f"{tmp_path}/torch/hub/checkpoints/resnet18-f37072fd.pth is not in the torch hub cache" in errors[0]


def test_pretrained_from_the_cache_works_offline(tmp_path, capsys, monkeypatch):
    weights = torchvision.models.ResNet18_Weights.DEFAULT
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(torchvision.models.resnet18().state_dict(), cache / os.path.basename(weights.url))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    run_main([*FAST, "--epochs", "1", "--pretrained", "--output_dir", tmp_path / "run"])
    assert "pretrained: weights loaded; re-initialised (other shape): fc.bias, fc.weight" in capsys.readouterr().out


def test_nonfinite_loss_stops_naming_the_step_and_keeps_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    code, err = main_fails([*FAST, "--epochs", "2", "--lr", "1e12", "--checkpoint_every_steps", "1",
                            "--output_dir", out], capsys)
    assert code == 1
    line = next(line for line in err.splitlines() if "non-finite" in line)
    step = int(line.split("non-finite loss at global step ")[1].split(";")[0])
    assert line.startswith("train_classification.py: error: non-finite loss at global step")
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == [f"step_{s}" for s in sorted(range(1, step), key=str)]  # up to the last good step, no later
    assert not (out / "results.json").exists()


def test_nonfinite_steps_can_be_skipped_and_are_reported(tmp_path):
    out = tmp_path / "run"
    run_main([*FAST, "--epochs", "1", "--lr", "1e12", "--skip_nonfinite_steps", "8", "--output_dir", out])
    skipped = read_json(out / "results.json")["nonfinite_steps_skipped"]
    assert skipped and skipped == sorted(skipped) and all(1 <= s <= 8 for s in skipped)


@pytest.mark.slow
def test_eval_only_gives_identical_figures_on_1_and_2_processes(tmp_path):
    trained = tmp_path / "trained"
    run_main([*FAST, "--epochs", "1", "--output_dir", trained])
    figures = []
    for nproc in (1, 2):
        out = tmp_path / f"eval{nproc}"
        job = [*FAST, "--eval_only", "--resume", trained / "checkpoints" / "epoch_0", "--dump_rank_metrics",
               "--output_dir", out]
        if nproc > 1:
            ranks_ok(job, nproc=nproc)
        else:
            run_main(job)
        figures.append(read_json(out / "eval" / "epoch_0" / "global.json"))
        assert read_json(out / "results.json")["world_size"] == nproc
    assert {k: figures[0][k] for k in ("samples", "correct_top1", "correct_topk")} == \
        {k: figures[1][k] for k in ("samples", "correct_top1", "correct_topk")}
    assert figures[0]["loss_sum"] == pytest.approx(figures[1]["loss_sum"], rel=1e-6)
    assert read_json(trained / "results.json")["val_top1"] == read_json(tmp_path / "eval1" / "results.json")["val_top1"]


@pytest.mark.slow
def test_a_dead_rank_ends_the_job(tmp_path):
    # Rank 1 dies (SIGKILL, as the OOM killer does) at step 2 of a long run: torchrun must tear the
    # job down rather than leave rank 0 waiting; the subprocess timeout is the bound.
    out = tmp_path / "run"
    proc = launch(["step:2", "KILL", "self", "1", *FAST, "--epochs", "50", "--dist_timeout_s", "60",
                   "--output_dir", out], nproc=2, script="tests/helpers/signal_at.py", timeout=300)
    assert proc.returncode != 0
    assert not (out / "results.json").exists()


@pytest.mark.slow
def test_keep_last_and_keep_best_bookkeeping(tmp_path):
    out = tmp_path / "run"
    run_main([*FAST, "--epochs", "5", "--keep_last", "1", "--keep_best", "1", "--output_dir", out])
    vals = [r["val_top1"] for r in read_jsonl(out / "metrics.jsonl") if "val_top1" in r]
    best = read_json(out / "best" / "metrics.json")
    assert best["val_top1"] == max(vals) and best["epoch"] == vals.index(max(vals))  # the first epoch reaching it
    kept = {p.name: read_json(p / "training_state.json") for p in (out / "checkpoints").iterdir()}
    assert "epoch_4" in kept and len(kept) <= 2  # the newest, and the best one
    assert max(state["val_score"] for state in kept.values()) == max(vals)
    assert f"epoch_{best['epoch']}" in kept  # the best epoch's checkpoint survived pruning
    best_weights = load_file(out / "best" / "model.safetensors")
    ckpt = load_file(out / "checkpoints" / f"epoch_{best['epoch']}" / "model.safetensors")
    assert best_weights.keys() == ckpt.keys() and all(torch.equal(ckpt[k], best_weights[k]) for k in ckpt)
