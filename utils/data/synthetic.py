"""--dataset synthetic: random images of a pattern per class, generated on the fly, for tests and benchmarks."""

import torch
from torch.utils.data import Dataset

from utils.core.seeding import EpochSeeded, spread
from utils.data.source import DataSource


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


class Synthetic(DataSource):
    """Float input already, not normalised (stats None); sized by --synthetic_*_samples and --image_size."""

    kind, own_input, size, stats = "synthetic", True, 32, None

    def datasets(self, args, inp, rank=0, world=1):
        names = [f"class_{i}" for i in range(args.num_classes)]
        epoch = torch.zeros((), dtype=torch.int64)  # synthetic data has no augmentation to seed
        size = inp.image_size
        return (EpochSeeded(SyntheticDataset(args.synthetic_train_samples, size, args.num_classes, seed=1), epoch),
                SyntheticDataset(args.synthetic_val_samples, size, args.num_classes, seed=2), names, [])

    def train_labels(self, train):
        return b""  # a function of its size and class count
