"""--dataset spectral_digits: the embedded multispectral set, 6 bands of 16-bit pixels, offline like the default job.

Each of scikit-learn's digits (the default job's split) is drawn in bands 3-5, at three gains; bands 0-2 hold a decoy:
another image of another class (drawn at random, so the decoy says nothing of the label), brighter than the digit.
A model that sees every band learns the digit; with --bands 0 1 2 it sees only decoys and cannot beat chance by much:
the end-to-end check that the extra bands reach the model. Its rows hold 6-band uint16 TIFF files, so it trains
through the path of a folder of GeoTIFFs (utils/data/decoding/bands.py), statistics computed (--mean auto)."""

import io

import numpy as np
from torchvision.transforms import v2

from utils.data.datasets.images import with_transform
from utils.data.decoding.bands import PixelFormat, file_decoder
from utils.data.sources.digits import OWN_RECIPE, load_digits_dataset
from utils.data.sources.folds import remake
from utils.data.sources.protocol import NO_COLUMNS, STREAM_ONLY, SYNTHETIC_ONLY, VIDEO_ONLY, DataSource, no_files
from utils.data.sources.splits import long_tailed, subset
from utils.data.transforms.images import ByEpoch, Fixed
from utils.data.transforms.input import AUTO, progressive_notes

BANDS = 6
DECOY_GAINS, DIGIT_GAINS = (0.9, 0.8, 0.7), (0.5, 0.4, 0.3)  # of the 16-bit range; the decoy is the brighter
NOISE = 800  # the sensor's: uniform 0..NOISE on every band
SPECTRAL_SEED = 4321


def spectral_split(split, rng):
    """A `datasets.Dataset` of 6-band uint16 TIFF bytes, one for each image of the digits' `split`."""
    import datasets
    import tifffile

    gray = np.stack([np.asarray(image.convert("L"), dtype=np.float64) / 255 for image in split["image"]])
    labels = np.asarray(split["label"])
    decoys = (labels + rng.integers(1, 10, size=len(labels))) % 10  # any other class, alike
    by_class = {c: np.flatnonzero(labels == c) for c in range(10)}
    files = []
    for i, decoy in enumerate(decoys):
        other = gray[rng.choice(by_class[int(decoy)])]
        planes = [other * g for g in DECOY_GAINS] + [gray[i] * g for g in DIGIT_GAINS]
        pixels = np.stack(planes, axis=-1) * 65535 * (1 - NOISE / 65535) + rng.uniform(0, NOISE, (32, 32, BANDS))
        buffer = io.BytesIO()
        tifffile.imwrite(buffer, pixels.round().astype(np.uint16), photometric="minisblack", planarconfig="contig")
        files.append({"bytes": buffer.getvalue(), "path": None})
    features = datasets.Features(image=datasets.Image(), label=split.features["label"])
    return datasets.Dataset.from_dict({"image": files, "label": labels.tolist()}, features=features)


def load_spectral_digits():
    """The digits' train and validation splits as 6-band uint16 TIFFs (a `datasets.DatasetDict`), seeded."""
    import datasets

    digits = load_digits_dataset()
    return datasets.DatasetDict({name: spectral_split(split, np.random.default_rng(SPECTRAL_SEED + k))
                                 for k, (name, split) in enumerate(digits.items())})


def spectral_train(size):
    """The digits' own recipe on float bands: resized to the side, a small random affine, no flip."""
    return v2.Compose([v2.Resize(size, antialias=True),
                       v2.RandomAffine(degrees=10, translate=(0.08, 0.08), scale=(0.9, 1.1))])


def spectral_eval(size):
    return v2.Resize(size, antialias=True)


class SpectralDigits(DataSource):
    """--dataset spectral_digits: 6-band 16-bit TIFFs in memory, their statistics computed over the training split."""

    kind, own_input, eval_crop, size, stats, file_pixels = "spectral_digits", True, False, 32, AUTO, True
    unused = {**VIDEO_ONLY, **SYNTHETIC_ONLY, **STREAM_ONLY, **no_files("spectral_digits"), **NO_COLUMNS,
              **dict.fromkeys(("crop_pct", "val_resize_size", "interpolation", "auto_augment", "rand_augment",
                               "train_crop_scale", "train_crop_ratio"),
                              OWN_RECIPE)}

    def pixel_format(self, data):
        return PixelFormat(BANDS, "uint16")

    def datasets(self, data, inp, rank=0, world=1):
        splits = load_spectral_digits()
        train, note = long_tailed(splits["train"], data.imbalance)
        train = subset(train, data.max_train_samples)
        val = subset(splits["validation"], data.max_val_samples)
        train, val, self.remade, remade = remake(train, val, data)
        decode, size = file_decoder(inp), inp.val_crop_size
        return (with_transform(train, ByEpoch(spectral_train, inp), decoded=False, seed=data.seed, decode=decode),
                with_transform(val, Fixed(spectral_eval(size), size), decoded=False, decode=decode),
                train.features["label"].names, [note] * bool(note) + remade + progressive_notes(inp, data.epochs))

    def file_transform(self, inp):
        return spectral_eval(inp.val_crop_size)
