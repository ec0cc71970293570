"""The learning-rate range test (Smith, "Cyclical Learning Rates for Training Neural Networks", 2015; fastai's
lr_find, Lightning's Tuner): a few steps of the run's own training at an LR that grows exponentially from low to high,
the loss of each step being the mean over every sample of every process; the curve smoothed, cut where it diverges,
and two suggestions read from it.

The sweep and the suggestions are arithmetic on the curve; the steps themselves are the run's (train_classification.py
runs its own loop with this schedule), so accumulation, mixed precision, MixUp and the NaN check are the training's.
"""

import math

import numpy as np
from torch.optim.lr_scheduler import LambdaLR

SMOOTHING = 0.98  # the exponential moving average of the loss, debiased (as Smith's and fastai's), at most: a
SMOOTHED_STEPS = 4  # sweep of N steps averages over about N / 4 of them (0.96 for 100), or it would lag its own end
DIVERGED = 4.0  # the smoothed loss this many times its lowest so far: the sweep stops there


class LossDiverged(Exception):
    """The sweep's loss past DIVERGED times its lowest, or not finite: every process sees the same mean and stops."""


def sweep_lr(low, high, steps, step):
    """The LR of sweep step `step` (0-based) of `steps`, from `low` to `high`, exponentially."""
    return low * (high / low) ** (step / max(steps - 1, 1))


def sweep_schedule(optimizer, low, high, steps):
    """A scheduler that takes the optimizer's head LR (its largest group's) through the sweep, every group keeping its
    ratio to it (--layer_decay's layers)."""
    head = max(group["initial_lr"] if "initial_lr" in group else group["lr"] for group in optimizer.param_groups)
    return LambdaLR(optimizer, lambda step: sweep_lr(low, high, steps, min(step, steps - 1)) / head)


class Curve:
    """The sweep's losses as they come: smoothed, the divergence told at once."""

    def __init__(self, steps=100):
        self.lrs, self.losses, self.smoothed = [], [], []
        self._average = 0.0
        self.beta = min(SMOOTHING, 1 - SMOOTHED_STEPS / steps)  # `steps`: the sweep's length

    def add(self, lr, loss):
        """Record step (lr, loss); LossDiverged when it is the step where the sweep stops."""
        self.lrs.append(lr)
        self.losses.append(loss)
        if not math.isfinite(loss):
            self.smoothed.append(float("nan"))
            raise LossDiverged(f"diverged at lr {lr:.3g} (loss {loss})")
        self._average = self.beta * self._average + (1 - self.beta) * loss
        self.smoothed.append(self._average / (1 - self.beta ** len(self.losses)))
        lowest = min(self.smoothed)
        if len(self.smoothed) > 1 and self.smoothed[-1] > DIVERGED * lowest:
            raise LossDiverged(f"diverged at lr {lr:.3g} (smoothed loss {self.smoothed[-1]:.4g}, past {DIVERGED:g} x "
                               f"its lowest {lowest:.4g})")

    def suggestions(self):
        """{"valley": lr, "steepest": lr}, read from the smoothed curve's descent into its lowest point: the descent
        starts where the loss is below its first tenth's level by twice that tenth's noise (the std of its raw
        losses) and a fifth of the whole fall, so that a long flat start, drifting down, is not taken for it. Valley: two thirds of the way
        down the descent (in log LR), well inside the fall and short of the bottom (the LR --lr auto takes); steepest:
        where the smoothed loss falls fastest against log LR within it. Rounded to 2 significant digits, so that the
        same LR typed by hand is the same float. None when the curve is too short, or has no descent, to tell."""
        smoothed = np.asarray(self.smoothed, dtype=np.float64)
        finite = np.flatnonzero(np.isfinite(smoothed))
        if len(finite) < 3:
            return None
        lowest = int(finite[np.argmin(smoothed[finite])])
        first = max(len(self.losses) // 10, 2)
        level = float(np.median(smoothed[:first]))
        noise = float(np.std(np.asarray(self.losses[:first], dtype=np.float64)))
        fall = max(2 * noise, 0.2 * (level - smoothed[lowest]))  # past the noise, and a fifth of the way down
        start = next((i for i in range(lowest + 1) if smoothed[i] < level - fall), lowest)
        if lowest - start < 2:
            return None
        lrs = np.asarray(self.lrs[:lowest + 1])
        valley = start + (2 * (lowest - start)) // 3
        slopes = np.gradient(smoothed[:lowest + 1], np.log10(lrs))
        steepest = start + int(np.argmin(slopes[start:lowest + 1]))
        return {"valley": _rounded(lrs[valley]), "steepest": _rounded(lrs[steepest])}


def _rounded(lr):
    return float(f"{lr:.2g}")
