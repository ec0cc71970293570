"""tune.py on the embedded long-tailed digits: what a seeded study finds, and what pruning saves.

    python benchmarks/tune_study.py                    # 16 trials, median pruner, then the same study unpruned
    python benchmarks/tune_study.py --space configs/search/long_tail.yaml   # LR, balancing: sampler, weights
    python benchmarks/tune_study.py --trials 8 --epochs 4 --out /tmp/tune_bench

Two studies of the default space (configs/search/tune_space.yaml), each with --baseline (trial 0: the default recipe, nothing
searched) and the same --seed, tracking balanced accuracy: one with the median pruner, one without. Each trial is a
one-process run (`--launch python`) of `--dataset digits --imbalance 100` for --epochs epochs. Printed: the default
recipe's balanced accuracy, the best trial's, the validations (epochs) each study ran and what pruning saved, and wall
times; with the goals (the best trial above the default recipe; pruning saves at least 30 % of the epochs).
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
               "--num_workers", "0"]
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
    p.add_argument("--space", default=None, help="a space file (default: tune.py's, configs/search/tune_space.yaml)")
    args = p.parse_args(argv)
    out = Path(args.out)
    pruned, pruned_wall = run_study(out / "median", args.trials, args.epochs, "median", args.seed, args.space)
    full, full_wall = run_study(out / "none", args.trials, args.epochs, "none", args.seed, args.space)
    baseline = float(pruned[0]["objective"])
    best = max(float(r["objective"]) for r in pruned if r["state"] == "complete")
    best_full = max(float(r["objective"]) for r in full if r["state"] == "complete")
    ran, ran_full = (sum(int(r["epochs"]) for r in rows) for rows in (pruned, full))
    saved = 1 - ran / ran_full
    states = {s: sum(r["state"] == s for r in pruned) for s in ("complete", "pruned", "failed")}
    print(f"digits --imbalance 100, {args.epochs} epochs a trial, {args.trials} trials, seed {args.seed}, "
          f"balanced accuracy, space {args.space or 'configs/search/tune_space.yaml'}")
    print(f"default recipe (trial 0): {baseline:.4f}")
    print(f"median pruner: best trial {best:.4f}; {states['complete']} complete, {states['pruned']} pruned, "
          f"{states['failed']} failed; {ran} epochs; wall {pruned_wall:.0f} s")
    print(f"no pruner:     best trial {best_full:.4f}; {ran_full} epochs; wall {full_wall:.0f} s")
    print(f"pruning saved {100 * saved:.1f} % of the epochs ({ran} against {ran_full}), "
          f"{100 * (1 - pruned_wall / full_wall):.1f} % of the wall time")
    print(f"goal best trial above the default recipe: {'met' if best > baseline else 'NOT MET'} "
          f"({best:.4f} against {baseline:.4f})")
    print(f"goal pruning saves >= 30 % of the epochs: {'met' if saved >= 0.3 else 'NOT MET'} ({100 * saved:.1f} %)")


if __name__ == "__main__":
    main()
