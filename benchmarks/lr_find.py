"""The LR range test's suggestion against the recipe's LR, over jobs and seeds of the embedded data.

    python benchmarks/lr_find.py                                  # 4 jobs x 3 seeds, their epochs: docs/benchmarks.md
    python benchmarks/lr_find.py --jobs digits_lt --seeds 0 --epochs 3

For each job and seed: `--lr_find` (100 steps), then, where its curve holds an LR, a run at it and a run at the
recipe's LR (--lr 0.1), the same seed and every other option the job's: the val figure of each (top-1, or mAP for
multi-label data). A curve that holds no LR says why (`--lr auto` refuses it in the same words). Each run is
`python train_classification.py` (one process: `accelerate launch` adds only its start-up).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = {"digits": [],  # the default job: resnet18 on the digits
        "digits_lt": ["--imbalance", "100"],  # long-tailed
        "digits_small": ["--model", "timm/test_resnet.r160_in1k"],  # a 0.5 M-parameter ResNet
        "multi": ["--dataset", "multi_digits"]}  # several labels a tile: BCE
RECIPE_LR = 0.1  # the default recipe's, and these jobs'


def run(argv, folder):
    """train_classification.py with `argv` into `folder`: its results.json (or lr_find's line), and its wall time."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "train_classification.py", *map(str, argv), "--no_plots", "--output_dir",
                           str(folder)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout, time.perf_counter() - started


def figure(folder):
    results = json.loads((Path(folder) / "results.json").read_text())
    return ("mAP", results["val_map"]) if "val_map" in results else ("top-1", results["val_top1"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=None, help="default: each job's recipe's")
    p.add_argument("--steps", type=int, default=100, help="the sweep's steps (--lr_find_steps)")
    p.add_argument("--out", default="runs/bench_lr_find")
    args = p.parse_args(argv)
    out = (ROOT / args.out).resolve()
    schedule = ["--epochs", args.epochs] if args.epochs else []
    for job in args.jobs:
        for seed in args.seeds:
            options = [*JOBS[job], "--seed", seed]
            said, wall = run([*options, "--lr_find", "--lr_find_steps", args.steps], out / f"{job}_{seed}" / "sweep")
            reading = json.loads((out / f"{job}_{seed}" / "sweep" / "lr_find.json").read_text())
            found = reading["suggestions"]
            if found is None:
                print(f"{job} seed {seed}: no LR: {reading['no_suggestion']} ({reading['steps']} steps, {wall:.0f} s)",
                      flush=True)
                continue
            scored = {}
            for name, lr in (("suggested", found["suggested"]), ("recipe", RECIPE_LR)):
                run([*options, *schedule, "--lr", lr], out / f"{job}_{seed}" / name)
                scored[name] = figure(out / f"{job}_{seed}" / name)
            kind = scored["recipe"][0]
            print(f"{job} seed {seed}: suggested {found['suggested']:g} (lowest {found['lowest']:g}): val {kind} "
                  f"{scored['suggested'][1]:.4f} against {scored['recipe'][1]:.4f} at the recipe's {RECIPE_LR:g}",
                  flush=True)


if __name__ == "__main__":
    main()
