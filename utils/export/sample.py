"""The training samples a quantized export is made with: drawn by seed from the training split, read with the eval
transform (no augmentation), as validation reads its own; calibration's, and with --accuracy_control as many others,
held out from calibration, that NNCF scores its choices on. Never the validation split, which the parity check
scores."""

from typing import NamedTuple

import numpy as np
import torch

from utils.core.seeding import EpochSeeded
from utils.run.trained import RunError

BATCH = 8  # samples per calibration batch


class Calibration(NamedTuple):
    """What a quantized export is made with: batches of training pixels (numpy), and --accuracy_control's HeldOut."""
    batches: list
    held_out: object = None


class HeldOut(NamedTuple):
    """NNCF's accuracy control: batches of (pixels, labels), the score of the outputs, the drop allowed."""
    batches: list
    score: object
    max_drop: float


def drawn(train, val, count, seed, skip=0):
    """`count` batches' worth of the training split through `val`'s transform, in an order drawn by `seed`, after the
    first `skip` of that order: [(pixels as numpy, labels)], undecodable samples left out."""
    if not isinstance(train, EpochSeeded):  # a stream: no random access to its samples
        raise RunError("int8 calibration draws training samples by seed, which a streamed training split cannot give; "
                       "export an fp32 or fp16 format")
    rows = train.dataset.evaluated_like(val.dataset if isinstance(val, EpochSeeded) else val)  # images, or clips
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))[skip:skip + count].tolist()
    items = [item for item in (rows[i] for i in order) if item["valid"]]
    if not items:
        raise RunError("int8 calibration: none of the training samples drawn could be decoded")
    return [(np.ascontiguousarray(torch.stack([i["pixel_values"] for i in items[s:s + BATCH]]).numpy()),
             torch.stack([torch.as_tensor(i["labels"]) for i in items[s:s + BATCH]]))
            for s in range(0, len(items), BATCH)]


def calibration(train, val, task, count, seed, accuracy_control=None):
    """The Calibration of `count` training samples drawn by `seed`; with `accuracy_control` (points), the next `count`
    of the same draw (none of calibration's) held out, scored by the run's task on the export's outputs."""
    batches = [pixels for pixels, _ in drawn(train, val, count, seed)]
    if accuracy_control is None:
        return Calibration(batches)
    held_out = drawn(train, val, count, seed, skip=count)
    labels = torch.cat([y for _, y in held_out])

    def score(outputs):
        return task.score(task.exported_probabilities(torch.from_numpy(outputs)), labels)

    return Calibration(batches, HeldOut(held_out, score, accuracy_control / 100))
