"""Transfer to new classes offline: a backbone trained on the digits 0-4, adapted to the digits 5-9 by fine-tuning the
whole model, the head alone (--freeze_backbone), LoRA adapters (--lora), or not at all: a kNN vote or a linear probe on
its frozen features (--probe knn|linear); top-1, wall time and trainable parameters side by side, with training from
scratch as the floor.

    python benchmarks/transfer.py                          # resnet18 and a small ViT, 6 epochs on 5-9
    python benchmarks/transfer.py --models resnet18 --epochs 3 --out runs/bench_transfer_short

The embedded digits (1,437 train / 360 validation images, 8x8 scans at 32 px) are written as two image folders: A holds
the classes 0-4, B the classes 5-9, each with its train and val split. Each model trains on A (--pretrain_epochs),
then each way of adapting it starts from A's weights with a new classifier (--init_from) and trains on B, once per
seed (the new head's and the run's: --seeds; from scratch, once). The small ViT is a transformers ViT built from a
config (4 blocks of width 96, 4 px patches: nothing downloaded); LoRA adapts its query and value projections (its
default), and for resnet18 the convolutions of its last two stages (--resnet_targets), which have no default.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESNET_TARGETS = ["layer3.0.conv1", "layer3.0.conv2", "layer3.1.conv1", "layer3.1.conv2",
                  "layer4.0.conv1", "layer4.0.conv2", "layer4.1.conv1", "layer4.1.conv2"]


def write_folders(root):
    """The digits as <root>/{A,B}/{train,val}/<class>/<n>.png; A the classes 0-4, B 5-9."""
    from utils.data.sources.digits import load_digits_dataset

    if (root / "B" / "val").is_dir():
        return
    for split, rows in load_digits_dataset().items():
        for i, row in enumerate(rows):
            part = "A" if row["label"] < 5 else "B"
            folder = root / part / ("train" if split == "train" else "val") / str(row["label"])
            folder.mkdir(parents=True, exist_ok=True)
            row["image"].save(folder / f"{i:04d}.png")


def small_vit(folder):
    from transformers import ViTConfig, ViTForImageClassification

    if not (folder / "config.json").is_file():
        config = ViTConfig(image_size=32, patch_size=4, hidden_size=96, num_hidden_layers=4, num_attention_heads=3,
                           intermediate_size=192, num_labels=5)
        ViTForImageClassification(config).save_pretrained(folder)
    return f"hf/{folder}"


def train(argv, out, log):
    """One run of the script on one process: (its results.json, its wall time in seconds, its start-up lines)."""
    if (out / "results.json").is_file():  # kept from an earlier call: --out is a cache
        return json.loads((out / "results.json").read_text()), json.loads((out / "wall.json").read_text()), ""
    started = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "train_classification.py", *map(str, argv), "--output_dir", str(out)],
                              cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"a run failed ({code}): see {log}")
    wall = time.perf_counter() - started
    (out / "wall.json").write_text(json.dumps(wall))
    return json.loads((out / "results.json").read_text()), wall, Path(log).read_text()


def with_new_head(name, weights, out, seed):
    """`weights` (a 5-way model of `name`) with the classifier of a freshly built model, written to `out`: the new
    classes start from a new head, as a fine-tune from other classes does (A's head, kept, pulls the whole ViT's
    features to chance within an epoch on B)."""
    import torch
    from safetensors.torch import load_file, save_file

    from utils.models.libraries import build_model, classifier_parameters

    torch.manual_seed(seed)  # the new head of this seed, the same on every call
    fresh = build_model(name, num_classes=5, class_names=[str(c) for c in range(5, 10)])
    head = {id(p) for p in classifier_parameters(fresh, name)}
    state = load_file(weights)
    state.update({k: p.detach().clone() for k, p in fresh.named_parameters() if id(p) in head})
    save_file(state, str(out))
    return out


def parameter_counts(name, mode, lines):
    """(trainable, total) parameters of `name` for 5 classes adapted by `mode`."""
    from utils.models.libraries import build_model, classifier_parameters

    found = re.search(r"trainable parameters ([\d,]+) of ([\d,]+)", lines)
    if found:
        return tuple(int(n.replace(",", "")) for n in found.groups())
    model = build_model(name, num_classes=5, class_names=[str(c) for c in range(5, 10)])
    total = sum(p.numel() for p in model.parameters())
    return (sum(p.numel() for p in classifier_parameters(model, name)) if mode == "head" else total), total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/bench_transfer")
    p.add_argument("--models", nargs="+", default=["resnet18", "vit"], choices=["resnet18", "vit"])
    p.add_argument("--pretrain_epochs", type=int, default=12)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lora", type=int, default=8, help="the adapters' rank")
    p.add_argument("--seeds", type=int, default=3, help="runs of each way of adapting, each its new head's seed")
    args = p.parse_args()
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_folders(out / "digits")
    data = lambda part: ["--train_dir", out / "digits" / part / "train", "--val_dir", out / "digits" / part / "val",
                         "--image_size", "32", "--num_workers", "2"]
    rows = []
    for model in args.models:
        name = small_vit(out / "small_vit") if model == "vit" else model
        recipe = ["--optimizer", "adamw", "--lr", "1e-3", "--weight_decay", "0.05"] if model == "vit" else []
        base = out / model / "A"
        train(["--model", name, *recipe, *data("A"), "--epochs", args.pretrain_epochs], base, out / f"{model}_A.log")
        targets = ["--lora_targets", *RESNET_TARGETS] if model == "resnet18" else []
        for mode in ("scratch", "full", "head", "lora", "knn", "linear"):
            if mode in ("knn", "linear"):  # the frozen backbone's features: one run, nothing of the model trains
                results, wall, lines = train(["--model", name, *data("B"), "--epochs", args.epochs, "--init_from",
                                              base / "model.safetensors", "--probe", mode],
                                             out / model / mode, out / f"{model}_{mode}.log")
                trainable, total = parameter_counts(name, "head" if mode == "linear" else mode, "")
                rows.append((model, mode, [(results["val_top1"], results["train_time_s"], wall)],
                             trainable if mode == "linear" else 0, total))
                continue
            # the ViT's LRs: the whole model fine-tuned at a fifth of its from-scratch LR, its head and adapters at ten
            # times it
            lr = {"full": ["--lr", "2e-4"], "head": ["--lr", "0.01"], "lora": ["--lr", "0.01"]}.get(mode, [])
            figures = []
            for seed in range(1 if mode == "scratch" else args.seeds):  # the new head's seed and the run's
                init = ["--init_from", with_new_head(name, base / "model.safetensors",
                                                     base / f"new_head_{seed}.safetensors", seed)]
                extra = {"scratch": [], "full": init, "head": [*init, "--freeze_backbone"],
                         "lora": [*init, "--lora", args.lora, *targets]}[mode]
                results, wall, lines = train(["--model", name, *recipe, *(lr if model == "vit" else []), *data("B"),
                                              "--epochs", args.epochs, "--seed", seed, *extra],
                                             out / model / f"{mode}_{seed}", out / f"{model}_{mode}_{seed}.log")
                lines = lines or (out / f"{model}_{mode}_{seed}.log").read_text()
                figures.append((results["val_top1"], results["train_time_s"], wall))
            trainable, total = parameter_counts(name, mode, lines)
            rows.append((model, mode, figures, trainable, total))
    print(f"digits 5-9 ({args.epochs} epochs) from a backbone trained on 0-4 ({args.pretrain_epochs} epochs); "
          f"LoRA rank {args.lora}; {args.seeds} seeds of the new head and the run")
    print("| model | adapted | val top-1, mean (min - max over seeds) | training s | wall s | trainable parameters |")
    print("|---|---|---|---|---|---|")
    for model, mode, figures, trainable, total in rows:
        top1, train_s, wall = ([f[i] for f in figures] for i in range(3))
        spread = f" ({min(top1):.4f} - {max(top1):.4f})" if len(top1) > 1 else ""
        print(f"| {model} | {mode} | {sum(top1) / len(top1):.4f}{spread} | {sum(train_s) / len(train_s):.1f} | "
              f"{sum(wall) / len(wall):.1f} | {trainable:,} of {total:,} ({100 * trainable / total:.2f} %) |")

if __name__ == "__main__":
    main()
