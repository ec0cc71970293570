"""Images transformed with the randomness of one sample; ImageRows, the dataset every image source trains on."""

import contextlib
import copy

import torch
from torch.utils.data import Dataset

from utils.core.seeding import EpochSeeded, sample_rng
from utils.data.datasets.label_kinds import ClassIndex
from utils.data.decoding.images import decode_rgb
from utils.data.decoding.on_device import Deferred, blank


def load_item(image, label, key, epoch, transform, size, seed, decode, classes=None, blank=None, look=None):
    """One training or validation item: the image decoded and transformed with the randomness of
    (seed, epoch, key) when seeded; one that fails (or a label outside [0, classes)) becomes a zero
    image (`blank(size)` when given) with valid=False and its path in `source`. With `look` (the audit's:
    utils/audit/look.py), the item's "look" is what it makes of the decoded image, before the transform."""
    seen = None
    try:
        if classes is not None and not 0 <= label < classes:
            raise ValueError(f"label {label} is not one of the {classes} classes (0..{classes - 1})")
        rng = sample_rng(seed, epoch, key) if seed is not None else contextlib.nullcontext()
        with rng:
            decoded = decode(image)
            seen = look(decoded) if look is not None else None
            pixels = transform(decoded)
        source, error = "", ""
    # PIL raises all of the first four; TypeError/KeyError: a row without an image or label (None)
    except (OSError, ValueError, RuntimeError, SyntaxError, TypeError, KeyError) as e:
        pixels, label = torch.zeros(3, size, size, dtype=torch.uint8) if blank is None else blank(size), 0
        path = image.get("path") if isinstance(image, dict) else None
        source, error = path or "<embedded image bytes>", f"{type(e).__name__}: {e}"
    item = {"pixel_values": pixels, "labels": label, "valid": not source, "source": source, "error": error}
    if look is not None:
        item["look"] = seen if not source else look.empty()
    return item


class ImageRows(Dataset):
    """A `datasets.Dataset` of images read a batch of rows at a time, `transform` applied per image.

    `preset(epoch)` gives the epoch's transform and the side of its output (presets.Fixed, or
    presets.ByEpoch for progressive resizing). With a seed, each image's randomness comes from
    (seed, epoch, key) alone: see EpochSeeded. A key
    k >= len(self) is copy k // len of row k % len (repeated augmentation), with its own draws. A
    file that cannot be decoded becomes a zero image with valid=False and its path in `source`, so
    every batch keeps its shape (ranks must agree on sizes) and the loop decides what to do.
    A label becomes its `targets`' target (utils/data/datasets/label_kinds.py): the class index, or for a
    List(ClassLabel) column the multi-hot row of its list, all zeros for a file that could not be decoded.
    """

    def __init__(self, ds, preset, decoded, seed=None, on_device=False, targets=ClassIndex(), decode=None):
        import datasets

        # Undecoded: our decoder reads the bytes (decode_rgb). The label column is kept as it is. An Array2D/Array3D
        # column of pixels is read as numpy arrays (BandDecoder takes them as they are).
        if isinstance(ds.features["image"], (datasets.Array2D, datasets.Array3D)):
            self.rows = ds.with_format("numpy", columns=["image"], output_all_columns=True,  # (its own type, not
                                       dtype=ds.features["image"].dtype)  # the int64 datasets would give integers)
        else:
            self.rows = ds if decoded else ds.cast_column("image", datasets.Image(decode=False))
        self.preset, self.decoded, self.seed = preset, decoded, seed
        self.on_device = on_device  # --decode_on_device: bytes and draws, not pixels (utils/data/decoding/on_device.py)
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # set through EpochSeeded
        self.targets = targets  # a class index a sample, or a multi-hot row
        self.decode = decode  # a BandDecoder (utils/data/decoding/bands.py) for files of their own channels and bits
        self.look = None  # the audit's record of each decoded image (utils/audit/look.py)

    def __len__(self):
        return len(self.rows)

    def evaluated_like(self, val, look=None):
        """These rows through the ImageRows `val`'s transform, without random draws; each item with what `look` makes
        of its decoded image (the audit's), when given."""
        rows = copy.copy(self)
        rows.preset, rows.seed, rows.look = val.preset, None, look
        return rows

    @property
    def labels(self):
        return self.rows["label"][:]  # [:] reads the column whole (not row by row)

    def __getitem__(self, key):
        return self.__getitems__([key])[0]

    def __getitems__(self, keys):
        rows = self.rows[[key % len(self.rows) for key in keys]]  # one batched read
        epoch = int(self.epoch)
        transform, size = self.preset(epoch)
        if self.on_device:  # once a batch: which steps the preset has, read from it
            transform = deferred(transform, size)
        return [self._item(image, label, key, epoch, transform, size)
                for image, label, key in zip(rows["image"], rows["label"], keys)]

    def _item(self, image, label, key, epoch, transform, size):
        if self.on_device:
            item = load_on_device(image, label, key, epoch, transform, size, self.seed)
        else:
            decode = self.decode or ((lambda image: image.convert("RGB")) if self.decoded else decode_rgb)
            item = load_item(image, label, key, epoch, transform, size, self.seed, decode,
                             blank=getattr(self.decode, "blank", None), look=self.look)
        item["labels"] = self.targets.target(label if item["valid"] else self.targets.empty)
        return item


def deferred(transform, size):
    """--decode_on_device: the preset `transform` as its draws in the worker, its pixels on the device."""
    return Deferred(transform, size)


def load_on_device(image, label, key, epoch, transform, size, seed, classes=None):
    """load_item for --decode_on_device, `transform` a `deferred` preset: the file's bytes and the preset's draws,
    for the device to finish."""
    return load_item(image, label, key, epoch, transform, size, seed, lambda image: image, classes, blank=blank)


def with_transform(ds, preset, decoded, seed=None, on_device=False, targets=ClassIndex(), decode=None):
    """ImageRows over `ds`, its epoch set through EpochSeeded."""
    rows = ImageRows(ds, preset, decoded, seed, on_device, targets, decode)
    return EpochSeeded(rows, rows.epoch)


def evaluated(train, val):
    """The training split `train` (with_transform's) as validation sees it: `val`'s transform, no random draws (the
    features --probe caches)."""
    rows = train.dataset.evaluated_like(val.dataset)
    return EpochSeeded(rows, rows.epoch)
