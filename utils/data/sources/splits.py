"""The splits of a `datasets` source: its image and label columns picked and renamed, labels checked and made
ClassLabels, seeded subsets; the fixed seed that carving and subsets use."""

import numpy as np

from utils.data.datasets.labels import is_multi_label
from utils.data.errors import DataError

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


SPLIT_SEED = 0  # carving and subsets use a fixed seed, so every --seed is scored on the same images

IMAGE_COLUMNS = ("image", "img", "images", "picture", "pixel_values", "jpg", "jpeg", "png", "webp")  # webdataset: by suffix

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
    several labels a row, a list of them)."""
    import datasets

    ds, label_col = image_and_label(ds, data)
    if is_multi_label(ds.features["label"]):
        return multi_label_classes(ds, label_col, class_names)
    if isinstance(ds.features["label"], datasets.ClassLabel):
        return ds
    labels = ds["label"][:]  # [:] reads the column whole, not row by row
    if labels and not all(isinstance(v, (int, np.integer)) for v in labels[:100]):
        _fail(f"label_column: column {label_col!r} holds {type(labels[0]).__name__} values, expected class indices")
    if class_names is None:  # integer labels without names: classes 0..max
        class_names = [str(i) for i in range(max(labels) + 1 if labels else 0)]
    _check_range(ds, class_names)
    return ds.cast_column("label", datasets.ClassLabel(names=class_names))


def multi_label_classes(ds, label_col, class_names=None):
    """A column of lists of labels (class names, indices, or ClassLabels) as List(ClassLabel): the names are its
    ClassLabel's, else `class_names` (the training split's, for validation), else the sorted names (or 0..max)
    found; a validation row naming a class that training does not have is one line naming the row."""
    import datasets

    inner = ds.features["label"].feature
    if isinstance(inner, datasets.ClassLabel):
        names = inner.names
        if class_names is None or names == list(class_names):
            return ds
        index = {name: i for i, name in enumerate(class_names)}
        rows = [[names[v] for v in row] for row in ds["label"][:]]
    else:
        rows = ds["label"][:]
        values = [v for row in rows for v in row if v is not None]
        if values and not all(isinstance(v, (str, int, np.integer)) for v in values[:1000]):
            _fail(f"label_column: column {label_col!r} holds lists of {type(values[0]).__name__}, expected class "
                  f"names or indices")
        if class_names is None:
            found = sorted(set(values), key=lambda v: (isinstance(v, str), v))
            class_names = [str(v) for v in range(max(found) + 1)] if found and not isinstance(found[-1], str) else found
        index = {name: i for i, name in enumerate(class_names)}
        if values and not isinstance(values[0], str):
            index = {i: i for i in range(len(class_names))}
    for r, row in enumerate(rows):
        unknown = [v for v in row if v not in index]
        if unknown:
            _fail(f"label_column: row {r} of column {label_col!r} names {unknown[0]!r}, which is not one of the "
                  f"{len(class_names)} training classes; fix the row or drop it")
    coded = [[index[v] for v in row] for row in rows]
    features = ds.features.copy()
    features["label"] = datasets.List(datasets.ClassLabel(names=[str(n) for n in class_names]))
    return ds.remove_columns("label").add_column("label", coded, feature=features["label"])


def _check_range(ds, class_names):
    if is_multi_label(ds.features["label"]):
        return  # made of its ClassLabel's own names by multi_label_classes
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


def long_tailed(ds, ratio):
    """--imbalance RATIO: class k of C keeps round(n_k x RATIO^(-k / (C - 1))) of its n_k rows, at least one (class
    0 whole, the last about 1/RATIO of it), a seeded random choice in the split's order; with a note of the counts.
    (ds, note); ds itself when ratio is None."""
    if ratio is None:
        return ds, None
    if is_multi_label(ds.features["label"]):
        _fail("imbalance: keeps a share of each class's samples, which multi-label rows (several classes each) "
              "do not split into; drop --imbalance")
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
    return feature.feature if is_multi_label(feature) else feature


def carve_multi_label(train, fraction):
    """(train, val, how): `fraction` of a multi-label split carved out, stratified by label set when every label
    set that occurs has a row on both sides to spare (scikit-learn's split), else at random; seed SPLIT_SEED."""
    from sklearn.model_selection import train_test_split

    keys = [" ".join(map(str, sorted(set(row)))) for row in train["label"][:]]
    rows = np.arange(len(train))
    try:
        kept, carved = train_test_split(rows, test_size=fraction, stratify=keys, random_state=SPLIT_SEED)
        how = "stratified by label set"
    except ValueError:  # a label set with a single row, or more sets than the carve has rows
        kept, carved = train_test_split(rows, test_size=fraction, random_state=SPLIT_SEED)
        how = "at random (some label sets are too rare to stratify by)"
    return train.select(np.sort(kept)), train.select(np.sort(carved)), how
