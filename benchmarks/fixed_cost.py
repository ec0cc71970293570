"""What a run pays before its first step and after its last, beside the whole wall of the same job under timm's
train.py.

    python benchmarks/fixed_cost.py                                  # this checkout, 3 runs
    python benchmarks/fixed_cost.py --ref 050d384                    # and a commit (a git worktree), alternated
    python benchmarks/fixed_cost.py --timm ~/pytorch-image-models/train.py   # and timm's script, alternated

The job: the embedded digits written as an image folder (1,437 / 360 PNGs), resnet18 from scratch at 32 px, 8
epochs, one process (`python train_classification.py`), the same DataLoader workers for every script. A driver
(tune.py, crossval.py) runs it many times over, so what it pays once per run is multiplied:

    start   from the command to the line build_job prints last ("<model> on <data>: ... steps/epoch"): imports,
            the data read and checked, the model and optimizer built, the metric modules loaded
    end     from the last validation's line ("epoch N val: ...") to the exit: the weights, the model folder,
            results.json, the plots, report.html
    wall    the whole command; timm's train.py is timed whole (its options: the same model, size, epochs, batch,
            LR, weight decay, warmup and cosine schedule)

Each line the script prints is stamped when it arrives (unbuffered output). Medians and ranges are printed, with
each run's top-1. The machine's speed varies a lot from day to day: compare figures of the same invocation, and
state the raw resnet18 loop of the day beside them (benchmarks/overhead.py).
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import checkouts, write_digits_folder  # noqa: E402

EPOCHS, SIZE, BATCH, LR, WD = 8, 32, 64, 0.1, 5e-4


def stamped_run(cmd, cwd):
    """[(seconds since the start, line)] of a command's output, and its wall; exits on a failed run."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    start, stamped = time.perf_counter(), []
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        for line in p.stdout:
            stamped.append((time.perf_counter() - start, line.rstrip()))
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{cmd[1]}: exit {p.returncode}\n" + "\n".join(line for _, line in stamped[-20:]))
    return stamped, wall


def ours(root, folder, out, workers):
    cmd = [sys.executable, str(root / "train_classification.py"), "--train_dir", str(folder / "train"),
           "--val_dir", str(folder / "val"), "--image_size", str(SIZE), "--epochs", str(EPOCHS), "--batch_size",
           str(BATCH), "--lr", str(LR), "--weight_decay", str(WD), "--num_workers", str(workers), "--output_dir",
           str(out)]
    stamped, wall = stamped_run(cmd, root)
    ready, last_val = marks(stamped)
    top1 = json.loads((out / "results.json").read_text())["val_top1"]
    return {"wall": wall, "start": ready, "end": wall - last_val, "top1": top1}


def marks(stamped):
    """(seconds to the line build_job prints last, seconds to the last validation's line) of (seconds, line) pairs;
    None where the line never came."""
    ready = next((t for t, line in stamped if " steps/epoch -> " in line), None)
    validations = [t for t, line in stamped if line.startswith("epoch ") and " val: " in line]
    return ready, validations[-1] if validations else None


def timm_run(script, folder, out, workers):
    cmd = [sys.executable, str(script), "--data-dir", str(folder), "--train-split", "train", "--val-split", "val",
           "--model", "resnet18", "--num-classes", "10", "--img-size", str(SIZE), "--epochs", str(EPOCHS),
           "--batch-size", str(BATCH), "--opt", "sgd", "--lr", str(LR), "--weight-decay", str(WD), "--sched",
           "cosine", "--warmup-epochs", "1", "--workers", str(workers), "--device", "cpu", "--no-prefetcher",
           "--output", str(out), "--experiment", "run"]
    _, wall = stamped_run(cmd, Path(script).parent)
    rows = list(csv.DictReader(open(out / "run" / "summary.csv")))
    return {"wall": wall, "top1": float(rows[-1]["eval_top1"]) / 100}


def summary(values):
    return f"{statistics.median(values):6.2f} s [{min(values):.2f}-{max(values):.2f}]"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ref", default=None, help="also time this commit's script (a git worktree), alternated")
    p.add_argument("--timm", default=None, help="timm's train.py (pytorch-image-models), timed on the same job")
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers of every script (1: ours on 2 cores)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_digits_folder(tmp / "digits")
        with checkouts(tmp, args.ref) as roots:
            runs = {name: [] for name in [*roots, *(["timm train.py"] if args.timm else [])]}
            for run in range(args.runs):
                for side, (name, root) in enumerate(roots.items()):
                    runs[name].append(ours(root, tmp / "digits", tmp / f"out_{side}_{run}", args.workers))
                if args.timm:
                    runs["timm train.py"].append(timm_run(Path(args.timm).resolve(), tmp / "digits",
                                                          tmp / f"timm_{run}", args.workers))
    for name, figures in runs.items():
        parts = [f"wall {summary([f['wall'] for f in figures])}"]
        if "start" in figures[0]:
            parts += [f"start {summary([f['start'] for f in figures])}", f"end {summary([f['end'] for f in figures])}",
                      f"fixed {summary([f['start'] + f['end'] for f in figures])}"]
        parts.append("top-1 " + " ".join(f"{f['top1']:.4f}" for f in figures))
        print(f"{name:>14}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
