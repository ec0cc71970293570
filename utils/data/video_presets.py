"""Video presets: for (T, C, H, W) uint8 tv_tensors.Video frames, one random draw for all frames of a
clip, from the run's Input (utils/data/presets.py)."""

import torch
from torchvision.transforms import v2

from utils.data.moving_digits import CANVAS as MOVING_DIGITS_CANVAS


def video_train(inp):
    """Short side resized to a random 8/7..10/7 of the crop (PySlowFast's 256..320 for 224), random
    crop, horizontal flip unless --no_hflip. Moving digits: as generated (a flip, or a crop that moves
    the canvas, would change or hide the direction that is the label)."""
    size = inp.image_size
    if inp.kind == "moving_digits":
        return video_eval(inp)
    steps = [v2.RandomResize(round(size * 8 / 7), round(size * 10 / 7) + 1, antialias=True), v2.RandomCrop(size)]
    if not inp.no_hflip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose(steps)


def _video_resize(inp):
    size = inp.image_size
    if inp.kind == "moving_digits":
        return [v2.Identity()] if size == MOVING_DIGITS_CANVAS else [v2.Resize(size, antialias=True)]
    return [v2.Resize(int(size / inp.crop_pct), antialias=True)]


def video_eval(inp):
    """Short side to image_size / crop_pct, centre crop: the val view, and the 1-crop test view."""
    return v2.Compose(_video_resize(inp) + [v2.CenterCrop(inp.image_size)])


def video_test(inp, crops):
    """The eval resize, then `crops` squares spread evenly along the longer side (3: left, centre,
    right, as GluonCV's and PySlowFast's tests take them; 1: the centre crop of video_eval):
    (crops, T, C, H, W)."""
    resize = v2.Compose(_video_resize(inp))
    size = inp.image_size

    def views(frames):
        frames = resize(frames)
        height, width = frames.shape[-2:]
        top, left, longer = (height - size) // 2, (width - size) // 2, max(height, width)
        out = []
        for c in range(crops):
            along = round(c * (longer - size) / (crops - 1)) if crops > 1 else (longer - size) // 2
            y, x = (along, left) if height > width else (top, along)
            out.append(v2.functional.crop(frames, y, x, size, size))
        return torch.stack(out)

    return views
