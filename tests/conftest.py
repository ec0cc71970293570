"""Helpers to launch the real script (or a helper) under Accelerate with 1 or 2 CPU processes."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A small, fast job: synthetic 16x16 images, resnet18, no network.
TINY = ["--dataset", "synthetic", "--image_size", "16", "--num_classes", "7", "--batch_size", "8",
        "--synthetic_train_samples", "64", "--synthetic_val_samples", "37", "--num_workers", "0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, nproc=1, timeout=300, env=None, script="train_classification.py", launcher_args=(),
           torchrun=False):
    """Run `script args` under `accelerate launch` (or torchrun) with `nproc` CPU processes."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launcher_args]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(free_port())]
    elif nproc > 1:
        cmd += ["--config_file", str(ROOT / "accel_configs" / "cpu_2proc.yaml"),
                "--num_processes", str(nproc), "--main_process_port", str(free_port())]
    cmd += [str(ROOT / script), *map(str, args)]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1",
                **(env or {})}
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def run_ok(args, nproc=1, **kw):
    proc = launch(args, nproc=nproc, **kw)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def read_json(path):
    return json.loads(Path(path).read_text())


KINDS = [(".png", "RGB"), (".jpg", "L"), (".png", "RGBA"), (".jpg", "RGB")]  # grayscale and RGBA too


def make_folder(root, counts):
    """root/<class>/<i>.<ext>: small PNG and JPEG files, one colour per class."""
    colors = {"cat": (200, 40, 40), "dog": (40, 200, 40), "eel": (40, 40, 200)}
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            ext, mode = KINDS[i % len(KINDS)]
            Image.new("RGB", (24, 20), colors[name]).convert(mode).save(root / name / f"{i}{ext}")
    return root


@pytest.fixture
def fresh_accelerate_state():
    """Let a test call main() in-process more than once: Accelerate keeps singletons per process."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()
    GradientState._reset_state()
