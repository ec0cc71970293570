"""The real script, end to end: files it writes, exact validation on 1 vs 2 processes, LR invariance."""

import pytest
import torch
import torchvision
import yaml
from safetensors.torch import load_file

from conftest import TINY, read_json, read_jsonl, run_ok

RESULT_KEYS = {"val_top1", "val_topk", "topk", "val_loss", "val_samples", "train_samples", "epochs_completed",
               "global_step", "world_size", "train_time_s", "model", "dataset", "skipped_images"}


def test_main_in_process_writes_every_output(tmp_path, fresh_accelerate_state):
    import train_classification  # importing runs nothing

    out = tmp_path / "run"
    results = train_classification.main([*TINY, "--epochs", "2", "--warmup_epochs", "0.5", "--log_every", "3",
                                         "--save_every", "1", "--output_dir", str(out)])
    assert read_json(out / "results.json") == results
    assert set(results) == RESULT_KEYS
    assert (results["val_samples"], results["train_samples"], results["topk"]) == (37, 64, 5)
    assert (results["epochs_completed"], results["global_step"], results["world_size"]) == (2, 16, 1)
    assert 0 <= results["val_top1"] <= results["val_topk"] <= 1

    rows = read_jsonl(out / "metrics.jsonl")
    train_rows = [r for r in rows if "train_loss" in r]
    val_rows = [r for r in rows if "val_top1" in r]
    assert [r["step"] for r in train_rows] == [3, 6, 9, 12, 15]
    assert {"step", "epoch", "lr", "train_loss", "img_per_s"} <= set(train_rows[0])
    assert train_rows[0]["epoch"] == pytest.approx(3 / 8)
    assert [(r["step"], r["epoch"]) for r in val_rows] == [(8, 1.0), (16, 2.0)]
    assert {k: val_rows[-1][k] for k in ("val_top1", "val_topk", "val_loss", "val_samples")} == \
        {k: results[k] for k in ("val_top1", "val_topk", "val_loss", "val_samples")}

    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["output_dir"] == str(out) and saved["epochs"] == 2 and "config" not in saved

    model = torchvision.models.get_model("resnet18", num_classes=7)
    model.load_state_dict(load_file(out / "model.safetensors"))  # strict: a plain torchvision state dict
    assert (out / "checkpoints" / "epoch_0" / "training_state.json").is_file()
    assert read_json(out / "checkpoints" / "epoch_1" / "training_state.json") == {"epoch": 1, "global_step": 16}


def test_default_dataset_is_the_embedded_digits(tmp_path):
    out = tmp_path / "run"
    run_ok(["--max_train_steps", "2", "--epochs", "2", "--output_dir", out], timeout=240)
    results = read_json(out / "results.json")
    assert (results["dataset"], results["train_samples"], results["val_samples"]) == ("digits", 1437, 360)
    assert (results["global_step"], results["epochs_completed"], results["topk"]) == (2, 0, 5)
    assert (out / "checkpoints" / "step_2" / "training_state.json").is_file()


@pytest.mark.slow
def test_resume_continues_from_the_saved_epoch(tmp_path):
    out = tmp_path / "run"
    run_ok([*TINY, "--epochs", "2", "--save_every", "1", "--output_dir", out])
    first = read_jsonl(out / "metrics.jsonl")
    run_ok([*TINY, "--epochs", "3", "--resume", out / "checkpoints" / "epoch_1"])  # output_dir: the run's own
    results = read_json(out / "results.json")
    assert (results["epochs_completed"], results["global_step"]) == (3, 24)
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows[:len(first)] == first and rows[-1]["step"] == 24 and rows[-1]["epoch"] == 3.0


@pytest.mark.slow
def test_validation_is_sample_exact_on_1_and_2_processes(tmp_path):
    # Train on one process, then score the very same weights on two: 37 val images, batch 8,
    # so the last batch is ragged on one process and padded with repeats on two.
    one, two = tmp_path / "one", tmp_path / "two"
    run_ok([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--dump_rank_metrics", "--output_dir", one])
    run_ok([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--dump_rank_metrics", "--output_dir", two,
            "--resume", one / "checkpoints" / "epoch_0"], nproc=2)
    r1, r2 = read_json(one / "results.json"), read_json(two / "results.json")
    assert (r1["world_size"], r2["world_size"]) == (1, 2)
    assert r1["val_samples"] == r2["val_samples"] == 37
    g1, g2 = read_json(one / "eval/epoch_0/global.json"), read_json(two / "eval/epoch_0/global.json")
    assert {k: g1[k] for k in ("samples", "correct_top1", "correct_topk")} == \
        {k: g2[k] for k in ("samples", "correct_top1", "correct_topk")}
    assert g2["loss_sum"] == pytest.approx(g1["loss_sum"], rel=1e-6)
    assert r2["val_top1"] == r1["val_top1"] and r2["val_topk"] == r1["val_topk"]

    for run, results, world in ((one, r1, 1), (two, r2, 2)):
        folder = run / "eval" / "epoch_0"
        ranks = [read_json(folder / f"rank_{r}.json") for r in range(world)]
        glob = read_json(folder / "global.json")
        assert sorted(p.name for p in folder.iterdir()) == ["global.json"] + [f"rank_{r}.json" for r in range(world)]
        for key in ("samples", "correct_top1", "correct_topk"):
            assert sum(r[key] for r in ranks) == glob[key]
        assert sum(r["loss_sum"] for r in ranks) == pytest.approx(glob["loss_sum"], rel=1e-12)
        assert glob["samples"] == results["val_samples"]
        assert glob["correct_top1"] / glob["samples"] == results["val_top1"]
        assert glob["loss_sum"] / glob["samples"] == pytest.approx(results["val_loss"], rel=1e-12)
    # 37 = 24 + 13 on two ranks: batches of 8 alternate, the padded repeats are not counted.
    assert [read_json(two / f"eval/epoch_0/rank_{r}.json")["samples"] for r in (0, 1)] == [21, 16]


@pytest.mark.slow
def test_lr_follows_epoch_progress_for_any_world_size_and_accumulation(tmp_path):
    runs = {}
    for nproc, accum in ((1, 1), (2, 1), (1, 2), (2, 2)):
        out = tmp_path / f"p{nproc}a{accum}"
        run_ok([*TINY, "--epochs", "3", "--warmup_epochs", "1", "--log_every", "1", "--val_every", "3",
                "--grad_accum_steps", accum, "--output_dir", out], nproc=nproc)
        runs[nproc, accum] = {r["epoch"]: r["lr"] for r in read_jsonl(out / "metrics.jsonl") if "lr" in r}
    # 64 samples, batch 8: 8, 4, 4 and 2 optimizer steps per epoch.
    assert [len(runs[k]) for k in ((1, 1), (2, 1), (1, 2), (2, 2))] == [24, 12, 12, 6]
    common = set.intersection(*(set(r) for r in runs.values()))
    assert len(common) == 6
    for epoch in sorted(common):
        lrs = [r[epoch] for r in runs.values()]
        assert max(lrs) - min(lrs) <= 1e-12 * max(lrs), (epoch, lrs)
    assert runs[2, 2][1.0] == pytest.approx(0.1)  # warmup over: the peak, at the same point for all


@pytest.mark.slow
def test_default_job_reaches_99_percent(tmp_path):
    out = tmp_path / "run"
    run_ok(["--output_dir", out], timeout=600)
    assert read_json(out / "results.json")["val_top1"] >= 0.99


@pytest.mark.slow
def test_torchrun_also_works(tmp_path):
    import os
    import subprocess
    import sys

    from conftest import ROOT, free_port

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(ROOT / "train_classification.py"), *TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = read_json(out / "results.json")
    assert (results["world_size"], results["val_samples"], results["global_step"]) == (2, 37, 4)
