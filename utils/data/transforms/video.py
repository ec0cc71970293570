"""Video presets: for (T, C, H, W) uint8 tv_tensors.Video frames, one random draw for all frames of a
clip, from the run's Input (utils/data/transforms/input.py)."""

import torch
from torchvision.transforms import v2


def video_train(inp):
    """Short side resized to a random 8/7..10/7 of the crop (PySlowFast's 256..320 for 224), random
    crop, horizontal flip unless --no_hflip."""
    size, mode = inp.image_size, v2.InterpolationMode(inp.interpolation)
    steps = [v2.RandomResize(round(size * 8 / 7), round(size * 10 / 7) + 1, interpolation=mode, antialias=True),
             v2.RandomCrop(size)]
    if not inp.no_hflip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose(steps)


def _video_resize(inp):
    """The short side to val_resize_size (image_size / crop_pct; the frame side itself where the source takes no
    crop, as moving digits: a resize to the frames' own size returns them as they are)."""
    return [v2.Resize(inp.val_resize_size, interpolation=v2.InterpolationMode(inp.interpolation), antialias=True)]


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
