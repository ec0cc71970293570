"""Long-tailed digits: does balancing help, and by how much? Each method, three seeds, the default recipe otherwise.

    python benchmarks/long_tail.py                                  # --imbalance 100, 4 methods x seeds 0 1 2
    python benchmarks/long_tail.py --imbalance 10 --seeds 0 --out /tmp/long_tail.json

The embedded digits' training split made long-tailed with `--imbalance RATIO` (class 0 whole, about 143 images;
class 9 1/RATIO of it), validation whole (36 images a class), 18 epochs of resnet18 on one process. For each method
and seed: balanced accuracy (the mean per-class recall), the worst class's recall and top-1 of the final weights
(results.json). Prints a markdown table of mean and spread (sample standard deviation); runs main() in this process,
one run after another (the figures do not depend on the machine's speed, only on its kernels).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

METHODS = {"cross-entropy": [], "class_weights balanced": ["--class_weights", "balanced"],
           "sampler balanced": ["--sampler", "balanced"], "logit_adjust 1": ["--logit_adjust", "1"]}
FIGURES = ("val_balanced_accuracy", "val_worst_recall", "val_top1")


def run(argv):
    """One run of the script in this process; Accelerate's singletons reset after it (as tests/conftest.py does)."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    import train_classification

    try:
        return train_classification.main(argv)
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        PartialState._reset_state()


def table(figures):
    """Markdown rows: each method's mean ± spread of each figure over its seeds."""
    lines = ["| method | balanced accuracy | worst-class recall | top-1 |", "|---|---|---|---|"]
    for method, runs in figures.items():
        cells = []
        for key in FIGURES:
            values = [r[key] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.4f} ± {spread:.4f}")
        lines.append(f"| {method} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--imbalance", type=float, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--out", type=Path, default=None, help="also write every run's figures here (JSON)")
    args = p.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            for seed in args.seeds:
                out = Path(tmp) / f"{method.replace(' ', '_')}-{seed}"
                results = run(["--imbalance", str(args.imbalance), "--seed", str(seed), "--output_dir", str(out),
                               *METHODS[method]])
                figures.setdefault(method, []).append({key: results[key] for key in FIGURES} | {"seed": seed})
                print(f"{method} seed {seed}: " + ", ".join(f"{k} {results[k]:.4f}" for k in FIGURES), flush=True)
    print(f"\n--imbalance {args.imbalance:g}, seeds {' '.join(map(str, args.seeds))}\n\n{table(figures)}")
    if args.out:
        args.out.write_text(json.dumps({"imbalance": args.imbalance, "runs": figures}, indent=1))


if __name__ == "__main__":
    main()
