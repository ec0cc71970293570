"""Does a change keep behaviour? Fingerprints of five runs, bit for bit, on this checkout or another commit.

    python benchmarks/same_behaviour.py --ref HEAD~3 --out /tmp/before.json    # a commit (a git worktree of it)
    python benchmarks/same_behaviour.py --out /tmp/after.json --compare /tmp/before.json    # this checkout
    python benchmarks/same_behaviour.py --runs two_proc video stream --out /tmp/quick.json  # skip the 18 epochs
    # do checkpoints written by an older commit resume here as they resume there?
    python benchmarks/same_behaviour.py --runs resumed --written_by HEAD~3 --out /tmp/cross.json \
        --compare /tmp/before.json

A fingerprint is the SHA-256 of every .safetensors file a run saved (final weights, EMA, best/, model/),
every figure of its results.json, and each logged step's loss and LR from metrics.jsonl; times and
throughputs are left out. The runs start the script as users do (accelerate launch, the CLI only), so a
commit with the same options runs them unchanged:

    default   the quickstart: `accelerate launch train_classification.py` (18 epochs on the digits)
    two_proc  2 processes, synthetic 16 px, 2 DataLoader workers each, EMA, MixUp/CutMix, erasing, RA, 2 epochs
    video     moving digits, mc3_18 at 16 px, 12 steps, multi-view test (2 clips x 3 crops)
    stream    4 generated parquet shards, --streaming, 2 processes x 2 workers, 2 epochs
    resumed   synthetic 16 px, EMA, MixUp/CutMix, erasing, 2 epochs: stopped at step 5 (mid-epoch, a checkpoint),
              then the same command with --resume latest; with --written_by COMMIT, that commit's script
              writes the checkpoint and the one under test resumes it

Compare fingerprints made on the same machine: other CPU kernels round differently. With --compare,
every difference is printed and the exit code is 1 if there is any.
"""

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
SYNTHETIC = ["--dataset", "synthetic", "--image_size", "16", "--num_classes", "7", "--batch_size", "8",
             "--synthetic_train_samples", "64", "--synthetic_val_samples", "37"]
RUNS = {  # name: (processes, arguments); "{shards}" is the folder of generated parquet shards
    "default": (1, []),
    "two_proc": (2, [*SYNTHETIC, "--num_workers", "2", "--epochs", "2", "--warmup_epochs", "0.5", "--model_ema",
                     "--model_ema_steps", "2", "--mixup_alpha", "0.2", "--cutmix_alpha", "1.0", "--random_erase",
                     "0.5", "--ra_reps", "2", "--log_every", "1"]),
    "video": (1, ["--dataset", "moving_digits", "--model", "mc3_18", "--image_size", "16", "--epochs", "1",
                  "--max_train_steps", "12", "--num_workers", "0", "--test_clips", "2", "--test_crops", "3",
                  "--log_every", "1"]),
    "stream": (2, ["--dataset", "{shards}", "--streaming", "--image_size", "16", "--batch_size", "4",
                   "--num_workers", "2", "--epochs", "2", "--warmup_epochs", "0.5", "--log_every", "1"]),
    "resumed": (1, [*SYNTHETIC, "--num_workers", "0", "--epochs", "2", "--warmup_epochs", "0.5", "--model_ema",
                    "--model_ema_steps", "2", "--mixup_alpha", "0.2", "--cutmix_alpha", "1.0", "--random_erase",
                    "0.5", "--log_every", "1"]),
}
STOP_AT = ["--max_train_steps", "5"]  # the resumed run's first half ends mid-epoch 0 (8 steps an epoch)
def is_clock(key):
    """train_time_s, img_per_s_per_device, data_time_frac...: how fast, not what was computed."""
    return "time" in key or "per_s" in key or key.endswith("_s")


def make_shards(root):
    """train-0000k-of-00004.parquet (24 rows each) and a validation file: 20x20 pictures of 4 classes."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=list("abcd")))

    def part(n):
        labels = [i % 4 for i in range(n)]
        pictures = [Image.fromarray((rng.integers(0, 60, (20, 20, 3)) + np.array([60 * c, 200 - 40 * c, 30 + 50 * c]))
                                    .clip(0, 255).astype(np.uint8)) for c in labels]
        return datasets.Dataset.from_dict({"image": pictures, "label": labels}, features=features)

    for s in range(4):
        part(24).to_parquet(root / f"train-{s:05d}-of-00004.parquet")
    part(16).to_parquet(root / "validation-00000-of-00001.parquet")


def launch(root, nproc, args, out):
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if nproc > 1:
        cmd += ["--config_file", str(root / "accel_configs" / "cpu_2proc.yaml"), "--num_processes", str(nproc),
                "--monitor_interval", "0.1"]
    cmd += [str(root / "train_classification.py"), *args, "--output_dir", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{out.name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")


def behaviour(value):
    if isinstance(value, dict):
        return {k: behaviour(v) for k, v in value.items() if not is_clock(k)}
    return value


def fingerprint(out, tmp):
    def read(path):  # the temporary folder's name is not behaviour
        return path.read_text().replace(str(tmp), "<tmp>")

    weights = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(out.rglob("*.safetensors")) if "checkpoints" not in p.parts}
    rows = [behaviour(json.loads(line)) for line in read(out / "metrics.jsonl").splitlines()]
    return {"weights": weights, "results": behaviour(json.loads(read(out / "results.json"))), "metrics": rows}


def run_all(root, names, written_by=None):
    """Fingerprints of the runs `names` of the script under `root`; the resumed run's checkpoint is
    written by the script under `written_by` (default: the same)."""
    prints = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "stream" in names:
            (tmp / "shards").mkdir()
            make_shards(tmp / "shards")
        for name in names:
            nproc, args = RUNS[name]
            print(f"{name}: {nproc} process(es) ...", flush=True)
            args = [a.replace("{shards}", str(tmp / "shards")) for a in args]
            if name == "resumed":
                launch(written_by or root, nproc, args + STOP_AT, tmp / name)
                args = args + ["--resume", "latest"]
            launch(root, nproc, args, tmp / name)
            prints[name] = fingerprint(tmp / name, tmp)
    return prints


def differences(before, after):
    lines = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            lines.append(f"{name}: only in {'after' if a is None else 'before'}")
            continue
        for part in ("weights", "results"):
            for key in sorted(set(a[part]) | set(b[part])):
                if a[part].get(key) != b[part].get(key):
                    lines.append(f"{name} {part} {key}: {a[part].get(key)} -> {b[part].get(key)}")
        if a["metrics"] != b["metrics"]:
            step = next((i for i, (x, y) in enumerate(zip(a["metrics"], b["metrics"])) if x != y),
                        min(len(a["metrics"]), len(b["metrics"])))
            lines.append(f"{name} metrics.jsonl: first difference at row {step}")
    return lines


@contextlib.contextmanager
def worktree(commit):
    """A git worktree of `commit`, removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "worktree", "add", "--detach", tmp, commit], cwd=HERE, check=True)
        try:
            yield Path(tmp)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=HERE, check=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    p.add_argument("--ref", default=None, help="run the script of this commit (checked out in a git worktree)")
    p.add_argument("--out", type=Path, required=True, help="write the fingerprints here (JSON)")
    p.add_argument("--compare", type=Path, default=None, help="fingerprints to compare with (JSON)")
    p.add_argument("--written_by", default=None, help="the resumed run's checkpoint written by this commit's script")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        root = HERE if args.ref is None else stack.enter_context(worktree(args.ref))
        written_by = None if args.written_by is None else stack.enter_context(worktree(args.written_by))
        prints = run_all(root, args.runs, written_by)
    args.out.write_text(json.dumps(prints, indent=1))
    print(f"fingerprints of {', '.join(prints)} -> {args.out}")
    if args.compare is not None:
        before = {k: v for k, v in json.loads(args.compare.read_text()).items() if k in prints}
        lines = differences(before, prints)
        print("\n".join(lines) if lines else f"the same, bit for bit: {', '.join(prints)}")
        return 1 if lines else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
