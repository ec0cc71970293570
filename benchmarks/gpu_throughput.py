"""Training img/s of train_classification.py on one GPU against a raw PyTorch loop, and the issue's goals.

Runbook (one NVIDIA GPU, H200 class; nothing to prepare, no network needed):

    python benchmarks/gpu_throughput.py               # ~6-8 min (estimate: not yet timed on an H200); stops itself at 8
    python benchmarks/gpu_throughput.py --modes compiled --inputs synthetic   # the headline figure alone, ~2-3 min
    python benchmarks/gpu_throughput.py --modes compiled --inputs jpeg jpeg_device   # decoding: workers vs the GPU
    python benchmarks/gpu_throughput.py --allow_cpu   # no GPU: the same code paths, tiny (~4 min on a 2-core CPU)

With no CUDA device it prints one line and exits 1, unless --allow_cpu is given.

What runs, in this order, each in its own fresh process, on 1 process / 1 GPU: ResNet-50 at 224 px,
batch 256, bf16 (mixed precision), channels-last model and input; first eager, then torch.compile
(inductor, --compile_mode, default "default"):

- the raw PyTorch loop (benchmarks/overhead.py's, run there with `--raw`): the same model, SGD
  (momentum 0.9, Nesterov, weight decay 5e-4) and label-smoothed cross-entropy, forward and loss
  under torch.autocast(bfloat16), one input batch made once and resident on the GPU: no data loading.
  Measured once per mode and set beside both pipelines below.
- (a) the project on synthetic input: `accelerate launch --num_processes 1 train_classification.py
  --dataset synthetic --image_size 224 --num_classes 1000 --synthetic_train_samples N ...
  --mixed_precision bf16 --channels_last [--compile --compile_mode M]`, its default workers
  (random tensors made in the DataLoader workers, copied to the GPU: no decoding).
- (b) the project on JPEGs: the same, with `--train_dir/--val_dir` on a folder generated first by
  benchmarks/data_throughput.py's `generate_folder` (photo-like 500x375 JPEGs, in parallel on all
  cores; 1000 classes, one epoch's worth of images for the run, 1 image per class for validation),
  default workers: decoding, RandomResizedCrop 224 and flips in the workers, as in real training.
- (c) the same JPEGs with --decode_on_device ("jpeg_device"): the workers read the bytes and draw the
  crops, the batch is decoded by nvJPEG (torchcodec) and cropped, resized and flipped on the GPU.

Each side runs --log_every (10) warm-up steps, then --steps (60) timed ones. The project's img/s is
the median of its metrics.jsonl windows after the first (the first holds the warm-up: the DataLoader's
start and, compiled, the compilation); the raw loop's is timed over its timed steps, synchronised.
Printed for every configuration: img/s, project/raw, the project's data-wait share (time waiting for
the DataLoader: above a few % the input pipeline limits the figure, not the GPU), the warm-up (raw:
its first --log_every steps; project: its first window and its whole launch, which also holds
validation's eval-mode recompile, start-up and saving), and whether each goal of the issue is met:
project >= 0.97x the raw loop, >= 5,000 img/s for ResNet-50 on an H200-class GPU, and JPEGs decoded on
the device >= 2x those decoded in the workers, on the same cores.

Compilation: one fresh, empty TorchInductor cache for the whole benchmark (TORCHINDUCTOR_CACHE_DIR in
a temporary folder): the first compiled run (raw) compiles cold, later ones may reuse its kernels
(the JPEG run reuses the synthetic run's graphs: same model, same input shape). --cold_compile gives
every compiled run a cache of its own (comparable warm-ups, a few minutes more). cudnn.benchmark and
the TF32 settings are torch's defaults on both sides (the project sets neither).

Time limits: every subprocess has one (--timeout_s), and the whole benchmark a budget (--budget_s,
480 s on a GPU): a run that would start past it, or overrun it, is reported as not run / timed out,
the others are still printed, and the exit status is 1. A failed run prints the end of its log.

--allow_cpu on a machine without CUDA: resnet18, 32 px, batch 8, 10 classes, 64x48 JPEGs, 2 warm-up +
4 timed steps, bf16 where the CPU has native bfloat16 (avx512_bf16), else fp32; the figures mean
nothing, the code paths are the GPU run's.
"""

import argparse
import concurrent.futures
import math
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import overhead  # noqa: E402  (benchmarks/overhead.py: the raw loop, the launch helpers)
from data_throughput import generate_folder  # noqa: E402  (the photo-like JPEG generator)

GOAL_RATIO = 0.97
GOAL_IMG_PER_S = 5000.0
GOAL_DEVICE_DECODING = 2.0  # --decode_on_device against decoding in the workers, JPEGs, same mode
SIZES = {  # option: (on a GPU, tiny on a CPU with --allow_cpu)
    "model": ("resnet50", "resnet18"),
    "image_size": (224, 32),
    "batch_size": (256, 8),
    "steps": (60, 4),
    "log_every": (10, 2),
    "num_classes": (1000, 10),
    "jpeg_size": ((500, 375), (64, 48)),
    "timeout_s": (360, 900),
    "budget_s": (480, 1800),
}


def _generate_chunk(job):
    root, classes, per_class, size, seed = job
    generate_folder(root, classes=classes, per_class=per_class, size=size, seed=seed)


def generate_jpegs(folder, classes, per_class, size, seed, processes, scratch):
    """root/class_NNNN/*.jpg: `classes` x `per_class` JPEGs from data_throughput's generator, made in
    chunks of classes on `processes` processes (chunk k seeded with seed + k). Returns the count."""
    per_chunk = max(1, math.ceil(classes / (4 * processes)))  # ~4 chunks per process: an even finish
    jobs = []
    for k, first in enumerate(range(0, classes, per_chunk)):
        jobs.append((Path(scratch) / f"chunk_{seed}_{k}", min(per_chunk, classes - first), per_class, size, seed + k))
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with concurrent.futures.ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
        list(pool.map(_generate_chunk, jobs))
    Path(folder).mkdir(parents=True)
    for k, (root, n, _, _, _) in enumerate(jobs):
        for c in range(n):
            (root / f"class_{c:02d}").rename(Path(folder) / f"class_{k * per_chunk + c:04d}")
        shutil.rmtree(root)
    return classes * per_class


def cpu_precision():
    """bf16 where this CPU computes bfloat16 natively, else fp32 ("no")."""
    import torch

    native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    return "bf16" if native else "no"


class Clock:
    """The benchmark's time budget: each subprocess gets min(--timeout_s, what is left)."""

    def __init__(self, timeout_s, budget_s):
        self.start, self.timeout_s, self.budget_s = time.perf_counter(), timeout_s, budget_s

    def elapsed(self):
        return time.perf_counter() - self.start

    def limit(self):
        """Seconds the next subprocess may take, or None when the budget is spent."""
        left = self.budget_s - self.elapsed()
        return None if left < 15 else int(min(self.timeout_s, left))


def raw_run(args, mode, clock):
    limit = clock.limit()
    if limit is None:
        raise RuntimeError("not run: the --budget_s is spent")
    flags = ["--model", args.model, "--image_size", args.image_size, "--batch_size", args.batch_size,
             "--steps", args.steps, "--log_every", args.log_every, "--num_classes", args.num_classes,
             "--device", args.device, "--precision", args.precision, "--channels_last"]
    if mode == "compiled":
        flags += ["--compile", "--compile_mode", args.compile_mode]
    return overhead.run_raw(HERE / "overhead.py", flags, limit, args.cold_compile and mode == "compiled",
                            label=f"raw loop, {mode}")


def project_run(args, mode, data_flags, clock, tmp):
    """The project launched as the README does; returns its figures."""
    limit = clock.limit()
    if limit is None:
        raise RuntimeError("not run: the --budget_s is spent")
    run = Path(tempfile.mkdtemp(dir=tmp))
    cmd = args.launcher.split() + [
        "train_classification.py", *data_flags, "--model", args.model, "--image_size", str(args.image_size),
        "--batch_size", str(args.batch_size), "--epochs", "1", "--warmup_epochs", "0",
        "--max_train_steps", str(args.log_every + args.steps), "--log_every", str(args.log_every),
        "--output_dir", str(run / "run"), "--report_to", "none", "--mixed_precision", args.precision,
        "--channels_last", *(["--compile", "--compile_mode", args.compile_mode] if mode == "compiled" else [])]
    env = overhead.compile_env(run / "inductor", args.cold_compile and mode == "compiled",
                               {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    try:
        wall = overhead.run_logged(cmd, run / "log", limit, env=env, what=f"train_classification.py, {mode}")
        rates, first_window_s, data_wait = overhead.project_windows(run / "run" / "metrics.jsonl", args.batch_size)
        workers = re.search(r"threads, ([0-9]+) workers each", (run / "log").read_text())
        return {"img_per_s": statistics.median(rates), "windows": rates, "first_window_s": first_window_s,
                "wall_s": wall, "data_wait": data_wait, "workers": workers.group(1) if workers else "?"}
    finally:
        shutil.rmtree(run, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allow_cpu", action="store_true",
                   help="without a CUDA device, run tiny on the CPU (a smoke test) instead of stopping")
    p.add_argument("--model", default=None, help="default: resnet50 (CPU: resnet18)")
    p.add_argument("--image_size", type=int, default=None, help="default: 224 (CPU: 32)")
    p.add_argument("--batch_size", type=int, default=None, help="per process; default: 256 (CPU: 8)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps after the --log_every warm-up steps, a multiple of --log_every; "
                        "default: 60 (CPU: 4)")
    p.add_argument("--log_every", type=int, default=None, help="default: 10 (CPU: 2)")
    p.add_argument("--num_classes", type=int, default=None, help="default: 1000 (CPU: 10)")
    p.add_argument("--jpeg_size", type=int, nargs=2, default=None, metavar=("W", "H"),
                   help="generated JPEGs; default: 500 375 (CPU: 64 48)")
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=("eager", "compiled"))
    p.add_argument("--inputs", nargs="+", default=["synthetic", "jpeg", "jpeg_device"],
                   choices=("synthetic", "jpeg", "jpeg_device"))
    p.add_argument("--compile_mode", default="default",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    p.add_argument("--cold_compile", action="store_true", help="a fresh compile cache for every compiled run")
    p.add_argument("--launcher", default="accelerate launch --num_processes 1",
                   help="how the project is started")
    p.add_argument("--timeout_s", type=int, default=None, help="limit of each subprocess; default: 360 (CPU: 900)")
    p.add_argument("--budget_s", type=int, default=None, help="limit of the whole benchmark; default: 480 (CPU: 1800)")
    args = p.parse_args()

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        sys.exit("gpu_throughput.py: no CUDA device (torch.cuda.is_available() is False): this benchmark needs an "
                 "NVIDIA GPU; --allow_cpu runs it tiny on the CPU")
    for name, (on_gpu, on_cpu) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, on_gpu if cuda else on_cpu)
    if args.steps < args.log_every or args.steps % args.log_every:
        p.error("--steps must be a positive multiple of --log_every (the project's figures are whole windows)")
    args.device, args.precision = ("cuda", "bf16") if cuda else ("cpu", cpu_precision())
    clock = Clock(args.timeout_s, args.budget_s)
    print(f"{args.model}, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
          f"{'bf16' if args.precision == 'bf16' else 'fp32'}, channels_last, 1 process; {args.log_every} warm-up + "
          f"{args.steps} timed steps per run; compile mode {args.compile_mode}; on "
          f"{'cuda' if cuda else 'cpu (--allow_cpu: a smoke run, the figures mean nothing)'}; "
          f"torch {torch.__version__}, {os.cpu_count()} cores", flush=True)
    failed = False
    raws, ours = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.cold_compile:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{tmp}/inductor"  # one fresh cache, for every run below
        inputs = {}
        if "synthetic" in args.inputs:
            inputs["synthetic"] = ["--dataset", "synthetic", "--num_classes", str(args.num_classes),
                                   "--synthetic_train_samples", str((args.log_every + args.steps) * args.batch_size),
                                   "--synthetic_val_samples", str(args.batch_size)]
        if {"jpeg", "jpeg_device"} & set(args.inputs):
            start = time.perf_counter()
            per_class = math.ceil((args.log_every + args.steps) * args.batch_size / args.num_classes)
            processes = os.cpu_count() or 1
            size = tuple(args.jpeg_size)
            n = generate_jpegs(f"{tmp}/train", args.num_classes, per_class, size, 0, processes, tmp)
            n_val = generate_jpegs(f"{tmp}/val", args.num_classes, 1, size, 1_000_000, processes, tmp)
            print(f"generated {n} train + {n_val} val JPEGs ({size[0]}x{size[1]}, {args.num_classes} classes) on "
                  f"{processes} processes in {time.perf_counter() - start:.1f} s", flush=True)
            folders = ["--train_dir", f"{tmp}/train", "--val_dir", f"{tmp}/val"]
            inputs.update({name: folders + (["--decode_on_device"] if name == "jpeg_device" else [])
                           for name in ("jpeg", "jpeg_device") if name in args.inputs})
        for mode in args.modes:
            try:
                raws[mode] = raw_run(args, mode, clock)
                print(f"{mode:8s} raw loop (input on the device, {raws[mode]['device']}): "
                      f"{raws[mode]['img_per_s']:.1f} img/s; first {args.log_every} steps "
                      f"{raws[mode]['warmup_s']:.2f} s",
                      flush=True)
            except RuntimeError as e:
                failed = True
                print(f"{mode:8s} raw loop: FAILED: {e}", file=sys.stderr, flush=True)
            for source, flags in inputs.items():
                try:
                    ours[mode, source] = r = project_run(args, mode, flags, clock, tmp)
                    print(f"{mode:8s} project, {source}: {r['img_per_s']:.1f} img/s (windows: "
                          f"{overhead.runs(r['windows'])}); data wait {100 * r['data_wait']:.1f} %, {r['workers']} "
                          f"workers; first window {r['first_window_s']:.2f} s, launch {r['wall_s']:.1f} s", flush=True)
                except RuntimeError as e:
                    failed = True
                    print(f"{mode:8s} project, {source}: FAILED: {e}", file=sys.stderr, flush=True)
    summary(args, raws, ours, cuda)
    print(f"total {clock.elapsed():.0f} s", flush=True)
    if failed:
        sys.exit("gpu_throughput.py: some configurations did not run (see FAILED above)")


def summary(args, raws, ours, cuda):
    print(f"\nsummary: project img/s against the raw loop, same mode; goals: project >= {GOAL_RATIO:.2f}x raw, "
          f">= {GOAL_IMG_PER_S:.0f} img/s (ResNet-50, 224 px, H200-class GPU)")
    print(f"{'configuration':24s} {'project':>9s} {'raw':>9s} {'project/raw':>11s} {'data wait':>9s} "
          f"{'>=' + format(GOAL_RATIO, '.2f') + 'x raw':>11s} {'>=' + format(GOAL_IMG_PER_S, '.0f') + ' img/s':>12s}")
    for (mode, source), r in ours.items():
        raw = raws.get(mode)
        ratio = r["img_per_s"] / raw["img_per_s"] if raw else float("nan")
        print(f"{source + ', ' + mode:24s} {r['img_per_s']:9.1f} {raw['img_per_s'] if raw else float('nan'):9.1f} "
              f"{ratio:11.3f} {100 * r['data_wait']:8.1f}% {verdict(ratio >= GOAL_RATIO, raw):>11s} "
              f"{verdict(r['img_per_s'] >= GOAL_IMG_PER_S, True):>12s}")
    if ours:
        (mode, source), best = max(ours.items(), key=lambda item: item[1]["img_per_s"])
        raw = raws.get(mode)
        ratio = best["img_per_s"] / raw["img_per_s"] if raw else float("nan")
        target = "" if cuda and args.model == "resnet50" and args.image_size == 224 else \
            " (not the goal's setting: ResNet-50, 224 px, on a GPU)"
        print(f"goal >= {GOAL_IMG_PER_S:.0f} img/s: {verdict(best['img_per_s'] >= GOAL_IMG_PER_S, True)} (best: "
              f"{source}, {mode}, {best['img_per_s']:.1f} img/s){target}")
        print(f"goal >= {GOAL_RATIO:.2f}x the raw loop: {verdict(ratio >= GOAL_RATIO, raw)} (the same configuration: "
              f"{ratio:.3f})")
    pairs = [(mode, ours[mode, "jpeg_device"]["img_per_s"] / ours[mode, "jpeg"]["img_per_s"])
             for mode in args.modes if (mode, "jpeg") in ours and (mode, "jpeg_device") in ours]
    if pairs:
        mode, gain = max(pairs, key=lambda pair: pair[1])
        print(f"goal JPEGs decoded on the device >= {GOAL_DEVICE_DECODING:.0f}x in the workers: "
              f"{verdict(gain >= GOAL_DEVICE_DECODING, True)} ({', '.join(f'{m} {g:.2f}x' for m, g in pairs)})")


def verdict(met, measured):
    return "n/a" if not measured else ("met" if met else "NOT MET")


if __name__ == "__main__":
    main()
