"""Start-up: seconds from the command to the first `data:` line and to the first step's progress line.

    python benchmarks/startup.py                       # python and accelerate launch, 3 runs each, alternated
    python benchmarks/startup.py --runs 5 --modes launch
    python benchmarks/startup.py --ref a8fa022         # the same on a commit (a git worktree), alternated too

The run: the embedded digits written as an image folder (1,437 / 360 PNGs), `--image_size 32
--max_train_steps 3 --log_every 1`, so that the figures are start-up, not training. Each line the
script prints is stamped when it arrives (unbuffered output). Medians and ranges are printed; state the
raw resnet18 loop of the day beside them (benchmarks/overhead.py), the machine's speed varies a lot.
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MODES = {"python": [sys.executable], "launch": [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]}
RUN = ["--image_size", "32", "--max_train_steps", "3", "--log_every", "1"]


def write_digits_folder(root):
    """<root>/{train,val}/<label>/<i>.png from the embedded digits, as the script's own split has them."""
    sys.path.insert(0, str(HERE))
    from utils.data.sources.digits import load_digits_dataset

    for split, name in (("train", "train"), ("validation", "val")):
        for i, row in enumerate(load_digits_dataset()[split]):
            folder = root / name / str(row["label"])
            folder.mkdir(parents=True, exist_ok=True)
            row["image"].save(folder / f"{i}.png")


@contextlib.contextmanager
def checkouts(tmp, ref=None):
    """{name: root} of this checkout and, with `ref`, that commit's (a git worktree in `tmp`, removed afterwards), the
    commit first: the scripts each benchmark alternates."""
    if ref is None:
        yield {"this checkout": HERE}
        return
    subprocess.run(["git", "worktree", "add", "--detach", str(tmp / "ref"), ref], cwd=HERE, check=True,
                   capture_output=True)
    try:
        yield {ref: tmp / "ref", "this checkout": HERE}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "ref")], cwd=HERE, check=False)


def first_times(stamped):
    """(seconds to the first `data:` line, seconds to the first `step 1` progress line) of (seconds, line)
    pairs; None where the line never came."""
    data = next((t for t, line in stamped if line.startswith("data:")), None)
    step = next((t for t, line in stamped if " step 1 loss " in f" {line}"), None)
    return data, step


def timed_run(root, mode, folder, out):
    cmd = [*MODES[mode], str(root / "train_classification.py"), "--train_dir", str(folder / "train"),
           "--val_dir", str(folder / "val"), *RUN, "--output_dir", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    start, stamped = time.perf_counter(), []
    with subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        for line in p.stdout:
            stamped.append((time.perf_counter() - start, line.strip()))
    if p.returncode != 0:
        sys.exit(f"{mode} run: exit {p.returncode}\n" + "\n".join(line for _, line in stamped[-20:]))
    return first_times(stamped)


def summary(values):
    return f"{statistics.median(values):6.2f} s [{min(values):.2f}-{max(values):.2f}]"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    p.add_argument("--ref", default=None, help="also time this commit's script (a git worktree), alternated")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_digits_folder(tmp / "digits")
        with checkouts(tmp, args.ref) as roots:
            times = {(name, mode): [] for name in roots for mode in args.modes}
            for run in range(args.runs):
                for side, (name, root) in enumerate(roots.items()):
                    for mode in args.modes:
                        out = tmp / f"out_{side}_{mode}_{run}"
                        times[name, mode].append(timed_run(root, mode, tmp / "digits", out))
    for (name, mode), runs in times.items():
        print(f"{name:>14} {mode:>6}: first data line {summary([d for d, _ in runs])}, "
              f"first step {summary([s for _, s in runs])}")


if __name__ == "__main__":
    main()
