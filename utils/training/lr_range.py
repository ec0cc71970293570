"""The learning-rate range test (Smith, "Cyclical Learning Rates for Training Neural Networks", 2015; fastai's
lr_find, Lightning's Tuner): a few steps of the run's own training at an LR that grows exponentially from low to high,
the loss of each step being the mean over every sample of every process; the curve smoothed, cut where it diverges,
and a suggestion read from it when the curve holds one.

The rule, measured on the embedded digits (python benchmarks/lr_find.py; docs/batch_and_lr.md): the LR a third of
the way, in ratio, below the smoothed loss's lowest point trained as well as the recipes' own LR over their epochs,
where the "valley" read before (two thirds down the descent, near a tenth of the lowest point's LR) trained worse;
and a curve whose smoothed loss falls by less than a sixth of where it started (the default job's: 5-9 %, a sweep
too short for resnet18 to learn) holds no suggestion: the LRs read from such curves trained worse than the recipe.

The sweep and the suggestions are arithmetic on the curve; the steps themselves are the run's (train_classification.py
runs its own loop with this schedule), so accumulation, mixed precision, MixUp and the NaN check are the training's.
"""

import math
from dataclasses import dataclass

import numpy as np
from torch.optim.lr_scheduler import LambdaLR

SMOOTHING = 0.98  # the exponential moving average of the loss, debiased (as Smith's and fastai's), at most: a
SMOOTHED_STEPS = 4  # sweep of N steps averages over about N / 4 of them (0.96 for 100), or it would lag its own end
DIVERGED = 4.0  # the smoothed loss this many times its lowest so far: the sweep stops there
MIN_FALL = 1 / 6  # the least share of its starting level the smoothed loss must fall by for an LR to be read
BELOW_LOWEST = 3  # the suggestion: the lowest point's LR divided by this


@dataclass(frozen=True)
class RangeTestOptions:
    """--lr_find alone, or before training with --lr auto: how the LR range test sweeps."""

    lr_find: bool  # the range test alone: its files and suggestion, then the run ends
    lr_find_min: float  # the sweep's first LR
    lr_find_max: float  # and last
    lr_find_steps: int  # its optimizer steps (fewer where the loss diverges)


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

    def reading(self):
        """(suggestions, why): {"suggested": lr, "lowest": lr, "steepest": lr} and None, or None and why the curve
        holds no LR. Lowest: the LR at the smoothed loss's lowest point; suggested (the LR --lr auto takes): a third of
        it; steepest (for the eye): where the smoothed loss falls fastest against log LR on its way down. Rounded to 2
        significant digits, so that the same LR typed by hand is the same float. No LR when the curve is too short, its
        loss falls by less than MIN_FALL of its start, or still falls at the sweep's last step (its lowest point not
        found)."""
        smoothed = np.asarray(self.smoothed, dtype=np.float64)
        finite = np.flatnonzero(np.isfinite(smoothed))
        if len(finite) < 3:
            return None, f"{len(self.lrs)} steps are too few to read an LR from"
        lowest = int(finite[np.argmin(smoothed[finite])])
        first = max(len(self.losses) // 10, 2)
        level = float(np.median(smoothed[:first]))
        if level - smoothed[lowest] < MIN_FALL * level:
            return None, (f"the smoothed loss falls by {(level - smoothed[lowest]) / level:.0%} of its start "
                          f"({level:.4g} -> {smoothed[lowest]:.4g}), too little to read an LR from (at least "
                          f"{MIN_FALL:.0%})")
        if lowest == len(smoothed) - 1:
            return None, f"the smoothed loss still falls at the sweep's last LR, {self.lrs[-1]:.3g}"
        lrs = np.asarray(self.lrs[:lowest + 1])
        steepest = int(np.argmin(np.gradient(smoothed[:lowest + 1], np.log10(lrs)))) if lowest >= 2 else lowest
        return {"suggested": _rounded(lrs[lowest] / BELOW_LOWEST), "lowest": _rounded(lrs[lowest]),
                "steepest": _rounded(lrs[steepest])}, None


def _rounded(lr):
    return float(f"{lr:.2g}")
