"""Image train and eval presets (torchvision transforms v2), built from the run's Input (input.py).

Every preset ends in uint8 pixels: the loaders hand uint8 batches to the main process (a quarter of
float32's bytes through worker IPC and host-to-device copies), and normalisation, random erasing and
MixUp/CutMix run on whole batches on the device (utils/data/transforms/batch.py), as timm and FFCV do.
"""

from functools import partial

from torchvision.transforms import v2


def train_preset(inp, targets, size=None):
    """For decoded uint8 (3, H, W) tensors: uint8 resizing kernels are faster than PIL's here.
    Random crops of side `size` (default: the Input's train crop), of the area share and aspect ratio the Input's
    crop_box gives for data of `targets` (utils/data/datasets/label_kinds.py)."""
    mode = v2.InterpolationMode(inp.interpolation)
    scale, ratio = inp.crop_box(targets)
    steps = [v2.RandomResizedCrop(size or inp.train_crop(0), scale=scale, ratio=ratio, interpolation=mode,
                                  antialias=True)]
    if not inp.no_hflip:
        steps.append(v2.RandomHorizontalFlip())
    if inp.auto_augment == "ta_wide":
        steps.append(v2.TrivialAugmentWide(interpolation=mode))
    elif inp.auto_augment:
        steps.append(v2.AutoAugment(v2.AutoAugmentPolicy(inp.auto_augment)))
    if inp.rand_augment is not None:
        steps.append(v2.RandAugment(magnitude=inp.rand_augment))
    return v2.Compose(steps)


def eval_preset(inp):
    """Resize the shorter side to val_resize_size (default: val crop / crop_pct, 224 / 0.875 = 256),
    then centre-crop the val crop size."""
    return v2.Compose([v2.Resize(inp.val_resize_size, interpolation=v2.InterpolationMode(inp.interpolation),
                                 antialias=True),
                       v2.CenterCrop(inp.val_crop_size)])


def image_presets(inp, targets):
    """(train, val) presets of image files, Hub datasets and streams: ByEpoch(train_preset), Fixed(eval_preset)."""
    return ByEpoch(partial(train_preset, inp, targets), inp), Fixed(eval_preset(inp), inp.val_crop_size)


class Fixed:
    """One transform for every epoch, and the side of what it returns (see ImageRows)."""

    def __init__(self, transform, size):
        self.transform, self.size = transform, size

    def __call__(self, epoch):
        return self.transform, self.size


class ByEpoch:
    """The train transform of each epoch with its side, the Input's train_crop(epoch): `build(size)`
    made once per size in each process (a class, not a closure: DataLoader workers started by spawn,
    as on macOS, receive it pickled)."""

    def __init__(self, build, inp):
        self.build, self.inp, self.built = build, inp, {}

    def __call__(self, epoch):
        size = self.inp.train_crop(epoch)
        if size not in self.built:
            self.built[size] = self.build(size)
        return self.built[size], size
