"""tune.py on the embedded long-tailed digits: what a seeded study finds, and what pruning saves.

    python benchmarks/tune_study.py                    # 16 trials: unpruned, median, successive halving, hyperband
    python benchmarks/tune_study.py --seed 1 --pruners none median   # another seed, two of them
    python benchmarks/tune_study.py --trials 8 --epochs 4 --out /tmp/tune_bench

Studies of tune.py's default space (on these long-tailed digits: configs/search/tune_space.yaml and the balance
options of long_tail.yaml), each with --baseline (trial 0: the default recipe, nothing searched) and the same --seed,
tracking balanced accuracy, one a pruner: none, median, successive halving, hyperband. Each trial is a one-process
run (`--launch python`) of `--dataset digits --imbalance 100` for --epochs epochs. Printed: the default recipe's
balanced accuracy; for each pruner, its best trial (against the unpruned study's), its trials' states, the epochs it
ran and what it saved against no pruning, and its wall time.
"""

import argparse
import csv
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_study(folder, trials, epochs, pruner, seed, space):
    shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, str(ROOT / "tune.py"), "--study", str(folder), "--trials", str(trials), "--baseline",
               "--seed", str(seed), "--pruner", pruner, "--launch", sys.executable,
               *(["--space", space] if space else []), "--", "--dataset", "digits",
               "--imbalance", "100", "--epochs", str(epochs), "--track_metric", "balanced_accuracy",
               "--num_workers", "0", "--no_plots"]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"tune_study.py: the study in {folder} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    with open(folder / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    return rows, wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/tune_bench")
    p.add_argument("--space", default=None, help="a space file (default: tune.py's own for the data)")
    p.add_argument("--pruners", nargs="+", default=["none", "median", "successive_halving", "hyperband"],
                   help="the studies, one a pruner, the same seed; 'none' first: the others are measured against it")
    args = p.parse_args(argv)
    out = Path(args.out)
    studies = {pruner: run_study(out / pruner, args.trials, args.epochs, pruner, args.seed, args.space)
               for pruner in args.pruners}
    full, _ = studies["none"]
    baseline = float(full[0]["objective"])
    best_full = max(float(r["objective"]) for r in full if r["state"] == "complete")
    ran_full = sum(int(r["epochs"]) for r in full)
    print(f"digits --imbalance 100, {args.epochs} epochs a trial, {args.trials} trials, seed {args.seed}, "
          f"balanced accuracy, space {args.space or 'tune.py default'}")
    print(f"default recipe (trial 0): {baseline:.4f}")
    for pruner, (rows, wall) in studies.items():
        best = max(float(r["objective"]) for r in rows if r["state"] == "complete")
        ran = sum(int(r["epochs"]) for r in rows)
        states = {s: sum(r["state"] == s for r in rows) for s in ("complete", "pruned", "failed")}
        print(f"{pruner}: best trial {best:.4f} ({best - best_full:+.4f} against no pruner); {states['complete']} "
              f"complete, {states['pruned']} pruned, {states['failed']} failed; {ran} epochs, "
              f"{100 * (1 - ran / ran_full):.1f} "
              f"% saved; wall {wall:.0f} s")
    print(f"goal best trial above the default recipe: {'met' if best_full > baseline else 'NOT MET'} "
          f"({best_full:.4f} against {baseline:.4f}, no pruner)")


if __name__ == "__main__":
    main()
