"""Several labels per sample: how a `datasets` column says so, and the multi-hot target a loader hands over.

A single-label sample's label is a class index. A multi-label sample's is the list of its
classes' indices (possibly empty: a valid all-negative sample), which is how `datasets` stores it (a
List(ClassLabel) column); the loaders turn it into a float32 multi-hot row of the class count, so that a batch's
targets are (N, classes), what binary cross-entropy, MixUp/CutMix and the gathered figures take.
"""

import numpy as np
import torch


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

