"""Every export format of trained runs against eager PyTorch, on this machine: the parity over the validation split and
images/s at batch 1 and at 32, each format exported and measured by export.py as a user runs it, one after the other,
with the raw resnet18 training loop's rate of the day beside them (the machine's speed varies from day to day).

    python benchmarks/export_formats.py                  # resnet18 (the default job) and timm/vit_tiny_patch16_224
    python benchmarks/export_formats.py --models resnet18 --formats onnx onnx_int8 --timing_seconds 1
    python benchmarks/export_formats.py --workdir /tmp/exports   # runs trained once there, reused after
    python benchmarks/export_formats.py --models resnet18-multi_digits --formats onnx_int8 openvino_int8  # multi-label

A run is trained first where --workdir has none (`train_classification.py --model M` on the embedded digits, the
ViT at 64x64 pixels from scratch: no weights are downloaded). Prints one markdown row a (model, format).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("onnx", "onnx_fp16", "onnx_int8", "openvino", "openvino_int8", "pt2")
# name -> its training options: the default job's resnet18, a timm ViT from scratch at 64 px, and resnet18 on the
# embedded multi-label tiles (several digits an image: the parity of label sets at the run's threshold)
MODELS = {"resnet18": ["--model", "resnet18"],
          "timm/vit_tiny_patch16_224": ["--model", "timm/vit_tiny_patch16_224", "--image_size", "64", "--optimizer",
                                        "adamw", "--lr", "0.001", "--weight_decay", "0.05"],
          "resnet18-multi_digits": ["--model", "resnet18", "--dataset", "multi_digits"]}
DEFAULT_MODELS = ("resnet18", "timm/vit_tiny_patch16_224")


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(MODELS),
                   help="which runs (resnet18-multi_digits: the multi-label tiles, ~4 min more to train)")
    p.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: the script's, 18)")
    p.add_argument("--timing_seconds", type=float, default=3.0, help="export.py --timing_seconds")
    p.add_argument("--workdir", type=Path, default=Path("runs/export_benchmark"))
    p.add_argument("--raw_steps", type=int, default=20, help="timed steps of the raw resnet18 training loop")
    return p.parse_args(argv)


def run(cmd):
    """`cmd` from the repository root, its output shown only if it fails unexpectedly; its exit code."""
    done = subprocess.run([sys.executable, *map(str, cmd)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.returncode


def trained(model, workdir, epochs):
    """The run folder of `model` on the digits, trained once."""
    folder = workdir / model.replace("/", "_")
    if not (folder / "model.safetensors").is_file():
        more = ["--epochs", str(epochs)] if epochs else []
        code = run(["train_classification.py", *MODELS[model], *more, "--no_plots", "--output_dir", folder])
        if code:
            sys.exit(f"training {model} failed")
    return folder


def record_of(folder, fmt):
    """export.py's record of `fmt` in the run folder: passed, or kept under the failed name."""
    for name in (f"{fmt}.parity.json", f"{fmt}.failed.parity.json"):
        if (folder / "export" / name).is_file():
            return json.loads((folder / "export" / name).read_text())
    sys.exit(f"{folder}: export.py wrote no record for {fmt}")


def main(argv=None):
    args = get_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from overhead import raw_loop

    raw, _, _ = raw_loop("resnet18", 32, 64, args.raw_steps, 3)
    print(f"raw resnet18 training loop (batch 64, 32x32): {raw:.1f} img/s on this machine today")
    print("| model | format | MB | top-1 (mAP) PyTorch | top-1 (mAP) export | agreement | largest prob. diff | "
          "batch 1 img/s PyTorch / export (x) | batch 32 img/s PyTorch / export (x) | check |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        folder = trained(model, args.workdir, args.epochs)
        for fmt in args.formats:
            run(["export.py", folder, "--format", fmt, "--overwrite", "--timing_seconds", args.timing_seconds])
            r = record_of(folder, fmt)
            speed = r["images_per_second"]
            cells = [f"{speed[b]['pytorch']:.0f} / {speed[b]['export']:.0f} "
                     f"({speed[b]['export'] / speed[b]['pytorch']:.2f}x)" for b in ("1", "32")]
            print(f"| {model} | {fmt} | {r['bytes'] / 1e6:.1f} | {r['pytorch']:.4f} | {r['export']:.4f} | "
                  f"{r['agreement']:.4f} | {r['max_probability_difference']:.1e} | {cells[0]} | {cells[1]} | "
                  f"{'passed' if r['passed'] else 'FAILED'} |", flush=True)


if __name__ == "__main__":
    main()
