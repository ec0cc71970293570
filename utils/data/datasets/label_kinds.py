"""The data side of the kind of labels: one label a sample (ClassIndex) or several (MultiHot). The run's whole kind,
its scoring and reporting too, subclasses these (utils/evaluation/tasks.py: SingleLabel, MultiLabel; the members a
kind provides: utils/evaluation/label_kind.py); they live here because the data layer reads them and may import
nothing above it.

A single-label sample's label is a class index. A multi-label sample's is the list of its classes' indices (possibly
empty: a valid all-negative sample), which is how `datasets` stores it (a List(ClassLabel) column); the loaders turn
it into a float32 multi-hot row of the class count, so that a batch's targets are (N, classes), what binary
cross-entropy, MixUp/CutMix and the gathered figures take.

The source decides the kind where it reads the data (`kind_of`: the label column's feature; `targets_for`) and asks
it the rest: a sample's target, which label a loader checks against the class count, the random train crop's default
area (utils/data/transforms/crops.py), how a label column becomes ClassLabels, the validation carve, the folds'
strata and the data options the kind refuses, so that the sources, loaders and transforms never ask which kind they
hold.
"""

import numpy as np
import torch

from utils.data.errors import DataError
from utils.data.transforms.crops import IMAGENET_CROP_SCALE, SMALL_SIDE, WHOLE_OBJECTS_CROP_SCALE

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


class LabelTargets:
    """What the data side of every kind shares: refusing the data options its samples cannot take."""

    DATA_REFUSED = {}  # {data option: why} of those its samples cannot take (`refuse`)

    @classmethod
    def refuse(cls, option):
        """One line (DataError) when the data option `option` asks what samples of this kind cannot give."""
        if option in cls.DATA_REFUSED:
            _fail(f"{option}: {cls.DATA_REFUSED[option]}")


class ClassIndex(LabelTargets):
    """One label a sample: its target is the class index as the data holds it (0 for a sample that failed to load)."""

    name = "single_label"  # how run.json names the kind (utils/evaluation/tasks.py recorded_kind reads it back)
    multi_label = False  # what utils/evaluation/tasks.py task_kind tells the kinds by
    width = None  # no multi-hot row
    empty = 0  # the label of a sample that failed to load

    def __init__(self, classes=None):
        pass  # a class index needs no class count

    @staticmethod
    def target(label):
        return label

    @staticmethod
    def index(label):
        """The class index a loader checks against the class count (load_item's `classes`)."""
        return label

    @staticmethod
    def crop_scale(side):
        """The random train crop's area share by default: Inception's, but for small images (mostly their object)."""
        return WHOLE_OBJECTS_CROP_SCALE if side < SMALL_SIDE else IMAGENET_CROP_SCALE

    @staticmethod
    def crop_origin(side):
        return f"the default of single-label images of {side} px"

    @staticmethod
    def class_label(feature):
        """The ClassLabel of a label column of this kind."""
        return feature

    @staticmethod
    def normalised(ds, label_col, class_names=None):
        """`ds` with its label column made a ClassLabel: of `class_names`, else 0..max of its integer labels."""
        import datasets

        if isinstance(ds.features["label"], datasets.ClassLabel):
            return ds
        labels = ds["label"][:]  # [:] reads the column whole, not row by row
        if labels and not all(isinstance(v, (int, np.integer)) for v in labels[:100]):
            _fail(f"label_column: column {label_col!r} holds {type(labels[0]).__name__} values, expected class indices")
        if class_names is None:  # integer labels without names: classes 0..max
            class_names = [str(i) for i in range(max(labels) + 1 if labels else 0)]
        ClassIndex.check_range(ds, class_names)
        return ds.cast_column("label", datasets.ClassLabel(names=class_names))

    @staticmethod
    def check_range(ds, class_names):
        """One line when a label of `ds` is not one of `class_names`' indices."""
        labels = np.asarray(ds["label"][:])
        bad = labels[(labels < 0) | (labels >= len(class_names))]
        if bad.size:
            _fail(f"label_column: {bad.size} labels outside [0, {len(class_names)}), e.g. {int(bad[0])}; "
                  f"fix the data or pick another split")

    @staticmethod
    def carve(train, fraction, seed, names):
        """(train, val, how): `fraction` of `train` carved out, stratified by class (`datasets`' split, `seed`)."""
        try:
            carved = train.train_test_split(test_size=fraction, stratify_by_column="label", seed=seed)
        except ValueError as e:  # a stratified carve needs an image of each class on both sides
            _fail(f"val_fraction: cannot carve a stratified {fraction:.0%} of {len(train)} images in "
                  f"{len(names)} classes ({str(e).splitlines()[0]}); raise --val_fraction, or give a validation "
                  f"split (--val_dir)")
        return carved["train"], carved["test"], "stratified"

    @staticmethod
    def strata(labels, folds, class_names):
        """(what the folds are stratified by, how it is said): the class, which every fold needs a sample of (one
        line naming a class with fewer samples than folds)."""
        counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(class_names))
        short = [k for k, n in enumerate(counts) if 0 < n < folds]
        if short:
            k = short[0]
            _fail(f"folds: class {class_names[k]!r} has {counts[k]} training samples, fewer than the {folds} folds; "
                  f"lower --folds, or drop the class")
        return np.asarray(labels), "by class"


class MultiHot(LabelTargets):
    """Several labels a sample: its target is the float32 multi-hot row of its list of classes (all zeros for a sample
    that failed to load), `width` the class count."""

    name = "multi_label"
    multi_label = True
    empty = ()
    DATA_REFUSED = {"flip_labels": "moves a sample's one label to another class; multi-label rows have several: drop "
                                   "it",
                    "imbalance": "keeps a share of each class's samples, which multi-label rows (several classes "
                                 "each) do not split into; drop --imbalance"}

    def __init__(self, width):
        self.width = width

    def target(self, label):
        return multi_hot(label, self.width)

    def index(self, label):
        """The list checked as one index against the class count: its first out of range, else 0."""
        return next((v for v in label if not 0 <= v < self.width), 0)

    @staticmethod
    def crop_scale(side):
        return WHOLE_OBJECTS_CROP_SCALE  # labelled objects lie apart: a small crop cuts some out, their labels on

    @staticmethod
    def crop_origin(side):
        return "the default of multi-label data"

    @staticmethod
    def class_label(feature):
        return feature.feature  # that of each row's list

    @staticmethod
    def normalised(ds, label_col, class_names=None):
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
                class_names = [str(v) for v in range(max(found) + 1)] if found and not isinstance(found[-1], str) \
                    else found
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

    @staticmethod
    def check_range(ds, class_names):
        pass  # made of its ClassLabel's own names by `normalised`

    @staticmethod
    def carve(train, fraction, seed, names):
        """(train, val, how): `fraction` carved out, stratified by label set when every label set that occurs has a
        row on both sides to spare (scikit-learn's split), else at random."""
        from sklearn.model_selection import train_test_split

        keys = label_sets(train["label"][:])
        rows = np.arange(len(train))
        try:
            kept, carved = train_test_split(rows, test_size=fraction, stratify=keys, random_state=seed)
            how = "stratified by label set"
        except ValueError:  # a label set with a single row, or more sets than the carve has rows
            kept, carved = train_test_split(rows, test_size=fraction, random_state=seed)
            how = "at random (some label sets are too rare to stratify by)"
        return train.select(np.sort(kept)), train.select(np.sort(carved)), how

    @staticmethod
    def strata(labels, folds, class_names):
        """By label set, when every set has a sample for each fold; else None (at random)."""
        keys = np.asarray(label_sets(labels))
        _, counts = np.unique(keys, return_counts=True)
        return (keys, "by label set") if counts.min() >= folds else (None, "at random (some label sets have fewer "
                                                                           "samples than folds)")


def label_sets(rows):
    """Each row's set of labels as one text key (what multi-label splits are stratified by)."""
    return [" ".join(map(str, sorted(set(row)))) for row in rows]


def kind_of(feature):
    """The kind of labels (its data side's class) of a split whose `datasets` label feature is `feature`."""
    return MultiHot if is_multi_label(feature) else ClassIndex


def targets_for(feature, classes):
    """The targets of a split whose `datasets` label feature is `feature`, of `classes` classes."""
    return kind_of(feature)(classes)


def is_multi_label(feature):
    """Whether a `datasets` label feature holds several labels per row: a list (Sequence) of class labels or ints."""
    import datasets

    return isinstance(feature, (datasets.List, datasets.LargeList)) or type(feature).__name__ == "Sequence"


def multi_hot(indices, num_classes):
    """The float32 (num_classes,) target of a sample whose classes are `indices` (repeats count once)."""
    target = torch.zeros(num_classes, dtype=torch.float32)
    if len(indices):
        target[torch.as_tensor(list(indices), dtype=torch.int64)] = 1.0
    return target


def multi_hot_matrix(rows, num_classes):
    """(len(rows), num_classes) uint8 of lists of class indices: a whole split's labels at once."""
    matrix = np.zeros((len(rows), num_classes), dtype=np.uint8)
    for i, row in enumerate(rows):
        matrix[i, list(row)] = 1
    return matrix
