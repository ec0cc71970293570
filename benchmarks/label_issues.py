"""How well crossval.py finds wrong labels, on the embedded digits with a known share of them flipped.

    python benchmarks/label_issues.py                      # 5 folds, the default recipe, 5 % of the labels flipped
    python benchmarks/label_issues.py --epochs 6 --out runs/bench_labels   # a shorter schedule

1. `crossval.py --folds 5 -- --flip_labels 0.05`: the mean and 95 % interval of top-1 over the folds, and the label
   issues cleanlab finds in the out-of-fold predictions; their recall and precision against flipped_labels.csv.
2. Three runs on the whole training split, scored on the digits' own validation split (360 images, never flipped):
   clean labels; the flipped ones; the flipped ones with `--exclude label_issues.csv`. Each top-1 with its 95 % Wilson
   interval over the 360 images: retraining without the issues should land in the clean run's interval.
"""

import argparse
import csv
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wilson(hits, n, z=1.959964):
    """The 95 % Wilson score interval of a proportion hits / n."""
    p = hits / n
    centre, half = ((p + z * z / (2 * n)) / (1 + z * z / n),
                    z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n))
    return centre - half, centre + half


def run(command, log):
    started = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"{' '.join(map(str, command))} failed ({code}): see {log}")
    return time.perf_counter() - started


def samples(path, column):
    with open(path, newline="") as f:
        return {row[column] for row in csv.DictReader(f)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/bench_label_issues")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--flip", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    p.add_argument("--launch", default="accelerate launch")
    args = p.parse_args()
    out = (ROOT / args.out).resolve()
    schedule = ["--epochs", str(args.epochs)] if args.epochs else []
    cv = out / "cv"
    out.mkdir(parents=True, exist_ok=True)
    wall = run([sys.executable, "crossval.py", "--output_dir", cv, "--folds", str(args.folds), "--launch", args.launch,
                "--", *schedule, "--flip_labels", str(args.flip)], out / "cv.log")
    summary = json.loads((cv / "cv_results.json").read_text())["figures"]["val_top1"]
    flipped, found = samples(cv / "fold_0" / "flipped_labels.csv", "sample"), samples(cv / "label_issues.csv", "sample")
    caught = len(flipped & found)
    print(f"cross-validation ({args.folds} folds, {wall:.0f} s): "
          f"val top-1 {summary['mean']:.4f} ± {summary['std']:.4f}, "
          f"95 % interval {summary['ci95'][0]:.4f} – {summary['ci95'][1]:.4f} "
          f"(the folds' labels {args.flip:.0%} flipped)")
    print(f"label issues: {len(found)} found, {len(flipped)} flipped, {caught} of them found: recall "
          f"{caught / len(flipped):.3f}, precision {caught / max(len(found), 1):.3f}")
    for name, extra in (("clean", []), ("flipped", ["--flip_labels", str(args.flip)]),
                        ("retrained without the issues", ["--flip_labels", str(args.flip), "--exclude",
                                                          str(cv / "label_issues.csv")])):
        folder = out / name.split()[0]
        wall = run([*args.launch.split(), "train_classification.py", *schedule, *extra, "--output_dir", folder],
                   out / f"{name.split()[0]}.log")
        results = json.loads((folder / "results.json").read_text())
        n = results["val_samples"]
        low, high = wilson(round(results["val_top1"] * n), n)
        print(f"{name}: val top-1 {results['val_top1']:.4f} ({round(results['val_top1'] * n)}/{n}; 95 % interval "
              f"{low:.4f} – {high:.4f}), {results['train_samples']} training samples, {wall:.0f} s")


if __name__ == "__main__":
    main()
