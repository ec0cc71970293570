"""What happens to a batch on the device before the model sees it.

The loaders hand over uint8 pixels (utils/data/transforms/images.py, video.py), or the float32 raw values of files
with their own channels and bits (utils/data/decoding/bands.py). Here they become the model's float input,
normalised per channel, in the memory format asked for (--channels_last); in training, random erasing
(per image, after normalisation, as torchvision's references erase) and MixUp/CutMix (per batch, soft
targets) follow. Both are torchvision's own transforms. Their random draws are made on the host from
a generator seeded by (seed, epoch, batch, rank): ranks draw differently, and a resumed run draws
exactly what the uninterrupted one did, whatever the workers or the device.
"""

from dataclasses import dataclass

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from utils.core.seeding import batch_rng


@dataclass(frozen=True)
class BatchOptions:
    """What the options ask of a training batch on the device, read from them once (utils/config/settings.py); each
    field is its option's value."""

    mixup_alpha: float
    cutmix_alpha: float
    mix_prob: float
    random_erase: float
    seed: int  # the run's: with the epoch, batch and rank, what every draw here is seeded by


def mixing(options, num_classes):
    """torchvision's MixUp and/or CutMix, one of the two chosen at random for each batch when both
    alphas are set (as its references do), applied to a batch with probability --mix_prob; or None."""
    mixes = []
    if options.mixup_alpha:
        mixes.append(v2.MixUp(alpha=options.mixup_alpha, num_classes=num_classes))
    if options.cutmix_alpha:
        mixes.append(v2.CutMix(alpha=options.cutmix_alpha, num_classes=num_classes))
    if not mixes:
        return None
    mix = mixes[0] if len(mixes) == 1 else v2.RandomChoice(mixes)
    return mix if options.mix_prob == 1 else v2.RandomApply([mix], p=options.mix_prob)


class BatchInput:
    """Turns a loader's batch into model input on the device; see the module's docstring."""

    def __init__(self, stats, channels_last=False, erase=None, mix=None, seed=0, rank=0, pixel_max=None):
        """`stats`: the Input's ((mean), (std)); None: synthetic input, float already and not normalised. Without
        the rest: normalisation alone, as validation and a trained run's user (predict.py) feed the model.
        `pixel_max`: the Input's, what float pixels of files with their own bits (raw values) are divided by."""
        self.mean, self.std = (None, None) if stats is None else (torch.tensor(v) for v in stats)
        self.channels_last, self.erase, self.mix, self.seed, self.rank = channels_last, erase, mix, seed, rank
        self.pixel_max = pixel_max

    @classmethod
    def for_training(cls, options, num_classes, rank, stats, pixel_max=None, channels_last=False):
        """The training run's (BatchOptions `options`): --random_erase and MixUp/CutMix, drawn per (seed, epoch, batch,
        rank); with `channels_last` (ModelOptions': the model's memory format), its input in that format too."""
        erase = v2.RandomErasing(p=options.random_erase) if options.random_erase else None
        return cls(stats, channels_last, erase, mixing(options, num_classes), options.seed, rank, pixel_max)

    def __call__(self, pixels):
        """uint8 (N, C, H, W) or (N, C, T, H, W) -> normalised float32 (eval, and the first step of training); so
        are the float32 raw values of files with their own bits, divided by pixel_max first."""
        if pixels.dtype == torch.uint8:
            # The same elementwise float32 operations as v2.ToDtype(scale=True) + v2.Normalize on each
            # image in a worker: the same values, bit for bit.
            pixels = self._normalised(v2.functional.to_dtype(pixels, torch.float32, scale=True))
        elif self.pixel_max is not None:
            pixels = self._normalised(pixels / self.pixel_max)  # a new tensor: the loader's batch stays as it was
        return self._formatted(pixels)

    def _normalised(self, x):
        if self.mean.device != x.device:  # moved once, not copied to the device at every step
            self.mean, self.std = self.mean.to(x.device), self.std.to(x.device)
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return x.sub_(self.mean.view(shape)).div_(self.std.view(shape))

    def _formatted(self, pixels):
        if not self.channels_last:
            return pixels
        return pixels.contiguous(memory_format=torch.channels_last if pixels.dim() == 4 else torch.channels_last_3d)

    @property
    def augments(self):
        return self.erase is not None or self.mix is not None

    def augment(self, pixels, labels, epoch, batch):
        """(pixels, targets) after erasing and mixing: targets are class indices, or (N, classes)
        probabilities when the batch was mixed (the loss takes both, label smoothing included)."""
        if not self.augments:
            return pixels, labels
        with batch_rng(self.seed, epoch, batch, self.rank):
            if self.erase is not None:
                pixels = torch.stack([self.erase(image) for image in pixels])
            if self.mix is not None:
                video = pixels.dim() == 5  # torchvision tells clips from images by type
                pixels, labels = self.mix(tv_tensors.Video(pixels) if video else pixels, labels)
                pixels = pixels.as_subclass(torch.Tensor)
        return self._formatted(pixels), labels


def check_options(options, need):
    """MixUp/CutMix and random erasing (BatchOptions `options`)."""
    for key, value in (("mixup_alpha", options.mixup_alpha), ("cutmix_alpha", options.cutmix_alpha)):
        need(value >= 0, key, "must be >= 0")
    need(0 <= options.mix_prob <= 1, "mix_prob", "must be in [0, 1]")
    need(0 <= options.random_erase <= 1, "random_erase", "must be in [0, 1]")
