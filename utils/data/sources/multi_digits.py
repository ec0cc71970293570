"""--dataset multi_digits: the embedded multi-label set, tiles of 2 to 4 of scikit-learn's digits, labelled with the
digits they show. Offline, like the default job; its rows are what a Hub dataset with a List(ClassLabel) column
holds, so it trains through the same path as one."""

import numpy as np

from utils.data.datasets.images import with_transform
from utils.data.datasets.label_kinds import MultiHot
from utils.data.sources.digits import Digits, digits_eval, digits_train
from utils.data.sources.folds import remake
from utils.data.sources.protocol import no_files, no_imbalance
from utils.data.sources.splits import subset
from utils.data.transforms.images import ByEpoch, Fixed
from utils.data.transforms.input import progressive_notes

CELL, GRID = 16, 2  # each digit drawn 16x16 in one cell of a 2x2 grid: 32x32 tiles
TRAIN_TILES, VAL_TILES = 3000, 601  # an odd-sized validation split, as users' are
TILE_SEED = 1234
# Pixel statistics of the tiles (32x32, 0..1 scale), measured over all 3,601.
TILES_MEAN, TILES_STD = (0.229,) * 3, (0.306,) * 3


def tiles(scans, count, rng):
    """`count` (32, 32) RGB PIL tiles of 2-4 scans drawn from `scans` ((N, 16, 16) uint8, their digits) into random
    cells, and their labels: the sorted distinct digits drawn."""
    from PIL import Image

    images, labels = [], []
    cells16, digits = scans
    for _ in range(count):
        tile = np.zeros((CELL * GRID, CELL * GRID), dtype=np.uint8)
        cells = rng.choice(GRID * GRID, size=rng.integers(2, GRID * GRID + 1), replace=False)
        picks = rng.integers(len(digits), size=len(cells))
        for cell, pick in zip(cells, picks):
            row, col = divmod(int(cell), GRID)
            tile[row * CELL:(row + 1) * CELL, col * CELL:(col + 1) * CELL] = cells16[pick]
        images.append(Image.fromarray(tile, "L").convert("RGB"))
        labels.append(sorted({int(d) for d in digits[picks]}))
    return images, labels


def load_multi_digits():
    """A `datasets.DatasetDict` of 3,000 train / 601 validation tiles, `label` a List(ClassLabel) of the digits
    shown; the scans split 80/20 first (a fixed seed), so no validation tile reuses a training scan."""
    import datasets
    from PIL import Image
    from sklearn.datasets import load_digits

    scans = load_digits()
    ink = (scans.images * (255 / 16)).round().astype(np.uint8)  # the scans are 0..16 ink levels
    cells16 = np.stack([np.asarray(Image.fromarray(p, "L").resize((CELL, CELL), Image.BILINEAR)) for p in ink])
    rng = np.random.default_rng(TILE_SEED)
    order = rng.permutation(len(scans.target))
    cut = int(0.8 * len(order))
    features = datasets.Features(image=datasets.Image(),
                                 label=datasets.List(datasets.ClassLabel(names=[str(d) for d in range(10)])))
    splits = {}
    for split, rows, count in (("train", order[:cut], TRAIN_TILES), ("validation", order[cut:], VAL_TILES)):
        images, labels = tiles((cells16[rows], scans.target[rows]), count, rng)
        splits[split] = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    return datasets.DatasetDict(splits)


class MultiDigits(Digits):
    """--dataset multi_digits: the digits' source and recipe (no flip) on tiles of several digits, multi-hot
    targets."""

    kind, stats = "multi_digits", (TILES_MEAN, TILES_STD)
    unused = {**Digits.unused, **no_files("multi_digits"), **no_imbalance("multi_digits, several labels a sample")}

    def datasets(self, data, inp, rank=0, world=1):
        splits = load_multi_digits()
        train = subset(splits["train"], data.max_train_samples)
        val = subset(splits["validation"], data.max_val_samples)
        train, val, self.remade, remade = remake(train, val, data)
        names = train.features["label"].feature.names
        size = inp.val_crop_size
        targets = MultiHot(len(names))
        return (with_transform(train, ByEpoch(digits_train, inp), decoded=True, seed=data.seed, targets=targets),
                with_transform(val, Fixed(digits_eval(size), size), decoded=True, targets=targets),
                names, remade + progressive_notes(inp, data.epochs))
