"""The splits of a `datasets` source: its image and label columns picked and renamed, labels checked and made
ClassLabels, seeded subsets; the fixed seed that carving and subsets use."""

import numpy as np

from utils.data.datasets.label_kinds import kind_of
from utils.data.errors import DataError

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


SPLIT_SEED = 0  # carving and subsets use a fixed seed, so every --seed is scored on the same images

IMAGE_COLUMNS = ("image", "img", "images", "picture", "pixel_values",
                 "jpg", "jpeg", "png", "webp")  # webdataset: by suffix

LABEL_COLUMNS = ("label", "labels", "fine_label", "coarse_label", "class", "target", "category", "cls",
                 "tags")  # Planet's list of names

VAL_SPLITS = ("validation", "val", "valid", "test")


def pick_column(ds, asked, candidates, role):
    columns = ds.column_names
    if asked is not None:
        if asked not in columns:
            _fail(f"{role}_column: no column {asked!r}; columns are: {', '.join(columns)}")
        return asked
    found = next((c for c in candidates if c in columns), None)
    if found is None:
        _fail(f"{role}_column: no {role} column found among: {', '.join(columns)}; name it with --{role}_column")
    return found


def image_and_label(ds, data):
    """(ds with only its image and label columns, named `image` and `label`; the label's original name). A
    Dataset or a streamed IterableDataset alike."""
    import datasets

    image_col = pick_column(ds, data.image_column, IMAGE_COLUMNS, "image")
    label_col = pick_column(ds, data.label_column, LABEL_COLUMNS, "label")
    ds = ds.select_columns([image_col, label_col])
    if image_col != "image":
        ds = ds.rename_column(image_col, "image")
    if label_col != "label":
        ds = ds.rename_column(label_col, "label")
    arrays = (datasets.Array2D, datasets.Array3D) if isinstance(ds, datasets.Dataset) else ()  # pixels as arrays
    if not isinstance(ds.features["image"], (datasets.Image, *arrays)):
        _fail(f"image_column: column {image_col!r} holds {type(ds.features['image']).__name__}, not images (an Image "
              f"column{', or an Array2D/Array3D of (H, W[, C]) pixels' if arrays else ''})")
    return ds, label_col


def normalise(ds, data, class_names=None):
    """Rename the image and label columns to `image` and `label`, drop the others, labels as ClassLabel (or, for
    several labels a row, a list of them: the kind of labels the column holds says how)."""
    ds, label_col = image_and_label(ds, data)
    return kind_of(ds.features["label"]).normalised(ds, label_col, class_names)


def _check_range(ds, class_names):
    kind_of(ds.features["label"]).check_range(ds, class_names)


def subset(ds, n):
    """A seeded random subset of n rows (all of them when n is None or larger)."""
    if n is None or n >= len(ds):
        return ds
    rows = np.random.default_rng(SPLIT_SEED).choice(len(ds), size=n, replace=False)
    return ds.select(np.sort(rows))


def long_tailed(ds, ratio):
    """--imbalance RATIO: class k of C keeps round(n_k x RATIO^(-k / (C - 1))) of its n_k rows, at least one (class
    0 whole, the last about 1/RATIO of it), a seeded random choice in the split's order; with a note of the counts.
    (ds, note); ds itself when ratio is None."""
    if ratio is None:
        return ds, None
    kind_of(ds.features["label"]).refuse("imbalance")
    labels = np.asarray(ds["label"][:], dtype=np.int64)
    classes = len(class_labels(ds.features["label"]).names)
    rng = np.random.default_rng(SPLIT_SEED)
    kept, counts = [], []
    for k in range(classes):
        rows = np.flatnonzero(labels == k)
        keep = min(len(rows), max(1, round(len(rows) * ratio ** (-k / max(classes - 1, 1)))))
        kept.append(rng.choice(rows, size=keep, replace=False) if len(rows) else rows)
        counts.append(keep if len(rows) else 0)
    note = (f"imbalance {ratio:g}: training keeps {', '.join(map(str, counts))} samples of the {classes} classes "
            f"({sum(counts)} of {len(ds)})")
    return ds.select(np.sort(np.concatenate(kept))), note


def class_labels(feature):
    """The ClassLabel of a label column: itself, or that of each row's list (multi-label)."""
    return kind_of(feature).class_label(feature)
