"""Smoke tests of benchmarks/*.py at a tiny size: each runs to exit 0 and prints figures that parse.

The figures themselves mean nothing at this size (and on a shared 2-core machine); what is checked is
that the README's reproduce commands still run, and that every figure they print is a positive number
consistent with the others (a ratio is the quotient of the two rates it names).
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?)"


def run_benchmark(name, *args, timeout=600):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def figure(pattern, text):
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{text}"
    return [float(g) for g in match.groups()]


@pytest.mark.slow
def test_overhead_benchmark_runs_tiny_and_prints_its_ratio_and_tracking_cost(tmp_path):
    # The project side is the real script under `accelerate launch` (3 runs: raw loop, project, project with
    # wandb offline + TensorBoard). The launcher is this interpreter's accelerate: the one under test.
    out = run_benchmark("overhead.py", "--steps", 3, "--repeats", 1, "--log_every", 1, "--image_size", 16,
                        "--batch_size", 8, "--report_to", "all",
                        "--launcher", f"{sys.executable} -m accelerate.commands.launch")
    assert figure(r"^resnet18, batch ([0-9]+), 16x16, ([0-9]+) timed steps, ([0-9]+) alternating repeats$", out) \
        == [8, 3, 1]
    (raw,) = figure(rf"^raw PyTorch loop: +{NUMBER} img/s", out)
    (ours,) = figure(rf"^train_classification\.py: +{NUMBER} img/s", out)
    (ratio,) = figure(rf"^ratio: {NUMBER}$", out)
    (tracked,) = figure(rf"^with --report_to all: +{NUMBER} img/s", out)
    cost, cost_ratio = figure(rf"^tracking cost: {NUMBER} % of step throughput \(ratio {NUMBER}\)$", out)
    assert raw > 0 and ours > 0 and tracked > 0 and ratio > 0 and cost_ratio > 0
    # printed with 1 decimal (rates) and 3 (ratios): consistent up to that rounding
    assert ratio == pytest.approx(ours / raw, rel=0.01, abs=0.002)
    assert cost_ratio == pytest.approx(tracked / ours, rel=0.01, abs=0.002)
    assert cost == pytest.approx(100 * (1 - cost_ratio), abs=0.2)


def test_data_throughput_benchmark_runs_tiny_on_a_given_folder(tmp_path):
    # The benchmark's own image generator, at 30 small JPEGs (3 classes: the project's loader carves 10 % off
    # for validation, stratified, so each class needs an image there) instead of 400 at 500x375.
    spec = importlib.util.spec_from_file_location("data_throughput", ROOT / "benchmarks" / "data_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate_folder(tmp_path / "images", classes=3, per_class=10, size=(64, 48))

    out = run_benchmark("data_throughput.py", "--data_dir", tmp_path / "images", "--workers", 0, 1,
                        "--batch_size", 4, "--epochs", 1)
    assert f"30 images in {tmp_path / 'images'}, batch 4, 224 px train transforms" in out
    for workers in (0, 1):
        base, ours, ratio = figure(rf"^workers {workers}: ImageFolder\+PIL +{NUMBER} img/s \| project +{NUMBER} "
                                   rf"img/s \| ratio {NUMBER}$", out)
        assert base > 0 and ours > 0 and ratio > 0
        assert ratio == pytest.approx(ours / base, rel=0.02, abs=0.006)  # printed with 2 decimals


@pytest.mark.slow
def test_video_throughput_benchmark_runs_tiny(tmp_path):
    # 4 one-second videos, one timed batch per pipeline, then 3 training steps of the default video model.
    out = run_benchmark("video_throughput.py", "--videos", 4, "--seconds", 1, "--batch_size", 2, "--batches", 1,
                        "--repeats", 1, "--workers", 1, "--train_steps", 3)
    assert "generated 4 videos of 1 s, 320x240, 25 fps, H.264" in out
    seek, whole, ratio = figure(rf"^input pipeline, 1 workers, batch 2, .*: seek {NUMBER} clips/s, decode-everything "
                                rf"{NUMBER} clips/s, ratio {NUMBER}$", out)
    assert seek > 0 and whole > 0 and ratio == pytest.approx(seek / whole, rel=0.02, abs=0.006)
    rate, share, later = figure(rf"^training r2plus1d_18 \(3 steps, batch 2, default workers\): {NUMBER} clips/s, data wait "
                         rf"{NUMBER}% of step time \(steps 2..3\), {NUMBER}% in the second half$", out)
    assert rate > 0 and 0 <= share <= 100 and 0 <= later <= 100
