"""The training objective: cross-entropy (label smoothing) or timm's binary cross-entropy (--bce_loss), and with a
--teacher, DeiT's distillation term beside it. Validation always scores cross-entropy (train_classification.evaluate).

Each loss is kept per sample (cross-entropy) or per sample and class (BCE) until the loop averages it: the loop has
already left out images that could not be decoded."""

import importlib.util
import os

import torch
import torch.nn.functional as F

from utils.core.errors import ConfigError
from utils.models.libraries import check_model_name

# --distill, --distill_alpha, --distill_temperature: their defaults (utils/config/training_options.py), which a run
# without --teacher must keep (it has no distillation for them to change)
DISTILL_DEFAULTS = {"distill": "soft", "distill_alpha": 0.5, "distill_temperature": 1.0}

class BinaryCrossEntropy:
    """timm's BinaryCrossEntropy (one-vs-all, as "ResNet strikes back" trains), per sample and class.

    Class-index targets are one-hot encoded with --label_smoothing by timm (off value eps / C, on value
    1 - eps + eps / C). Targets that MixUp/CutMix made dense are smoothed here the same way, as timm's Mixup smooths
    them before its BCE (torchvision's MixUp, ours, does not). Then --bce_target_thresh, when given, makes every
    target above it 1 and the rest 0 (timm's target_threshold; A1-A3 use 0.2)."""

    def __init__(self, smoothing, target_threshold):
        from timm.loss import BinaryCrossEntropy as TimmBCE

        self.smoothing = smoothing
        self.loss = TimmBCE(smoothing=smoothing, target_threshold=target_threshold, reduction="none")

    def __call__(self, logits, targets):
        if targets.shape == logits.shape and self.smoothing:
            targets = targets * (1 - self.smoothing) + self.smoothing / logits.shape[-1]
        return self.loss(logits, targets)


def task_loss(args):
    """The loss against the labels: per-sample cross-entropy with --label_smoothing, or BCE with --bce_loss."""
    if args.bce_loss:
        return BinaryCrossEntropy(args.label_smoothing, args.bce_target_thresh)
    return torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing, reduction="none")


def distillation_loss(kind, student, teacher, temperature):
    """DeiT's two kinds, per sample: `soft`, the KL divergence of the student's softened distribution from the
    teacher's, times T^2 (Hinton's scaling, which keeps its gradient's size across temperatures); `hard`, the
    cross-entropy against the teacher's top class. (DeiT's own code divides the soft sum by batch x classes; this
    is per sample, as timm's distillation tasks and torch's `batchmean` take it.)"""
    if kind == "hard":
        return F.cross_entropy(student, teacher.argmax(dim=1), reduction="none")
    log_s, log_t = F.log_softmax(student / temperature, dim=1), F.log_softmax(teacher / temperature, dim=1)
    return F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(dim=1) * temperature ** 2


class Objective:
    """What the loop minimises for one micro-batch: the mean task loss, and with a teacher (utils/run/teacher.py)
    (1 - alpha) x that + alpha x the mean distillation loss. A model with a distillation token (timm's
    deit_*_distilled, in training) answers with two heads: the first learns the labels, the second the teacher."""

    def __init__(self, args, teacher=None):
        self.task = task_loss(args)
        self.teacher = teacher
        self.kind, self.alpha, self.temperature = args.distill, args.distill_alpha, args.distill_temperature

    def __call__(self, output, targets, pixels):
        """`output`: the model's on `pixels` (the erased, mixed input, which the teacher sees too)."""
        head, distill_head = output if isinstance(output, tuple) else (output, output)
        loss = self.task(head, targets).mean()
        if self.teacher is None:
            return loss
        with torch.no_grad():
            teacher = self.teacher(pixels)
        distill = distillation_loss(self.kind, distill_head.float(), teacher.float(), self.temperature).mean()
        return (1 - self.alpha) * loss + self.alpha * distill


def check_options(args, need):
    """The loss and distillation."""
    need(args.bce_target_thresh is None or 0 <= args.bce_target_thresh < 1, "bce_target_thresh", "must be in [0, 1)")
    need(args.bce_target_thresh is None or args.bce_loss, "bce_target_thresh", "applies to --bce_loss only")
    need(not args.bce_loss or importlib.util.find_spec("timm") is not None, "bce_loss", "is timm's "
         "BinaryCrossEntropy, and timm is not installed: pip install -r requirements-models.txt (or pip install timm)")
    if args.teacher is None:
        changed = [f"--{key}" for key, value in DISTILL_DEFAULTS.items() if getattr(args, key) != value]
        need(not changed, changed[0][2:] if changed else "", f"{', '.join(changed)}: set for a distillation, "
             f"which needs --teacher")
        need(not args.teacher_pretrained, "teacher_pretrained", "needs --teacher")
        return
    need(0 < args.distill_alpha <= 1, "distill_alpha", "must be in (0, 1] with --teacher (the weight of the "
         "distillation term)")
    need(args.distill_temperature > 0, "distill_temperature", "must be > 0")
    if os.path.isdir(args.teacher):  # a run folder, read when the run is built
        need(not args.teacher_pretrained, "teacher_pretrained", "for a --teacher model name; a run folder brings its "
             "own weights")
        return
    need(args.teacher_pretrained, "teacher", f"{args.teacher} is not a folder; a model name needs --teacher_pretrained "
         f"(random weights teach nothing), or give a run folder of this script")
    try:
        check_model_name(args.teacher)
    except ValueError as e:
        raise ConfigError(f"teacher: {e}") from None
