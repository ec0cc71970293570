"""Smoke tests of benchmarks/*.py at a tiny size: each runs to exit 0 and prints figures that parse.

The figures themselves mean nothing at this size (and on a shared 2-core machine); what is checked is
that docs/benchmarks.md's reproduce commands still run, and that every figure they print is a positive number
consistent with the others (a ratio is the quotient of the two rates it names).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?)"


def run_benchmark(name, *args, timeout=600, env=None, returncode=0):
    """The benchmark in a fresh interpreter: for what it must see from its start (CUDA_VISIBLE_DEVICES)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", **(env or {})})
    assert proc.returncode == returncode, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout if returncode == 0 else proc


def benchmark_module(name):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "benchmarks" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmark_in_process(name, capsys, *args):
    """The benchmark's main(argv) in this process, its printed lines returned: what it starts itself (the raw
    loop, `accelerate launch` of the project, a probe) still runs as its own processes; its own interpreter's
    start-up would only add seconds."""
    from conftest import reset_accelerate_state

    capsys.readouterr()
    try:
        benchmark_module(name).main([str(a) for a in args])
    finally:
        reset_accelerate_state()
    return capsys.readouterr().out


def quotient_as_printed(ratio, top, bottom, digits=2):
    """`ratio`, printed with `digits` decimals, is top / bottom for some rates that print (1 decimal) as `top` and
    `bottom`: at a few img/s on a loaded machine, the rates' rounding moves the quotient by more than its own."""
    slack = 0.5 * 10 ** -digits
    return (top - 0.05) / (bottom + 0.05) - slack <= ratio <= (top + 0.05) / (bottom - 0.05) + slack


def figure(pattern, text):
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{text}"
    return [float(g) for g in match.groups()]


@pytest.mark.slow
def test_overhead_benchmark_runs_tiny_and_prints_its_ratio_and_tracking_cost(capsys):
    # The project side is the real script under `accelerate launch` (3 runs: raw loop, project, project with
    # wandb offline + TensorBoard). The launcher is this interpreter's accelerate: the one under test.
    out = benchmark_in_process("overhead.py", capsys, "--steps", 3, "--repeats", 1, "--log_every", 1, "--image_size",
                               16, "--batch_size", 8, "--report_to", "all",
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
    # (a loaded machine runs at a few img/s, where the 1-decimal rounding of each rate moves the quotient most)
    assert ratio == pytest.approx(ours / raw, rel=0.01 + 0.05 / raw + 0.05 / ours, abs=0.002)
    assert cost_ratio == pytest.approx(tracked / ours, rel=0.01 + 0.05 / ours + 0.05 / tracked, abs=0.002)
    assert cost == pytest.approx(100 * (1 - cost_ratio), abs=0.2)


def test_data_throughput_benchmark_runs_tiny_on_a_given_folder(tmp_path, capsys):
    # The benchmark's own image generator, at 30 small JPEGs (3 classes: the project's loader carves 10 % off
    # for validation, stratified, so each class needs an image there) instead of 400 at 500x375.
    benchmark_module("data_throughput.py").generate_folder(tmp_path / "images", classes=3, per_class=10, size=(64, 48))

    out = benchmark_in_process("data_throughput.py", capsys, "--data_dir", tmp_path / "images", "--workers", 0, 1,
                               "--batch_size", 4, "--epochs", 1, "--decoders")
    assert f"30 images in {tmp_path / 'images'}, batch 4, 224 px train transforms" in out
    # (torchvision's own decoders are timed too while torchvision still has them)
    decoders = figure(rf"^decoders alone, one thread: project \(decode_rgb\) {NUMBER} img/s \| torchcodec decode_image "
                      rf"{NUMBER} img/s \| .*PIL {NUMBER} img/s$", out)
    assert all(rate > 0 for rate in decoders)
    for workers in (0, 1):
        base, before, ours, ratio, uint8_ratio = figure(
            rf"^workers {workers}: ImageFolder\+PIL +{NUMBER} img/s \| project float +{NUMBER} img/s \| "
            rf"project uint8 +{NUMBER} img/s \| ratio to ImageFolder {NUMBER}, uint8 / float {NUMBER}$", out)
        assert base > 0 and before > 0 and ours > 0
        assert quotient_as_printed(ratio, ours, base) and quotient_as_printed(uint8_ratio, ours, before)
    # --streaming: the same JPEG bytes as parquet shards through the --streaming loader, against the folder path
    out = benchmark_in_process("data_throughput.py", capsys, "--data_dir", tmp_path / "images", "--workers", 1,
                               "--batch_size", 4, "--epochs", 1, "--streaming")
    rate, per_row = figure(rf"^the stream's rows read alone \(not decoded\): {NUMBER} rows/s \({NUMBER} us a row\)$",
                           out)
    assert rate > 0 and per_row == pytest.approx(1e6 / rate, rel=0.02, abs=0.06)
    folder, stream, ratio = figure(rf"^workers 1: project folder \(map-style\) +{NUMBER} img/s \| streaming parquet "
                                   rf"\(8 shards\) +{NUMBER} img/s \| ratio {NUMBER} \(median of 1 epoch pairs\)$", out)
    assert folder > 0 and stream > 0 and quotient_as_printed(ratio, stream, folder)  # one pair


@pytest.mark.slow
def test_video_throughput_benchmark_runs_tiny(capsys):
    # 4 one-second videos, one timed batch per pipeline, then 2 training steps of the default video model (the
    # first waits for the workers and is not counted).
    out = benchmark_in_process("video_throughput.py", capsys, "--videos", 4, "--seconds", 1, "--batch_size", 2,
                               "--batches", 1, "--repeats", 1, "--workers", 1, "--train_steps", 2)
    assert "generated 4 videos of 1 s, 320x240, 25 fps, H.264" in out
    seek, whole, ratio = figure(rf"^input pipeline, 1 workers, batch 2, .*: seek {NUMBER} clips/s, decode-everything "
                                rf"{NUMBER} clips/s, ratio {NUMBER}$", out)
    assert seek > 0 and whole > 0 and quotient_as_printed(ratio, seek, whole)
    rate, share, later = figure(rf"^training r2plus1d_18 \(2 steps, batch 2, default workers\): {NUMBER} clips/s, "
                                rf"data wait {NUMBER}% of step time \(steps 2..2\), {NUMBER}% in the second half$", out)
    assert rate > 0 and 0 <= share <= 100 and 0 <= later <= 100


@pytest.mark.slow
def test_gpu_throughput_benchmark_stops_without_a_gpu_and_runs_tiny_on_the_cpu_with_allow_cpu():
    # CUDA hidden: the CPU path wherever this runs. Without --allow_cpu: one line, exit 1, nothing run.
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    proc = run_benchmark("gpu_throughput.py", env=no_gpu, returncode=1, timeout=120)
    assert proc.stdout == "" and proc.stderr.startswith("gpu_throughput.py: no CUDA device") \
        and proc.stderr.count("\n") == 1, proc.stderr
    # --allow_cpu, eager and JPEGs only (compiling takes minutes here): the generated folder, the raw loop
    # (overhead.py --raw), one `accelerate launch` of the project, and the summary with the goals.
    out = run_benchmark("gpu_throughput.py", "--allow_cpu", "--modes", "eager", "--inputs", "jpeg", "jpeg_device",
                        "--launcher", f"{sys.executable} -m accelerate.commands.launch --num_processes 1", env=no_gpu)
    assert out.startswith("resnet18, 32x32, batch 8, ")
    assert "generated 50 train + 10 val JPEGs (64x48, 10 classes)" in out
    (raw,) = figure(rf"^eager +raw loop \(input on the device, cpu\): {NUMBER} img/s", out)
    ours, wait = figure(rf"^eager +project, jpeg: {NUMBER} img/s \(windows: .*\); data wait {NUMBER} %", out)
    project, raw_again, ratio, wait_again = figure(
        rf"^jpeg, eager +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}% +(?:met|NOT MET) +(?:met|NOT MET)$", out)
    assert raw > 0 and ours > 0 and 0 <= wait <= 100
    assert (project, raw_again, wait_again) == pytest.approx((ours, raw, wait), abs=0.051)
    assert quotient_as_printed(ratio, ours, raw, digits=3)
    assert re.search(r"^goal >= 5000 img/s: (met|NOT MET) \(best: jpeg(_device)?, eager, ", out, re.MULTILINE)
    assert re.search(r"^goal >= 0\.97x the raw loop: (met|NOT MET) ", out, re.MULTILINE)
    # --decode_on_device on the same JPEGs, and its goal against decoding in the workers
    (device,) = figure(rf"^eager +project, jpeg_device: {NUMBER} img/s \(windows: .*\); data wait", out)
    (gain,) = figure(rf"^goal JPEGs decoded on the device >= 2x in the workers: (?:met|NOT MET) \(eager {NUMBER}x\)$",
                     out)
    assert device > 0 and quotient_as_printed(gain, device, ours)


def test_fsdp_memory_benchmark_computes_consistent_figures_for_a_small_model(capsys):
    out = benchmark_in_process("fsdp_memory.py", capsys, "--model", "resnet18", "--image_size", "32", "--batch_size",
                               "4", "--gpus", "4")
    (params,) = figure(rf"^resnet18: {NUMBER} M parameters", out)
    (state,) = figure(rf"model state \(weights, gradients, optimizer\): {NUMBER} GiB", out)
    ddp, ddp_state, buckets, casts = figure(
        rf"DDP  : {NUMBER} GiB per GPU \(state {NUMBER} \+ buckets {NUMBER} \+ bf16 weight copies {NUMBER}", out)
    fsdp, fsdp_state, gathered = figure(rf"FSDP : {NUMBER} GiB per GPU on 4 GPUs \(state {NUMBER} \+ gathered units "
                                        rf"{NUMBER}", out)
    assert params == 11.7  # torchvision's resnet18 with 1000 classes
    assert state == pytest.approx(params * 1e6 * 12 / 2**30, abs=0.006)  # SGD: weights, gradients, momentum
    assert ddp_state == state and fsdp_state == pytest.approx(state / 4, abs=0.006)
    assert buckets == pytest.approx(params * 1e6 * 4 / 2**30, abs=0.006)
    assert casts == pytest.approx(params * 1e6 * 2 / 2**30, abs=0.01)  # autocast's bf16 copy of the weights
    assert 0 < fsdp < ddp and gathered > 0
    out = benchmark_in_process("fsdp_memory.py", capsys, "--model", "resnet18", "--image_size", "64", "--batch_size",
                               "256", "--gpus", "4", "--grad_checkpointing")
    per_image, activations = figure(rf"activations: {NUMBER} MiB per image, {NUMBER} GiB per GPU", out)
    (ddp,), (fsdp,) = figure(rf"DDP  : {NUMBER} GiB", out), figure(rf"FSDP : {NUMBER} GiB", out)
    kept, block, peak, instead, less, ddp_kept, fsdp_kept = figure(
        rf"--grad_checkpointing: activations kept {NUMBER} MiB per image, plus one block's {NUMBER} MiB per image "
        rf"recomputed at a time: {NUMBER} GiB per GPU at the peak instead of {NUMBER} \({NUMBER}x less\); DDP "
        rf"{NUMBER} GiB, FSDP {NUMBER} GiB per GPU", out)
    assert kept + block < per_image and instead == activations and less > 1  # less kept, the same baseline
    assert peak == pytest.approx((kept + block) * 256 / 1024, abs=0.03)
    assert ddp - ddp_kept == pytest.approx(activations - peak, abs=0.03) and fsdp - fsdp_kept == \
        pytest.approx(activations - peak, abs=0.02)


@pytest.mark.slow
def test_folder_startup_benchmark_generates_lists_and_measures_a_small_folder(capsys):
    out = benchmark_in_process("folder_startup.py", capsys, "--train_files", "60", "--val_files", "10", "--classes",
                               "5", "--runs", "1")
    seconds, peak, base, grown = figure(rf"^run 1: 60 train \+ 10 val files, 5 classes: datasets built in {NUMBER} s; "
                                        rf"peak {NUMBER} MiB vs {NUMBER} MiB with a 6-file folder "
                                        rf"\(\+{NUMBER} MiB\)$", out)
    assert seconds > 0 and peak >= base > 0 and abs(grown - (peak - base)) <= 1  # each rounded to whole MiB


def test_same_behaviour_fingerprints_ignore_clocks_and_the_folder_but_see_one_changed_weight(tmp_path):
    """benchmarks/same_behaviour.py on run folders written here (its runs themselves are launches of the
    real script, minutes long: run it by hand before and after a redesign)."""
    import json

    import torch
    from safetensors.torch import save_file

    same = benchmark_module("same_behaviour.py")

    def run_folder(name, weight, seconds, top1=0.5):
        out = tmp_path / name
        (out / "checkpoints" / "step_1").mkdir(parents=True)
        save_file({"w": torch.tensor([weight])}, out / "model.safetensors")
        save_file({"w": torch.tensor([9.0])}, out / "checkpoints" / "step_1" / "model.safetensors")  # not a result
        (out / "results.json").write_text(json.dumps({"val_top1": top1, "train_time_s": seconds,
                                                      "dataset": str(tmp_path / "shards")}))
        (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "train_loss": 0.25, "img_per_s_per_device": seconds,
                                                       "data_time_frac": seconds / 100}) + "\n")
        return {"run": same.fingerprint(out, tmp_path)}

    before = run_folder("a", 1.0, 10.0)
    assert before["run"]["results"] == {"val_top1": 0.5, "dataset": "<tmp>/shards"}
    assert list(before["run"]["weights"]) == ["model.safetensors"]
    assert same.differences(before, run_folder("b", 1.0, 99.0)) == []  # other clocks: the same behaviour
    assert same.differences(before, run_folder("c", 1.0 + 2**-20, 10.0)) == \
        [f"run weights model.safetensors: {before['run']['weights']['model.safetensors']} -> "
         f"{run_folder('d', 1.0 + 2**-20, 10.0)['run']['weights']['model.safetensors']}"]
    assert same.differences(before, run_folder("e", 1.0, 10.0, top1=0.75)) == ["run results val_top1: 0.5 -> 0.75"]


def test_startup_benchmark_finds_the_first_data_line_and_the_first_step():
    """benchmarks/startup.py times a real run (seconds each: not run here); what it reads from the run's
    stamped lines is checked on lines as the script prints them."""
    startup = benchmark_module("startup.py")
    stamped = [(0.5, "resumed from x"), (4.0, "data: validation split: 'validation'"), (4.1, "data: other"),
               (7.5, "epoch 0.04 step 1 loss 2.3345 lr 0.01391 img/s 4.1"), (9.0, "epoch 0.09 step 2 loss 2.3")]
    assert startup.first_times(stamped) == (4.0, 7.5)
    assert startup.first_times([(1.0, "epoch 0.1 step 10 loss 1.0")]) == (None, None)


def test_fixed_cost_benchmark_finds_where_training_starts_and_where_the_last_validation_ends():
    """benchmarks/fixed_cost.py times whole runs (not run here); the two lines it splits a run's wall at are checked on
    lines as the script prints them: build_job's last, and the last epoch's validation (not a step's line)."""
    fixed = benchmark_module("fixed_cost.py")
    stamped = [(2.9, "classes: 0, 1, 2"), (3.3, "resnet18 on imagefolder:/d/train: 1437 train / 360 val images, 10 "
               "classes, 1 process(es) on cpu (2 threads, 1 workers each), 23 steps/epoch -> /tmp/run"),
               (4.6, "epoch 0.43 step 10 loss 2.4266 lr 0.08214 img/s 525.2"), (6.0, "epoch 0 val: top-1 0.2333 top-5 "
               "0.7917 loss 2.5698 (360 images)"), (9.5, "epoch 1 val: top-1 0.8 loss 0.9 (360 images)"),
               (9.6, "checkpoint: /tmp/run/checkpoints/epoch_1"), (11.0, "done: val top-1 0.8 on 360 images")]
    assert fixed.marks(stamped) == (3.3, 9.5)
    assert fixed.marks([(1.0, "epoch 0.1 step 10 loss 1.0")]) == (None, None)


@pytest.mark.slow
def test_lr_find_benchmark_trains_at_the_suggestion_and_the_recipes_lr(tmp_path, capsys):
    said = benchmark_in_process("lr_find.py", capsys, "--jobs", "digits_small", "--seeds", "0", "--epochs", "1",
                                "--out", tmp_path)
    import yaml

    suggested, lowest, ours, theirs = figure(
        rf"^digits_small seed 0: suggested {NUMBER} \(lowest {NUMBER}\): val top-1 {NUMBER} against {NUMBER} at the "
        r"recipe's 0\.1$", said)
    assert suggested == pytest.approx(lowest / 3, rel=0.05) and 0 <= ours <= 1 and 0 <= theirs <= 1
    trained = {run: yaml.safe_load((tmp_path / "digits_small_0" / run / "config.yaml").read_text())["lr"]
               for run in ("suggested", "recipe")}
    assert trained == {"suggested": suggested, "recipe": 0.1}


def test_export_formats_benchmark_trains_once_and_prints_a_row_a_format(tmp_path, capsys):
    """One epoch of resnet18, one format, no timing to speak of: the row's figures parse, are its record's, and the
    ratios are the quotients of the rates beside them; a run already in --workdir is not trained again."""
    argv = ["--models", "resnet18", "--formats", "onnx", "--epochs", "1", "--timing_seconds", "0", "--raw_steps", "2",
            "--workdir", tmp_path]
    out = benchmark_in_process("export_formats.py", capsys, *argv)
    (raw,) = figure(rf"^raw resnet18 training loop \(batch 64, 32x32\): {NUMBER} img/s", out)
    rows = re.findall(rf"^\| resnet18 \| (onnx) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| "
                      rf"[0-9.e+-]+ \| {NUMBER} / {NUMBER} \({NUMBER}x\) \| {NUMBER} / {NUMBER} \({NUMBER}x\) \| "
                      rf"(passed|FAILED) \|$", out, flags=re.M)
    assert raw > 0 and len(rows) == 1, out
    for first in (5, 8):
        eager, exported, ratio = map(float, rows[0][first:first + 3])
        assert ratio == pytest.approx(exported / eager, rel=0.01 + 0.5 / eager + 0.5 / exported, abs=0.01)
    record = json.loads((tmp_path / "resnet18" / "export" / "onnx.parity.json").read_text())
    assert record["samples"] == 360 and float(rows[0][4]) == pytest.approx(record["agreement"], abs=1e-4)
    assert float(rows[0][2]) == pytest.approx(record["pytorch"], abs=1e-4)
    module = benchmark_module("export_formats.py")
    trained = (tmp_path / "resnet18" / "model.safetensors").stat().st_mtime_ns
    assert module.trained("resnet18", tmp_path, 1) == tmp_path / "resnet18"
    assert (tmp_path / "resnet18" / "model.safetensors").stat().st_mtime_ns == trained


def test_audit_benchmark_finds_what_it_injected_and_times_the_index(tmp_path, capsys):
    """Two of each kind injected into 60 training and 15 validation digits (71 and 24 files then), audited by audit.py
    as launched by a user: every injected pair and image found (recall 1), the precision recomputed from
    findings.csv; the index rows on 5,000 vectors."""
    out = benchmark_in_process("audit_injected.py", capsys, "--per_kind", 2, "--max_samples", 60, "--scale", 5000,
                               "--raw_steps", 2, "--workdir", tmp_path)
    figure(rf"^raw resnet18 training loop \(batch 64, 32x32\): {NUMBER} img/s", out)
    (wall,) = figure(rf"^audit of 71 training and 24 validation images \(pixels only, 1 process\(es\)\): {NUMBER} s",
                     out)
    rows = dict(re.findall(r"^\| (near|exact|conflict|constant|unreadable) \| \d+ \| ([0-9.]+) \|", out, flags=re.M))
    assert wall > 0 and rows == {"near": "1.000", "exact": "1.000", "conflict": "1.000", "constant": "1.000",
                                 "unreadable": "1.000"}, out
    found = read_csv_rows(tmp_path / "audit" / "findings.csv")
    injected = json.loads((tmp_path / "injected.json").read_text())
    near = {frozenset(pair) for pair in injected["near"]}
    with_copy = [r for r in found if r["other_sample"] and {r["sample"], r["other_sample"]} & {b for _, b in
                                                                                               injected["near"]}]
    (precision,) = figure(r"^\| near \| 8 \| 1\.000 \| ([0-9.]+) \|$", out)
    assert precision == pytest.approx(sum(frozenset((r["sample"], r["other_sample"])) in near for r in with_copy)
                                      / len(with_copy), abs=5e-4)
    index = re.findall(rf"^\| (flat|ivf) \| {NUMBER} \| {NUMBER} \| {NUMBER} \|$", out, flags=re.M)
    assert [row[0] for row in index] == ["flat", "ivf"], out


def read_csv_rows(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))
