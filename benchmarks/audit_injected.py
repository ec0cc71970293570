"""audit.py against problems injected into the embedded digits, as a user runs it: recall and precision of each kind,
its wall time, and a scale figure of the nearest-neighbour search (faiss) on 1M synthetic embeddings.

    python benchmarks/audit_injected.py                         # 40 of each kind of copy, pixels only
    python benchmarks/audit_injected.py --epochs 6              # also a run trained on the folders: its features
    python benchmarks/audit_injected.py --per_kind 2 --max_samples 60 --scale 5000 --raw_steps 2  # the suite's
    python benchmarks/audit_injected.py --scale 1000000         # the 1M-vector figure alone is ~1 GB, ~3 min here

The digits are written as PNG folders (train/<class>/, val/<class>/), then, for --per_kind samples each: near copies
across the split (resized to 48 px, JPEG re-encoded at quality 70, cropped by 5 % at a random place, brightened by 30 %;
half of validation images put in train, half the other way), exact copies across (the pixels of a validation image
saved as BMP in train: other bytes, the same pixels), relabelled copies (a training image's pixels in validation under
another class; a JPEG copy of one in train under another class), blank, constant and white images, and unreadable
files. Recall: the injected pairs found as their kind (a relabelled copy as a conflict); precision: of the pairs found
across the splits with an injected copy in them, those that are the injected pair.
"""

import argparse
import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NEAR_KINDS = ("resized", "jpeg", "cropped", "brightened")


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per_kind", type=int, default=40, help="injected samples of each kind")
    p.add_argument("--max_samples", type=int, default=None,
                   help="the first N training digits and N / 4 validation ones (default: all 1,437 and 360)")
    p.add_argument("--raw_steps", type=int, default=20, help="timed steps of the raw resnet18 training loop")
    p.add_argument("--epochs", type=int, default=0, help="train a run on the folders first and audit with its "
                   "features (0: pixels only)")
    p.add_argument("--scale", type=int, default=1_000_000, help="synthetic embeddings of the scale figure (0: none)")
    p.add_argument("--dim", type=int, default=256, help="their dimension (the audit's pixel descriptor's)")
    p.add_argument("--workdir", type=Path, default=Path("runs/audit_benchmark"))
    p.add_argument("--num_processes", type=int, default=1, help="accelerate launch's processes for the audit")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def near_copy(image, kind, rng):
    from PIL import Image, ImageEnhance

    w, h = image.size
    if kind == "resized":
        return image.resize((48, 48), Image.BICUBIC)
    if kind == "jpeg":
        return reencoded(image)
    if kind == "cropped":
        cut = 0.05 * w
        x, y = rng.uniform(0, cut, 2)
        return image.crop((round(x), round(y), round(x + w - cut), round(y + h - cut)))
    return ImageEnhance.Brightness(image).enhance(1.3)


def reencoded(image):
    from PIL import Image

    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=70)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def placed(path):
    """`path`, its folder made (a class a split lacks, in a subset)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def build(folder, per_kind, seed, max_samples=None):
    """The digits as folders with the problems injected; {kind: [(source path, copy path)]} and [(path, kind)] of the
    injected images (paths relative to `folder`, as the audit names samples: absolute)."""
    from PIL import Image

    from utils.data.sources.digits import load_digits_dataset

    rng = np.random.default_rng(seed)
    splits = load_digits_dataset()
    paths = {}
    for split in ("train", "val"):
        ds = splits["train" if split == "train" else "validation"]
        if max_samples:
            ds = ds.select(range(max_samples if split == "train" else max_samples // 4))
        paths[split] = []
        for i, (image, label) in enumerate(zip(ds["image"], ds["label"])):
            path = folder / split / str(label) / f"{i:05d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path)
            paths[split].append((path, label, image))
    picked = rng.permutation(len(paths["val"]))
    from_train = rng.permutation(len(paths["train"]))
    pairs, singles, v, t = {"near": [], "exact": [], "conflict": []}, [], iter(picked), iter(from_train)
    for kind in NEAR_KINDS:
        for n in range(per_kind):  # half validation -> train, half train -> validation
            source_split, index = ("val", next(v)) if n % 2 == 0 else ("train", next(t))
            path, label, image = paths[source_split][index]
            target = folder / ("train" if source_split == "val" else "val") / str(label) / f"near_{kind}_{n}.png"
            near_copy(image, kind, rng).save(placed(target))
            pairs["near"].append((path, target))
    for n in range(per_kind):
        path, label, image = paths["val"][next(v)]
        target = folder / "train" / str(label) / f"exact_{n}.bmp"  # other bytes, the same pixels
        image.save(placed(target))
        pairs["exact"].append((path, target))
    for n in range(per_kind):
        path, label, image = paths["train"][next(t)]
        other = (label + 1 + n % 9) % 10
        if n % 2 == 0:  # the same pixels in validation under another class
            target = folder / "val" / str(other) / f"relabelled_{n}.png"
            image.save(placed(target))
        else:  # a JPEG copy in training under another class
            target = folder / "train" / str(other) / f"relabelled_{n}.png"
            reencoded(image).save(placed(target))
        pairs["conflict"].append((path, target))
    for n in range(per_kind):
        split = ("train", "val")[n % 2]
        for kind, value in (("blank", 0), ("constant", 128), ("white", 255)):
            target = folder / split / str(n % 10) / f"{kind}_{n}.png"
            Image.new("RGB", (32, 32), (value,) * 3).save(placed(target))
            singles.append((target, "constant"))
        broken = folder / split / str(n % 10) / f"unreadable_{n}.png"
        placed(broken).write_bytes(paths[split][0][0].read_bytes()[:40])  # a truncated PNG
        singles.append((broken, "unreadable"))
    return pairs, singles


def scored(audit_dir, pairs, singles):
    """{kind: (recall, precision or None)} of the audit's findings against what was injected."""
    import csv

    with open(audit_dir / "findings.csv", newline="") as f:
        found = list(csv.DictReader(f))
    pair_kinds = {}
    for row in found:
        if row["other_sample"]:
            pair_kinds[frozenset((row["sample"], row["other_sample"]))] = row["kind"]
    out = {}
    for kind, wanted in (("near", "near_copy"), ("exact", "exact_copy"), ("conflict", "conflict")):
        truth = {frozenset((str(a), str(b))) for a, b in pairs[kind]}
        copies = {str(b) for _, b in pairs[kind]}
        with_copy = [pair for pair in pair_kinds if pair & copies]  # found, of any kind, with an injected copy
        precision = sum(pair in truth for pair in with_copy) / len(with_copy) if with_copy else None
        out[kind] = (sum(pair_kinds.get(pair) == wanted for pair in truth) / len(truth), precision)
    singles_found = {row["sample"]: row["kind"] for row in found if not row["other_sample"]}
    for kind in ("constant", "unreadable"):
        wanted = [str(p) for p, k in singles if k == kind]
        out[kind] = (sum(singles_found.get(p) == kind for p in wanted) / len(wanted), None)
    return out


def scale_figure(count, dim, seed):
    """(seconds to build, to query 10,000 vectors, extrapolated to all, peak RSS GB) of faiss's exact inner-product
    index over `count` random unit vectors, and of an IVF index (about 4 sqrt(count) lists, a power of 2, at most
    4,096; 16 probed)."""
    import faiss

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:10_000]
    rows = []
    for name in ("flat", "ivf"):
        t0 = time.perf_counter()
        if name == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            lists = min(4096, 2 ** round(np.log2(4 * count ** 0.5)))  # faiss's rule of thumb: about 4 sqrt(n)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors[rng.choice(count, min(count, 100_000), replace=False)])
            index.nprobe = 16
        index.add(vectors)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.search(queries, 6)
        queried = time.perf_counter() - t0
        rows.append((name, built, queried, queried * count / len(queries)))
        del index
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return rows, peak


def main(argv=None):
    args = get_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from overhead import raw_loop

    raw, _, _ = raw_loop("resnet18", 32, 64, args.raw_steps, 3)
    print(f"raw resnet18 training loop (batch 64, 32x32): {raw:.1f} img/s on this machine today")
    data = (args.workdir / "data").resolve()
    if not data.is_dir():
        pairs, singles = build(data, args.per_kind, args.seed, args.max_samples)
        (args.workdir / "injected.json").write_text(json.dumps({k: [[str(a), str(b)] for a, b in v]
                                                                for k, v in pairs.items()} |
                                                               {"singles": [[str(p), k] for p, k in singles]}))
    saved = json.loads((args.workdir / "injected.json").read_text())
    singles = [(p, k) for p, k in saved.pop("singles")]
    pairs = saved
    options = ["--train_dir", data / "train", "--val_dir", data / "val", "--image_size", "32", "--skip_bad_images"]
    run = []
    if args.epochs:
        folder = (args.workdir / "run").resolve()
        if not (folder / "model.safetensors").is_file():
            subprocess.run([sys.executable, ROOT / "train_classification.py", *options, "--epochs", str(args.epochs),
                            "--no_plots", "--output_dir", folder], check=True, capture_output=True)
        run = [folder]
    out = (args.workdir / "audit").resolve()
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(args.num_processes),
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    t0 = time.perf_counter()
    done = subprocess.run([*launch, ROOT / "audit.py", *run, "--output", out, "--overwrite", "--",
                           *[str(o) for o in options]], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"audit.py exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    print(f"audit of {summary['samples']['train']} training and {summary['samples']['val']} validation images "
          f"({'features of a run trained ' + str(args.epochs) + ' epochs' if args.epochs else 'pixels only'}, "
          f"{args.num_processes} process(es)): {wall:.1f} s wall")
    print("| injected | count | recall | precision |")
    print("|---|---|---|---|")
    for kind, (recall, precision) in scored(out, pairs, singles).items():
        count = len(pairs[kind]) if kind in pairs else sum(k == kind for _, k in singles)
        print(f"| {kind} | {count} | {recall:.3f} | {'' if precision is None else f'{precision:.3f}'} |", flush=True)
    if args.scale:
        rows, peak = scale_figure(args.scale, args.dim, args.seed)
        print(f"| index ({args.scale:,} x {args.dim} float32) | build s | 10,000 queries s | all {args.scale:,} "
              f"queried s (extrapolated) |")
        print("|---|---|---|---|")
        for name, built, queried, everything in rows:
            print(f"| {name} | {built:.1f} | {queried:.1f} | {everything:.0f} |")
        print(f"peak memory of this process: {peak:.2f} GB")


if __name__ == "__main__":
    main()
