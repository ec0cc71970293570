"""Several labels per sample: how a `datasets` column says so, and the multi-hot target a loader hands over.

A single-label sample's label is a class index. A multi-label sample's is the list of its
classes' indices (possibly empty: a valid all-negative sample), which is how `datasets` stores it (a
List(ClassLabel) column); the loaders turn it into a float32 multi-hot row of the class count, so that a batch's
targets are (N, classes), what binary cross-entropy, MixUp/CutMix and the gathered figures take.

The source decides the kind where it reads the data (`targets_for`: the label column's feature) and hands its
datasets a ClassIndex or a MultiHot: what a sample's target is, which label a loader checks against the class count,
and the random train crop's default area (utils/data/transforms/crops.py), so that the loaders and transforms never
ask which kind they hold.
"""

import numpy as np
import torch

from utils.data.transforms.crops import IMAGENET_CROP_SCALE, SMALL_SIDE, WHOLE_OBJECTS_CROP_SCALE


class ClassIndex:
    """One label a sample: its target is the class index as the data holds it (0 for a sample that failed to load)."""

    multi_label = False
    width = None  # no multi-hot row
    empty = 0  # the label of a sample that failed to load

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


class MultiHot:
    """Several labels a sample: its target is the float32 multi-hot row of its list of classes (all zeros for a sample
    that failed to load), `width` the class count."""

    multi_label = True
    empty = ()

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


def targets_for(feature, classes):
    """The targets of a split whose `datasets` label feature is `feature`, of `classes` classes."""
    return MultiHot(classes) if is_multi_label(feature) else ClassIndex()


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

