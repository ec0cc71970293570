"""How much of the image should the random train crop keep? Val figures for each --train_crop_scale MIN (MAX 1), seeds.

    python benchmarks/crop_scale.py                                       # every set, MIN 0.08 .. 1, seeds 0 1 2
    python benchmarks/crop_scale.py --sets tiles --mins 0.08 0.7 --seeds 0 --out /tmp/crop.json

Three small sets that train as a user's files do (written by `datasets`' save_to_disk, read back by --dataset DIR,
so they take the image-file path and its random-resized crop, not the embedded data's own recipe), all 32 px:
- tiles: multi-label, the embedded multi_digits tiles (2-4 of scikit-learn's digits in a 2x2 grid, labelled with
  every digit shown), 1,200 train / 301 validation, 10 epochs; figures: mAP and F1 micro at 0.5.
- spectral: single-label, the embedded spectral_digits (6-band uint16 TIFFs, the digit in bands 3-5, a brighter
  decoy of another class in bands 0-2), --mean auto --std auto, 6 epochs; top-1.
- digits: single-label, the embedded digits as RGB PNGs (1,437 train / 360 validation), 6 epochs; top-1.
resnet18 from scratch on one process, no flip (digits are not symmetric), the defaults otherwise. Prints a markdown
table of the mean and spread (sample standard deviation) over the seeds; runs main() in this process, one run after
another (the figures depend on the machine's kernels, not its speed).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE), str(HERE / "benchmarks")]
from long_tail import run  # noqa: E402  (one run of the script in this process)

SETS = {"tiles": ["--max_train_samples", "1200", "--max_val_samples", "301", "--epochs", "10"],
        "spectral": ["--mean", "auto", "--std", "auto", "--epochs", "6"],
        "digits": ["--epochs", "6"]}
FIGURES = {"tiles": ("val_map", "val_f1_micro"), "spectral": ("val_top1",), "digits": ("val_top1",)}


def write_set(name, folder):
    """The set `name` as a save_to_disk folder under `folder`; returns its path."""
    from utils.data.sources.digits import load_digits_dataset
    from utils.data.sources.multi_digits import load_multi_digits
    from utils.data.sources.spectral_digits import load_spectral_digits

    load = {"tiles": load_multi_digits, "spectral": load_spectral_digits, "digits": load_digits_dataset}[name]
    path = folder / name
    load().save_to_disk(str(path))
    return path


def table(figures):
    """Markdown rows: each set and MIN, the mean ± spread of its figures over the seeds."""
    lines = ["| set | --train_crop_scale | figure | mean ± sd | seeds |", "|---|---|---|---|---|"]
    for (name, low), runs in figures.items():
        for key in FIGURES[name]:
            values = [r[key] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            lines.append(f"| {name} | {low:g} 1 | {key} | {statistics.mean(values):.4f} ± {spread:.4f} | "
                         f"{len(values)} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--mins", type=float, nargs="+", default=[0.08, 0.2, 0.35, 0.5, 0.7, 1.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=None, help="also write every run's figures here (JSON)")
    args = p.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets:
            data = write_set(name, Path(tmp))
            for seed in args.seeds:
                for low in args.mins:
                    out = Path(tmp) / f"{name}-{low:g}-{seed}"
                    results = run(["--dataset", str(data), "--image_size", "32", "--no_hflip", "--seed", str(seed),
                                   "--train_crop_scale", str(low), "1", "--output_dir", str(out), "--top_losses", "0",
                                   *SETS[name]])
                    row = {key: results[key] for key in FIGURES[name]}
                    figures.setdefault((name, low), []).append(row | {"seed": seed})
                    print(f"{name} --train_crop_scale {low:g} 1 seed {seed}: " +
                          ", ".join(f"{k} {v:.4f}" for k, v in row.items()), flush=True)
    print(f"\n{table(figures)}")
    if args.out:
        args.out.write_text(json.dumps([{"set": name, "min": low, "runs": runs}
                                        for (name, low), runs in figures.items()], indent=1))


if __name__ == "__main__":
    main()
