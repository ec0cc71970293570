"""Moving digits: the embedded video set, clips whose label is the direction in which a digit moves.

Made on the fly, deterministically, from scikit-learn's 1,797 handwritten 8x8 digit scans (no file,
no network). Each clip shows one scan, drawn at random, moving in a straight line at one pixel per
frame across a black canvas; its label is one of 8 directions. The path is centred at a random point
and its offsets are symmetric in time (frame t sits at centre + v * (t - (T - 1) / 2)), so where the
digit is in any one frame says nothing about where it is heading: only the order of the frames
does. A model that scores frames one by one (TSN) can at best see the axis of motion, not its sense.

Train clips use the scans of the digits' train split, val clips those of its val split (another 20 %).
"""

import numpy as np

from utils.data.datasets.clips import ArrayFrames
from utils.data.sources.protocol import (EMBEDDED_SUBSETS, IMAGE_CROPS, POLICIES, STREAM_ONLY, SYNTHETIC_ONLY,
                                        DataSource, no_files, no_imbalance, no_remaking, rgb_only)
from utils.data.sources.video_files import _clip_datasets
from utils.data.transforms.video import video_eval

FRAMES, CANVAS, DIGIT = 8, 24, 8  # frames per clip, canvas side, digit side (the scans' own 8x8)
TRAIN_CLIPS, VAL_CLIPS = 1500, 501  # val odd: 1 vs 2 processes must still count every clip once
SEED = 0
# (dx, dy) per class, image coordinates (y grows downwards), counter-clockwise from "right".
DIRECTIONS = {"right": (1, 0), "up_right": (1, -1), "up": (0, -1), "up_left": (-1, -1),
              "left": (-1, 0), "down_left": (-1, 1), "down": (0, 1), "down_right": (1, 1)}
CLASS_NAMES = list(DIRECTIONS)


def _scans():
    """The 1,797 scans as uint8 (0..255), split 80/20 with a fixed seed: (train scans, val scans)."""
    from sklearn.datasets import load_digits

    scans = (load_digits().images * (255 / 16)).round().astype(np.uint8)
    order = np.random.default_rng(SEED).permutation(len(scans))
    cut = round(len(scans) * 0.8)
    return scans[order[:cut]], scans[order[cut:]]


def make_clips(scans, count, seed, frames=FRAMES, canvas=CANVAS):
    """(clips uint8 [count, frames, canvas, canvas], labels int64 [count]), a pure function of the arguments."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(DIRECTIONS), size=count)
    picks = rng.integers(len(scans), size=count)
    steps = np.arange(frames) - (frames - 1) / 2  # offsets in time, symmetric about the middle frame
    # The path spans (frames - 1) pixels per moving axis; its centre is drawn so the digit stays inside.
    reach = (frames - 1) / 2
    low, high = reach, canvas - DIGIT - reach  # range of the digit's top-left corner at the path's centre
    clips = np.zeros((count, frames, canvas, canvas), dtype=np.uint8)
    for i, (label, pick) in enumerate(zip(labels, picks)):
        dx, dy = DIRECTIONS[CLASS_NAMES[label]]
        # Centres on the half-pixel grid when frames is even, so every frame lands on whole pixels.
        cx, cy = (rng.integers(int(np.ceil(low - reach)), int(np.floor(high - reach)) + 1, size=2) + reach)
        for t, step in enumerate(steps):
            x, y = int(round(cx + dx * step)), int(round(cy + dy * step))
            clips[i, t, y:y + DIGIT, x:x + DIGIT] = scans[pick]
    return clips, labels.astype(np.int64)


def load():
    """{'train': (clips, labels), 'validation': (clips, labels)}: 2,000 and 501 clips of 8 frames, 24x24."""
    train_scans, val_scans = _scans()
    return {"train": make_clips(train_scans, TRAIN_CLIPS, seed=SEED + 1),
            "validation": make_clips(val_scans, VAL_CLIPS, seed=SEED + 2)}


# Moving digits' (0..1 scale), measured over its 2,000 train clips: mostly black canvas.
MOVING_DIGITS_MEAN, MOVING_DIGITS_STD = (0.034,) * 3, (0.158,) * 3


class MovingDigits(DataSource):
    """--dataset moving_digits: embedded clips of a digit moving across a canvas, generated once (seeded),
    its own size (the canvas) and statistics."""

    kind, video, own_input, eval_crop, size = "moving_digits", True, True, False, CANVAS
    unused = {**SYNTHETIC_ONLY, **STREAM_ONLY, **IMAGE_CROPS, **POLICIES, **EMBEDDED_SUBSETS,
              **no_files("moving_digits"),
              **rgb_only("moving_digits"),
              **no_imbalance("moving_digits"), **no_remaking("moving_digits"),
              "crop_pct": "the moving digits are resized to --image_size, never cropped (a crop could hide the "
                          "motion that is the label)"}
    stats = (MOVING_DIGITS_MEAN, MOVING_DIGITS_STD)

    def datasets(self, data, inp, rank=0, world=1):
        splits = load()
        (train_clips, train_labels), (val_clips, val_labels) = splits["train"], splits["validation"]
        notes = [f"moving digits: {len(train_labels)} train / {len(val_labels)} val clips of {FRAMES} "
                 f"frames, {CANVAS}x{CANVAS}, labelled by direction of motion"]
        # Trained on the clips as generated: a flip, or a crop that moves the canvas, would change or hide the
        # direction that is the label.
        return (*_clip_datasets(data, inp, (ArrayFrames(train_clips), train_labels, None),
                                (ArrayFrames(val_clips), val_labels, None), train_preset=video_eval(inp)),
                CLASS_NAMES, notes)
