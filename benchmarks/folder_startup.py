"""Start-up cost of a large image folder: how long the script takes to list it and build its datasets,
and the memory that holds, before the first step.

    python benchmarks/folder_startup.py                          # 100,000 files in 1,000 class folders
    python benchmarks/folder_startup.py --train_files 1281000 --val_files 50000    # ImageNet's counts
    python benchmarks/folder_startup.py --root /data/imagenet     # an existing <root>/train, <root>/val

A generated folder holds the same 16x16 JPEG under every name (ImageNet's layout: n00000000/ ... with
`<class>_<i>.JPEG`), in a temporary folder that is removed afterwards unless --keep. Each measurement
runs in a fresh Python process: the script's own data path (utils/config/settings.datasets_for with
--train_dir/--val_dir, then the training data's signature) is timed, after the same path has run once
on a 6-file folder (imports loaded); the process's peak memory after that small build is the baseline,
and the peak after the large one, minus it, is what the listing and its tables hold at their peak.
Each run is a new process; from the second on, the file system's metadata is in the page cache.
"""

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import resource, sys, time
sys.path.insert(0, {root!r})
from utils.config.options import parse_args
from utils.config.settings import datasets_for, typed_options
from utils.data.sources.catalog import source_for

def build(root):
    args = parse_args(["--train_dir", root + "/train", "--val_dir", root + "/val", "--image_size", "16"], prog="p")
    start = time.perf_counter()
    train, val, names, _ = datasets_for(args)
    source_for(typed_options(args)["data"]).signature(train, len(names))
    return len(train), len(val), len(names), time.perf_counter() - start

build({tiny!r})  # every module the data path imports, loaded: the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(*build({big!r}), base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def generate(root, train_files, val_files, classes):
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 150)).save(buffer, "JPEG")
    data = buffer.getvalue()
    for split, total in (("train", train_files), ("val", val_files)):
        for c in range(classes):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(total // classes + (c < total % classes)):
                (folder / f"{c}_{i}.JPEG").write_bytes(data)


def probe(root, tiny):
    code = PROBE.format(root=str(ROOT), tiny=str(tiny), big=str(root))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [float(v) for v in out.split()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_files", type=int, default=100_000)
    parser.add_argument("--val_files", type=int, default=2_000)
    parser.add_argument("--classes", type=int, default=1_000)
    parser.add_argument("--root", type=Path, help="an existing folder with train/ and val/ (nothing generated)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folder")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)

    root = args.root or Path(tempfile.mkdtemp(prefix="folder_startup-"))
    tiny = Path(tempfile.mkdtemp(prefix="folder_startup-tiny-"))
    try:
        generate(tiny, 4, 2, 2)
        if args.root is None:
            generate(root, args.train_files, args.val_files, args.classes)
        for run in range(1, args.runs + 1):
            train, val, classes, seconds, base, peak = probe(root, tiny)
            print(f"run {run}: {int(train)} train + {int(val)} val files, {int(classes)} classes: datasets built in "
                  f"{seconds:.2f} s; peak {peak:.0f} MiB vs {base:.0f} MiB with a 6-file folder "
                  f"(+{peak - base:.0f} MiB)")
    finally:
        shutil.rmtree(tiny, ignore_errors=True)
        if args.root is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        elif args.root is None:
            print(f"kept: {root}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
