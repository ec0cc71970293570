"""The embedded digits (the default data): scikit-learn's 8x8 scans, 32x32 RGB, no download."""

import numpy as np

from utils.data.datasets.images import with_transform
from torchvision.transforms import v2

from utils.data.sources.folds import remake
from utils.data.sources.protocol import (NO_COLUMNS, STREAM_ONLY, SYNTHETIC_ONLY, VIDEO_ONLY, DataSource, no_files,
                                          rgb_only)
from utils.data.sources.splits import SPLIT_SEED, long_tailed, subset
from utils.data.transforms.images import ByEpoch, Fixed
from utils.data.transforms.input import progressive_notes

# Pixel statistics of the embedded digits (32x32, 0..1 scale), measured over all 1,797 images.
DIGITS_MEAN, DIGITS_STD = (0.306,) * 3, (0.324,) * 3
OWN_RECIPE = "the embedded digits keep their own recipe (resized to the crop side, a small random affine, no flip)"


def digits_train(size):
    # Digits must not be flipped; a small random affine (on the PIL image, ~2x faster than on tensors)
    # is what lifts val top-1 from ~0.989 to ~0.995 in the default 18 epochs.
    return v2.Compose([
        v2.Resize(size),
        v2.RandomAffine(degrees=10, translate=(0.08, 0.08), scale=(0.9, 1.1)),
        v2.PILToTensor(),
    ])


def digits_eval(size):
    return v2.Compose([v2.Resize(size), v2.PILToTensor()])


def load_digits_dataset():
    """scikit-learn's 1,797 handwritten 8x8 digit scans as a `datasets.DatasetDict`.

    Upscaled to 32x32 RGB PIL images in an `image` column, `label` a ClassLabel; split 80/20
    stratified with a fixed seed: 1,437 train / 360 validation.
    """
    import datasets
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255 / 16)).round().astype(np.uint8)  # the scans are 0..16 ink levels
    images = [Image.fromarray(p, "L").resize((32, 32), Image.BILINEAR).convert("RGB") for p in pixels]
    features = datasets.Features(image=datasets.Image(),
                                 label=datasets.ClassLabel(names=[str(d) for d in range(10)]))
    full = datasets.Dataset.from_dict({"image": images, "label": digits.target.tolist()}, features=features)
    split = full.train_test_split(test_size=0.2, stratify_by_column="label", seed=SPLIT_SEED)
    return datasets.DatasetDict(train=split["train"], validation=split["test"])


class Digits(DataSource):
    """--dataset digits: decoded PIL images (nothing to decode in workers), its own size and statistics."""

    kind, own_input, eval_crop, size, stats = "digits", True, False, 32, (DIGITS_MEAN, DIGITS_STD)
    unused = {**VIDEO_ONLY, **SYNTHETIC_ONLY, **STREAM_ONLY, **no_files("digits"), **rgb_only("digits"), **NO_COLUMNS,
              **dict.fromkeys(("crop_pct", "val_resize_size", "interpolation", "auto_augment", "rand_augment",
                               "train_crop_scale", "train_crop_ratio"),
                              OWN_RECIPE)}

    def datasets(self, data, inp, rank=0, world=1):
        splits = load_digits_dataset()
        train, note = long_tailed(splits["train"], data.imbalance)
        train = subset(train, data.max_train_samples)
        val = subset(splits["validation"], data.max_val_samples)
        train, val, self.remade, remade = remake(train, val, data)
        size = inp.val_crop_size
        return (with_transform(train, ByEpoch(digits_train, inp), decoded=True, seed=data.seed),
                with_transform(val, Fixed(digits_eval(size), size), decoded=True),
                train.features["label"].names, [note] * bool(note) + remade + progressive_notes(inp, data.epochs))

    def file_transform(self, inp):
        """Its eval resize, on PIL images as its validation's: lossless files of its images give the same pixels."""
        return v2.Compose([v2.ToPILImage(), digits_eval(inp.val_crop_size)])
