"""Exact resume: a run killed at any step and resumed with --resume latest ends bitwise-equal to one never killed."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, free_port, make_folder, read_json, read_jsonl, run_ok

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_folder(root / "tr", {"cat": 12, "dog": 12, "eel": 12})  # 36 images, batch 4: 9 steps an epoch
    make_folder(root / "va", {"cat": 2, "dog": 2, "eel": 3})
    return root


def job(images, out, workers):
    # Random augmentation on (RandomResizedCrop + flip), fractional warmup, cosine: the default kind of run.
    return ["--train_dir", images / "tr", "--val_dir", images / "va", "--image_size", "32", "--batch_size", "4",
            "--epochs", "3", "--warmup_epochs", "0.5", "--log_every", "1", "--num_workers", workers,
            "--output_dir", out]


@pytest.fixture(scope="module")
def reference(images, tmp_path_factory):
    """Uninterrupted runs, one per world size (the worker count must not matter: workers 0 here)."""
    runs = {}
    for nproc in (1, 2):
        out = tmp_path_factory.mktemp(f"reference{nproc}") / "run"
        run_ok(job(images, out, 0), nproc=nproc)
        runs[nproc] = out
    return runs


def start(argv, nproc):
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if nproc > 1:
        cmd += ["--config_file", str(ROOT / "accel_configs" / "cpu_2proc.yaml"), "--main_process_port",
                str(free_port())]
    return subprocess.Popen(cmd + [str(ROOT / "train_classification.py"), *map(str, argv)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})


def wait_for(path, proc, timeout=240):
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended before {path.name} appeared:\n{proc.stderr.read()[-2000:]}"
        assert time.time() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.005)


def assert_same_weights(a, b):
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def train_rows(out):
    return {r["step"]: r for r in read_jsonl(out / "metrics.jsonl") if "train_loss" in r}


@pytest.mark.parametrize("nproc, workers, kill_when", [
    (1, 0, "checkpoints/step_5"),           # mid-epoch
    (1, 2, "checkpoints/step_13"),          # mid-epoch, worker processes
    (1, 0, "checkpoints/epoch_0"),          # right at an epoch boundary
    (1, 0, "checkpoints/.partial-step_4"),  # while a checkpoint is being written
    (2, 0, "checkpoints/step_4"),           # 2 processes, mid-epoch (5 steps an epoch on each rank)
    (2, 2, "checkpoints/epoch_0"),          # 2 processes, workers, epoch boundary
])
def test_sigkill_then_resume_latest_is_bitwise_equal(images, reference, tmp_path, nproc, workers, kill_when):
    out = tmp_path / "run"
    argv = [*job(images, out, workers), "--checkpoint_every_steps", "1", "--keep_last", "2"]
    proc = start(argv, nproc)
    wait_for(out / kill_when, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "results.json").exists()
    if kill_when.endswith("partial-step_4"):
        assert (out / "checkpoints" / "step_3").exists()  # the previous checkpoint is still there, complete
    run_ok([*argv, "--resume", "latest"], nproc=nproc)  # the same command, plus --resume latest
    assert_same_weights(out, reference[nproc])
    ours, theirs = train_rows(out), train_rows(reference[nproc])
    for step, row in ours.items():  # the same samples, augmented alike, in the same order
        assert (row["train_loss"], row["lr"]) == (theirs[step]["train_loss"], theirs[step]["lr"]), step
    assert len(list((out / "checkpoints").iterdir())) <= 2  # --keep_last 2


@pytest.mark.parametrize("nproc, signum", [(1, signal.SIGTERM), (2, signal.SIGTERM), (1, signal.SIGINT)])
def test_a_signal_on_one_rank_saves_everywhere_exits_and_resumes_exactly(images, reference, tmp_path, nproc,
                                                                        signum):
    out = tmp_path / "run"
    argv = [*job(images, out, 0), "--checkpoint_every_steps", "2"]
    proc = start(argv, nproc)
    wait_for(out / "checkpoints" / "step_4", proc)
    # The training processes are the launcher's python descendants; signal the last-started one only.
    ranks = [p for p in psutil.Process(proc.pid).children(recursive=True) if "train_classification.py" in
             " ".join(p.cmdline())]
    assert len(ranks) == nproc
    ranks[-1].send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert f"interrupted by {signum.name} at step" in stderr
    assert "checkpoint saved; rerun the same command with --resume latest" in stderr
    latest = max((out / "checkpoints").iterdir(), key=lambda f: read_json(f / "training_state.json")["global_step"])
    assert read_json(latest / "training_state.json")["global_step"] >= 4
    run_ok([*argv, "--resume", "latest"], nproc=nproc)
    assert_same_weights(out, reference[nproc])
