"""The training objective: the loss of the data's kind of labels, as its task builds it from the LossOptions
(utils/evaluation/tasks.py, label_losses.py), and with a --teacher DeiT's distillation term beside it (of the plain
logits); the checks of the loss and distillation options. Validation scores the data's plain loss (the task's)."""

import importlib.util
import os
from dataclasses import dataclass

import torch

from utils.core.errors import ConfigError
from utils.models.libraries import check_model_name

# --distill, --distill_alpha, --distill_temperature: their defaults (utils/config/training_options.py), which a run
# without --teacher must keep (it has no distillation for them to change)
DISTILL_DEFAULTS = {"distill": "soft", "distill_alpha": 0.5, "distill_temperature": 1.0}


class NonFiniteLoss(Exception):
    """Training met more NaN/inf losses than --skip_nonfinite_steps allows."""


@dataclass(frozen=True)
class LossOptions:
    """What the options ask of the loss, read from them once (utils/config/settings.py); each field is its option's."""

    label_smoothing: float
    bce_loss: bool
    bce_target_thresh: float
    focal_gamma: float
    multi_label_loss: str  # bce or asl
    teacher: str  # --teacher: a run folder or a model name (utils/run/teacher.py builds it), None: no distillation
    teacher_pretrained: bool
    distill: str  # with a --teacher: soft or hard,
    distill_alpha: float  # the weight of the distillation term,
    distill_temperature: float  # and its temperature

class Objective:
    """What the loop minimises for one micro-batch: the mean loss on the labels (the `task`'s), and with a teacher
    (utils/run/teacher.py) (1 - alpha) x that + alpha x the mean distillation loss. A model with a distillation token
    (timm's deit_*_distilled, in training) answers with two heads: the first learns the labels, the second the
    teacher."""

    def __init__(self, options, task, teacher=None, balance=None):
        self.label_loss = task.loss(options, balance)
        self.task = task  # one label a sample or several (utils/evaluation/tasks.py): its losses
        self.teacher = teacher
        self.kind, self.alpha, self.temperature = options.distill, options.distill_alpha, options.distill_temperature

    def __call__(self, output, targets, pixels):
        """`output`: the model's on `pixels` (the erased, mixed input, which the teacher sees too)."""
        head, distill_head = output if isinstance(output, tuple) else (output, output)
        loss = self.label_loss(head, targets).mean()
        if self.teacher is None:
            return loss
        with torch.no_grad():
            teacher = self.teacher(pixels)
        distill = self.task.distillation(self.kind, distill_head.float(), teacher.float(), self.temperature).mean()
        return (1 - self.alpha) * loss + self.alpha * distill


def check_options(options, need):
    """The loss and distillation LossOptions `options` ask for."""
    thresh, bce = options.bce_target_thresh, options.bce_loss
    need(thresh is None or 0 <= thresh < 1, "bce_target_thresh", "must be in [0, 1)")
    need(thresh is None or bce, "bce_target_thresh", "applies to --bce_loss only")
    need(not bce or importlib.util.find_spec("timm") is not None, "bce_loss", "is timm's "
         "BinaryCrossEntropy, and timm is not installed: pip install -r requirements-models.txt (or pip install timm)")
    need(options.focal_gamma is None or options.focal_gamma > 0, "focal_gamma", "must be > 0 (2: Lin et al.'s)")
    need(options.focal_gamma is None or not bce, "focal_gamma", "focuses cross-entropy and multi-label BCE; "
         "timm's --bce_loss has no focal term: drop one of the two")
    teacher, pretrained = options.teacher, options.teacher_pretrained
    if teacher is None:
        changed = [f"--{key}" for key, value in DISTILL_DEFAULTS.items() if getattr(options, key) != value]
        need(not changed, changed[0][2:] if changed else "", f"{', '.join(changed)}: set for a distillation, "
             f"which needs --teacher")
        need(not pretrained, "teacher_pretrained", "needs --teacher")
        return
    need(0 < options.distill_alpha <= 1, "distill_alpha", "must be in (0, 1] with --teacher (the weight of the "
         "distillation term)")
    need(options.distill_temperature > 0, "distill_temperature", "must be > 0")
    if os.path.isdir(teacher):  # a run folder, read when the run is built
        need(not pretrained, "teacher_pretrained", "for a --teacher model name; a run folder brings its own weights")
        return
    need(pretrained, "teacher", f"{teacher} is not a folder; a model name needs --teacher_pretrained "
         f"(random weights teach nothing), or give a run folder of this script")
    try:
        check_model_name(teacher)
    except ValueError as e:
        raise ConfigError(f"teacher: {e}") from None
