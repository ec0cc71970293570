"""Clips/s of the project's video input pipeline against the naive way, and the data-wait share of training.

    python benchmarks/video_throughput.py                      # 64 generated 10-s 320x240 H.264 videos
    python benchmarks/video_throughput.py --videos 8 --seconds 2 --batches 4 --train_steps 0   # quick look

Both pipelines read the same files with the same training clip sampling (16 frames, every 2nd),
transforms (short side 128..160, random 112 crop, flip, Kinetics normalisation), batch size and
workers. Ours opens each file in the worker, seeks to the keyframe before the clip and decodes up to
its last frame; the naive one decodes every frame of the video and then picks the clip's. The videos
have a keyframe every 2 s (x264 `g=50` at 25 fps), as real footage does; a file with a single keyframe
cannot be seeked into, and then only the decoding past the clip's end is saved.

Then, unless --train_steps 0, it trains train_classification.py (default model and workers) on the
same videos for --train_steps steps and reports the share of step time spent waiting for data.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from utils.config.options import parse_args  # noqa: E402
from utils.core.preemption import worker_init_fn  # noqa: E402
from utils.core.threads import cores_per_process  # noqa: E402
from utils.config.settings import datasets_for  # noqa: E402
from utils.data.datasets.clips import PathFrames  # noqa: E402
from utils.data.decoding.video import write_video  # noqa: E402


def generate_videos(root, count, seconds, fps=25, size=(320, 240), seed=0):
    """root/{train,val}/class_<c>/<n>.mp4: moving shapes over a gradient, with noise (what a codec must work on)."""
    rng = np.random.default_rng(seed)
    w, h = size
    frames = seconds * fps
    ys, xs = np.mgrid[:h, :w]
    paths = []
    for i in range(count):
        folder = Path(root) / "train" / f"class_{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        base = (np.linspace(0, 200, w)[None, :, None] * rng.random(3)).astype(np.float32)
        cx, cy, vx, vy = rng.random(4) * [w, h, 6, 6] - [0, 0, 3, 3]
        data = np.empty((frames, h, w, 3), np.uint8)
        noise = rng.normal(0, 6, (7, h, w, 3)).astype(np.float32)  # a few fields, cycled: generation stays quick
        for t in range(frames):
            disc = ((xs - (cx + vx * t) % w) ** 2 + (ys - (cy + vy * t) % h) ** 2) < 900
            frame = np.broadcast_to(base, (h, w, 3)).copy()
            frame[disc] = (250, 120, 40)
            data[t] = np.clip(frame + noise[t % 7], 0, 255)
        path = folder / f"{i:03d}.mp4"
        write_video(path, data, fps=fps, options={"g": str(2 * fps), "preset": "veryfast"})
        paths.append(path)
    (Path(root) / "val").symlink_to(Path(root) / "train", target_is_directory=True)
    return paths


class NaiveFrames(PathFrames):
    """Decode every frame of the video, then pick the clip's (what seeking saves)."""

    def read(self, video, choose):
        import av

        with av.open(self.paths[video]) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        picked = np.stack([frames[i] for i in choose(len(frames))])
        return torch.from_numpy(picked).permute(0, 3, 1, 2).contiguous()


def clips_per_second(dataset, batch_size, workers, batches):
    """Clips/s over `batches` batches of clips drawn at random (with replacement), timed from the
    loader's start: the workers' start-up is in it, but so is all their work (timing from the first
    batch on would leave out what they prefetched meanwhile, a lot with many workers)."""
    sampler = RandomSampler(dataset, replacement=True, num_samples=batches * batch_size,
                            generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                        worker_init_fn=worker_init_fn())
    start, n = time.perf_counter(), 0
    for batch in loader:
        n += len(batch["labels"])
    return n / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--videos", type=int, default=64)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--batches", type=int, default=30,
                   help="batches per pipeline and repeat, timed from the loader's start")
    p.add_argument("--workers", type=int, default=None, help="default: the training script's default for this machine")
    p.add_argument("--repeats", type=int, default=3, help="alternate the two pipelines this many times; medians")
    p.add_argument("--train_steps", type=int, default=10, help="steps of the training run (0: skip it)")
    args = p.parse_args(argv)
    workers = args.workers if args.workers is not None else min(8, cores_per_process() // 2)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        generate_videos(tmp, args.videos, args.seconds)
        print(f"generated {args.videos} videos of {args.seconds} s, 320x240, 25 fps, H.264 in "
              f"{time.perf_counter() - t0:.1f} s")
        options = parse_args(["--train_dir", f"{tmp}/train", "--val_dir", f"{tmp}/val"])
        ours, _, _, _ = datasets_for(options)
        naive, _, _, _ = datasets_for(options)
        naive.dataset.frames = NaiveFrames(naive.dataset.frames.paths)
        rates = {"seek": [], "naive": []}
        for _ in range(args.repeats):
            rates["seek"].append(clips_per_second(ours, args.batch_size, workers, args.batches))
            rates["naive"].append(clips_per_second(naive, args.batch_size, workers, args.batches))
        seek, whole = statistics.median(rates["seek"]), statistics.median(rates["naive"])
        print(f"input pipeline, {workers} workers, batch {args.batch_size}, clips of {options.clip_len} frames every "
              f"{options.frame_interval}, 112 px: seek {seek:.1f} clips/s, decode-everything {whole:.1f} clips/s, "
              f"ratio {seek / whole:.2f}")
        if args.train_steps:
            out = Path(tmp) / "run"
            cmd = [sys.executable, str(ROOT / "train_classification.py"), "--train_dir", f"{tmp}/train", "--val_dir",
                   f"{tmp}/val", "--max_train_steps", str(args.train_steps), "--log_every", "1", "--batch_size",
                   str(args.batch_size), "--output_dir", str(out), "--max_val_samples", "8"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"training failed:\n{proc.stderr[-2000:]}")
            rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            # Each row covers one step; the first waits for the workers to start, as every run's does once.
            steps = [r for r in rows if "data_time_frac" in r and r["step"] > 1]
            share = statistics.mean(r["data_time_frac"] for r in steps)
            later = statistics.mean(r["data_time_frac"] for r in steps[len(steps) // 2:])
            rate = statistics.median(r["img_per_s"] for r in steps)
            print(f"training {options.model} ({args.train_steps} steps, batch {args.batch_size}, default workers): "
                  f"{rate:.1f} clips/s, data wait {100 * share:.1f}% of step time (steps 2..{args.train_steps}), "
                  f"{100 * later:.1f}% in the second half")


if __name__ == "__main__":
    main()
