"""Datasets (embedded digits, synthetic) and their dataloaders, sharded by Accelerate."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from utils import presets

DIGITS_SPLIT_SEED = 0  # fixed, so that every run (any --seed) is scored on the same 360 images


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
    split = full.train_test_split(test_size=0.2, stratify_by_column="label", seed=DIGITS_SPLIT_SEED)
    return datasets.DatasetDict(train=split["train"], validation=split["test"])


def _with_preset(ds, transform):
    """Apply `transform` lazily, at access time, rather than rewriting the dataset."""
    def apply(batch):
        return {"pixel_values": [transform(img.convert("RGB")) for img in batch["image"]],
                "labels": batch["label"]}
    return ds.with_transform(apply)


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
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(self.num_classes, (), generator=g))
        noise = torch.randn(3, self.image_size, self.image_size, generator=g)
        return {"pixel_values": noise + self.patterns[label], "labels": label}


def build_datasets(args):
    """(train, val, class_names) for `args.dataset`, transforms attached."""
    if args.dataset == "synthetic":
        names = [f"class_{i}" for i in range(args.num_classes)]
        return (SyntheticDataset(args.synthetic_train_samples, args.image_size, args.num_classes, seed=1),
                SyntheticDataset(args.synthetic_val_samples, args.image_size, args.num_classes, seed=2),
                names)
    splits = load_digits_dataset()
    names = splits["train"].features["label"].names
    return (_with_preset(splits["train"], presets.digits_train(args.image_size)),
            _with_preset(splits["validation"], presets.digits_eval(args.image_size)),
            names)


def build_dataloaders(accelerator, train_ds, val_ds, batch_size, num_workers):
    """Plain DataLoaders, prepared: Accelerate shards them and seeds the shuffle with (seed, epoch).

    No DistributedSampler here: `prepare` already shards, and would shard it a second time. Call
    `train_loader.set_epoch(epoch)` before each epoch so the permutation depends on the epoch alone.
    """
    common = dict(batch_size=batch_size, num_workers=num_workers,
                  pin_memory=accelerator.device.type == "cuda", persistent_workers=num_workers > 0)
    train = DataLoader(train_ds, shuffle=True, **common)
    val = DataLoader(val_ds, shuffle=False, **common)
    return accelerator.prepare(train, val)
