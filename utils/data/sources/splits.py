"""The splits of a `datasets` source: its image and label columns picked and renamed, labels checked and made
ClassLabels, seeded subsets; the fixed seed that carving and subsets use."""

import numpy as np

from utils.data.errors import DataError

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


SPLIT_SEED = 0  # carving and subsets use a fixed seed, so every --seed is scored on the same images

IMAGE_COLUMNS = ("image", "img", "images", "picture", "pixel_values", "jpg", "jpeg", "png", "webp")  # webdataset: by suffix

LABEL_COLUMNS = ("label", "labels", "fine_label", "coarse_label", "class", "target", "category", "cls")

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


def image_and_label(ds, args):
    """(ds with only its image and label columns, named `image` and `label`; the label's original name). A
    Dataset or a streamed IterableDataset alike."""
    import datasets

    image_col = pick_column(ds, args.image_column, IMAGE_COLUMNS, "image")
    label_col = pick_column(ds, args.label_column, LABEL_COLUMNS, "label")
    ds = ds.select_columns([image_col, label_col])
    if image_col != "image":
        ds = ds.rename_column(image_col, "image")
    if label_col != "label":
        ds = ds.rename_column(label_col, "label")
    if not isinstance(ds.features["image"], datasets.Image):
        _fail(f"image_column: column {image_col!r} holds {type(ds.features['image']).__name__}, not images")
    return ds, label_col


def normalise(ds, args, class_names=None):
    """Rename the image and label columns to `image` and `label`, drop the others, labels as ClassLabel."""
    import datasets

    ds, label_col = image_and_label(ds, args)
    if isinstance(ds.features["label"], datasets.ClassLabel):
        return ds
    labels = ds["label"][:]  # [:] reads the column whole, not row by row
    if labels and not all(isinstance(v, (int, np.integer)) for v in labels[:100]):
        _fail(f"label_column: column {label_col!r} holds {type(labels[0]).__name__} values, expected class indices")
    if class_names is None:  # integer labels without names: classes 0..max
        class_names = [str(i) for i in range(max(labels) + 1 if labels else 0)]
    _check_range(ds, class_names)
    return ds.cast_column("label", datasets.ClassLabel(names=class_names))


def _check_range(ds, class_names):
    labels = np.asarray(ds["label"][:])
    bad = labels[(labels < 0) | (labels >= len(class_names))]
    if bad.size:
        _fail(f"label_column: {bad.size} labels outside [0, {len(class_names)}), e.g. {int(bad[0])}; "
              f"fix the data or pick another split")


def subset(ds, n):
    """A seeded random subset of n rows (all of them when n is None or larger)."""
    if n is None or n >= len(ds):
        return ds
    rows = np.random.default_rng(SPLIT_SEED).choice(len(ds), size=n, replace=False)
    return ds.select(np.sort(rows))
