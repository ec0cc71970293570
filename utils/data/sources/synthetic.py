"""--dataset synthetic: random images of a pattern per class, generated on the fly, for tests and benchmarks."""

import torch

from utils.core.seeding import EpochSeeded
from utils.data.datasets.synthetic import SyntheticDataset
from utils.data.sources.protocol import (EMBEDDED_SUBSETS, IMAGE_CROPS, STREAM_ONLY, VIDEO_ONLY, DataSource,
                                        no_files, no_imbalance, no_remaking, rgb_only)

GENERATED = "synthetic data is generated at --image_size: it has no crop to resize or augment"


class Synthetic(DataSource):
    """Float input already, not normalised (stats None); sized by --synthetic_*_samples and --image_size."""

    kind, own_input, eval_crop, size, stats = "synthetic", True, False, 32, None
    unused = {**VIDEO_ONLY, **STREAM_ONLY, **no_files("synthetic"), **rgb_only("synthetic"),
              **EMBEDDED_SUBSETS, **no_imbalance("synthetic"), **no_remaking("synthetic"),
              **dict.fromkeys(IMAGE_CROPS, GENERATED),
              **dict.fromkeys(("crop_pct", "interpolation", "auto_augment", "rand_augment"), GENERATED),
              **dict.fromkeys(("mean", "std"), "synthetic input is generated as floats, not normalised")}

    def datasets(self, data, inp, rank=0, world=1):
        names = [f"class_{i}" for i in range(data.num_classes)]
        epoch = torch.zeros((), dtype=torch.int64)  # synthetic data has no augmentation to seed
        size = inp.image_size
        return (EpochSeeded(SyntheticDataset(data.synthetic_train_samples, size, data.num_classes, seed=1), epoch),
                SyntheticDataset(data.synthetic_val_samples, size, data.num_classes, seed=2), names, [])

    def train_labels(self, train):
        return b""  # a function of its size and class count
