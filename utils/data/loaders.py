"""Datasets with their transforms, fast image decoding, and dataloaders sharded by Accelerate."""

import hashlib
from functools import partial

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from utils.core.preemption import worker_init_fn
from utils.core.seeding import EpochSeeded, spread
from utils.data import presets
from utils.data.images import decode_rgb, load_item
from utils.data.sampling import RepeatedAugmentationSampler
from utils.data.sources import SPLIT_SEED, DataError, load_splits, subset
from utils.data.stream_loader import StreamLoader
from utils.data.streaming import StreamRows, build_stream
from utils.data.video import VideoClips
from utils.data.video_sources import build_video_datasets


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


class ImageRows(Dataset):
    """A `datasets.Dataset` of images read a batch of rows at a time, `transform` applied per image.

    `preset(epoch)` gives the epoch's transform and the side of its output (presets.Fixed, or
    presets.Progressive for progressive resizing). With a seed, each image's randomness comes from
    (seed, epoch, key) alone: see EpochSeeded. A key
    k >= len(self) is copy k // len of row k % len (repeated augmentation), with its own draws. A
    file that cannot be decoded becomes a zero image with valid=False and its path in `source`, so
    every batch keeps its shape (ranks must agree on sizes) and the loop decides what to do.
    """

    def __init__(self, ds, preset, decoded, seed=None):
        import datasets

        # Undecoded: our decoder reads the bytes (decode_rgb). The label column is kept as it is.
        self.rows = ds if decoded else ds.cast_column("image", datasets.Image(decode=False))
        self.preset, self.decoded, self.seed = preset, decoded, seed
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # set through EpochSeeded

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, key):
        return self.__getitems__([key])[0]

    def __getitems__(self, keys):
        rows = self.rows[[key % len(self.rows) for key in keys]]  # one batched read
        epoch = int(self.epoch)
        transform, size = self.preset(epoch)
        return [self._item(image, label, key, epoch, transform, size)
                for image, label, key in zip(rows["image"], rows["label"], keys)]

    def _item(self, image, label, key, epoch, transform, size):
        decode = (lambda image: image.convert("RGB")) if self.decoded else decode_rgb
        return load_item(image, label, key, epoch, transform, size, self.seed, decode)


def _with_transform(ds, preset, decoded, seed=None):
    rows = ImageRows(ds, preset, decoded, seed)
    return EpochSeeded(rows, rows.epoch)


class SyntheticDataset(Dataset):
    """Random images and labels, a pure function of (seed, index): no I/O, for benchmarks and tests.

    Each class adds its own fixed pattern to the noise, so a model can learn something (a loss
    that falls is a useful smoke test) while the data stays free to generate.
    """

    def __init__(self, size, image_size, num_classes, seed):
        self.size, self.image_size, self.num_classes, self.seed = size, image_size, num_classes, seed
        shape = (num_classes, 3, image_size, image_size)
        self.patterns = torch.randn(shape, generator=torch.Generator().manual_seed(12345))  # shared by splits

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        index %= self.size  # a key past the end is a copy (repeated augmentation): the same sample
        g = torch.Generator().manual_seed(spread(self.seed, index))
        label = int(torch.randint(self.num_classes, (), generator=g))
        noise = torch.randn(3, self.image_size, self.image_size, generator=g)
        return {"pixel_values": noise + self.patterns[label], "labels": label, "valid": True, "source": "",
                "error": ""}


def build_datasets(args, rank=0, world=1, inp=None):
    """(train, val, class_names, notes) for the source `args` names, transforms attached for the run's
    Input `inp` (presets.resolve_input(args) when not given); with --streaming the train set is this
    process's share of the stream (rank of world).

    The train set's augmentation is seeded per sample: call its set_epoch before each epoch.
    """
    inp = presets.resolve_input(args) if inp is None else inp
    if inp.video:
        return build_video_datasets(args, inp)
    size, val_size = inp.image_size, inp.val_crop_size
    if inp.kind == "synthetic":
        names = [f"class_{i}" for i in range(args.num_classes)]
        epoch = torch.zeros((), dtype=torch.int64)  # synthetic data has no augmentation to seed
        return (EpochSeeded(SyntheticDataset(args.synthetic_train_samples, size, args.num_classes, seed=1), epoch),
                SyntheticDataset(args.synthetic_val_samples, size, args.num_classes, seed=2), names, [])
    progressive = presets.progressive_notes(inp, args.epochs)
    if inp.kind == "digits":
        splits = load_digits_dataset()
        train = subset(splits["train"], args.max_train_samples)
        val = subset(splits["validation"], args.max_val_samples)
        names = train.features["label"].names
        return (_with_transform(train, presets.ByEpoch(presets.digits_train, inp), decoded=True, seed=args.seed),
                _with_transform(val, presets.Fixed(presets.digits_eval(val_size), val_size), decoded=True), names,
                progressive)
    val_preset = presets.Fixed(presets.eval_preset(inp), val_size)
    train_preset = presets.ByEpoch(partial(presets.train_preset, inp), inp)
    if args.streaming:
        train, val, names, notes = build_stream(args, rank, world, train_preset)
        val = subset(val, args.max_val_samples)
        return train, _with_transform(val, val_preset, decoded=False), names, notes + progressive
    train, val, names, notes = load_splits(args)
    return (_with_transform(train, train_preset, decoded=False, seed=args.seed),
            _with_transform(val, val_preset, decoded=False), names, notes + progressive)


class BadImages:
    """Images that could not be decoded: stop at the first one (default), or skip and list them all."""

    def __init__(self, skip):
        self.skip, self.found = skip, {}

    def check(self, batch):
        """The number of valid images in the batch; raises at the first bad one unless skipping."""
        # Host-side strings: no device sync. A skipped image is left out of loss and metrics.
        bad = {source: error for source, error in zip(batch["source"], batch["error"]) if source}
        if bad and not self.skip:
            source, error = next(iter(bad.items()))
            raise DataError(f"cannot decode {source} ({error.splitlines()[0]}); pass --skip_bad_images "
                            f"to skip such files (they are then listed in bad_images.txt)")
        self.found.update(bad)
        return sum(not source and not error for source, error in zip(batch["source"], batch["error"]))  # not padding


def data_signature(train_ds, classes):
    """What a resumed run must find again in its training data: the sample count, the class count
    and the labels in order (the schedule's steps, each sample's place in the permutation and the
    classifier's shape come from them)."""
    if isinstance(train_ds, StreamRows):  # the split's size and files: its labels are not read ahead
        return train_ds.signature
    inner = train_ds.dataset if isinstance(train_ds, EpochSeeded) else train_ds
    if isinstance(inner, SyntheticDataset):  # a function of its size and class count
        labels = b""
    elif isinstance(inner, VideoClips):
        labels = np.asarray(inner.labels, dtype=np.int64).tobytes()
    else:  # the plain label column; [:] reads it whole (not row by row)
        labels = np.asarray(inner.rows["label"][:], dtype=np.int64).tobytes()
    return {"train_samples": len(train_ds), "classes": classes,
            "labels_sha256": hashlib.sha256(labels).hexdigest()[:16]}


def build_dataloaders(accelerator, train_ds, val_ds, batch_size, num_workers, ra_reps=1, seed=0):
    """Plain DataLoaders, prepared: Accelerate shards them and seeds the shuffle with (seed, epoch).

    No DistributedSampler here: `prepare` already shards, and would shard it a second time. Call
    `train_loader.batches(epoch)` for each epoch's: the permutation depends on (seed, epoch) alone.
    With ra_reps > 1 the train order comes from the repeated augmentation sampler, built for that
    sharding (utils/data/sampling.py).
    """
    # Workers leave SIGTERM/SIGINT to their rank, which checkpoints (utils/core/preemption.py).
    common = dict(batch_size=batch_size, num_workers=num_workers,
                  worker_init_fn=worker_init_fn(),
                  pin_memory=accelerator.device.type == "cuda", persistent_workers=num_workers > 0)
    # One process leaves the epoch's last batch ragged (several pad it to full size); a ragged batch
    # of a single image would make BatchNorm fail in training, so that one image waits an epoch.
    if isinstance(train_ds, StreamRows):  # not prepared: see utils/data/streaming.py
        train = StreamLoader(train_ds, batch_size, num_workers, train_ds.micro_batches, accelerator.device,
                             common["worker_init_fn"])
        return train, accelerator.prepare(DataLoader(val_ds, shuffle=False, generator=torch.Generator(), **common))
    lone_last = accelerator.num_processes == 1 and len(train_ds) % batch_size == 1
    # Own generator: creating an epoch's iterator then draws nothing from the global RNG (which
    # a checkpoint restores), so a resumed run's random streams line up with an uninterrupted one.
    if ra_reps > 1:  # whole batches of each rank's own share: nothing ragged, nothing for Accelerate to pad
        sampler = RepeatedAugmentationSampler(len(train_ds), ra_reps, accelerator.num_processes, batch_size, seed)
        train = DataLoader(train_ds, sampler=sampler, generator=torch.Generator(), **common)
    else:
        train = DataLoader(train_ds, shuffle=True, drop_last=lone_last, generator=torch.Generator(), **common)
    # The val loader too: its first iterator would otherwise draw from the global RNG, at the first
    # validation of each process (persistent workers), which a resumed run meets at another point.
    val = DataLoader(val_ds, shuffle=False, generator=torch.Generator(), **common)
    train, val = accelerator.prepare(train, val)
    return MapLoader(accelerator, train), val


def sample_count(train_ds):
    """The training set's size (None for a stream of unknown size)."""
    return train_ds.rows if isinstance(train_ds, StreamRows) else len(train_ds)


class MapLoader:
    """The training loader of a map-style dataset (a DataLoader prepared by Accelerate), with what every
    training loader has (a StreamLoader too), so that the loop never asks which one it holds: len() micro-
    batches an epoch, `batches(epoch, skipped)`, and `save_position` / `load_position` of a checkpoint."""

    def __init__(self, accelerator, loader):
        self.accelerator, self.loader = accelerator, loader

    def __len__(self):
        return len(self.loader)

    def batches(self, epoch, skipped=0):
        """The training batches of `epoch` after the first `skipped` (a resumed run)."""
        # Accelerate's seedable sampler draws the permutation from (seed, epoch): the same on every
        # rank, different every epoch, and independent of which epochs ran before in this process.
        loader = self.loader
        loader.set_epoch(epoch)
        loader.dataset.set_epoch(epoch)  # the augmentation seed; Accelerate's set_epoch reaches the sampler only
        if skipped:
            # Skips indices, not loaded batches. The new loader counts its own epochs from 0 and would
            # draw epoch 0's permutation: give it this epoch.
            loader = self.accelerator.skip_first_batches(loader, skipped)
            loader.set_epoch(epoch)
        return loader

    def save_position(self, folder, rank):
        """Nothing of its own: the checkpoint's step count and the sampler's (seed, epoch) say where it stood."""

    def load_position(self, folder, rank):
        """Nothing to load: `batches(epoch, skipped)` skips to the checkpoint's step."""


def build_test_loader(accelerator, test_ds, views_per_batch, num_workers):
    """The multi-view test's loader, prepared (sharded, padded) like the val loader: each batch holds
    views_per_batch // crops clips of `crops` views, so a forward pass sees about views_per_batch views."""
    crops = test_ds.shape[0]
    loader = DataLoader(test_ds, batch_size=max(1, views_per_batch // crops), shuffle=False, num_workers=num_workers,
                        worker_init_fn=worker_init_fn(), pin_memory=accelerator.device.type == "cuda",
                        generator=torch.Generator())
    return accelerator.prepare(loader)
