"""Random images of a pattern per class, generated on the fly (--dataset synthetic: tests and benchmarks)."""

import torch
from torch.utils.data import Dataset

from utils.core.seeding import spread
from utils.data.datasets.label_kinds import ClassIndex


class SyntheticDataset(Dataset):
    """Random images and labels, a pure function of (seed, index): no I/O, for benchmarks and tests.

    Each class adds its own fixed pattern to the noise, so a model can learn something (a loss
    that falls is a useful smoke test) while the data stays free to generate.
    """

    targets = ClassIndex()  # one class a sample

    def __init__(self, size, image_size, num_classes, seed):
        self.size, self.image_size, self.num_classes, self.seed = size, image_size, num_classes, seed
        shape = (num_classes, 3, image_size, image_size)
        self.patterns = torch.randn(shape, generator=torch.Generator().manual_seed(12345))  # shared by splits

    def __len__(self):
        return self.size

    @property
    def labels(self):
        """Every sample's label, in order (each a draw of its own generator, as __getitem__ makes it)."""
        return [int(torch.randint(self.num_classes, (), generator=torch.Generator().manual_seed(spread(self.seed, i))))
                for i in range(self.size)]

    def __getitem__(self, index):
        index %= self.size  # a key past the end is a copy (repeated augmentation): the same sample
        g = torch.Generator().manual_seed(spread(self.seed, index))
        label = int(torch.randint(self.num_classes, (), generator=g))
        noise = torch.randn(3, self.image_size, self.image_size, generator=g)
        return {"pixel_values": noise + self.patterns[label], "labels": label, "valid": True, "source": "",
                "error": ""}
