"""The training objective: cross-entropy (label smoothing) or timm's binary cross-entropy (--bce_loss); for multi-label
data, binary cross-entropy per class (--pos_weight) or timm's asymmetric loss; and with a --teacher, DeiT's
distillation term beside it. Validation scores the data's plain loss (utils/evaluation/tasks.py).

Each loss is kept per sample (cross-entropy) or per sample and class (BCE) until the loop averages it: the loop has
already left out images that could not be decoded."""

import importlib.util
import os

import torch
import torch.nn.functional as F

from utils.core.errors import ConfigError, requirement
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


class MultiLabelBCE:
    """Binary cross-entropy of each class of multi-hot (or MixUp/CutMix-mixed) targets, summed over the classes of
    each sample (so that a sample's gradient is as large as cross-entropy's with one label, whatever the class
    count: the LR recipes carry over; ASL sums the same way).
    --label_smoothing moves each binary target towards 1/2 (y (1 - eps) + eps / 2: every class is its own two-way
    problem); `pos_weight` (--pos_weight auto) weighs each class's positive term."""

    def __init__(self, smoothing, pos_weight=None):
        self.smoothing = smoothing
        self.pos_weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=torch.float32)

    def __call__(self, logits, targets):
        if self.smoothing:
            targets = targets * (1 - self.smoothing) + self.smoothing / 2
        if self.pos_weight is not None and self.pos_weight.device != logits.device:
            self.pos_weight = self.pos_weight.to(logits.device)
        return F.binary_cross_entropy_with_logits(logits.float(), targets, pos_weight=self.pos_weight,
                                                  reduction="none").sum(dim=1)


class AsymmetricLoss:
    """timm's AsymmetricLossMultiLabel (Ridnik et al.: negatives' loss focused with gamma 4 and their probability
    shifted by 0.05), which sums over the batch: divided here by the batch's samples, so that it is a per-sample
    mean whatever the batch size. Label smoothing moves targets as MultiLabelBCE does."""

    def __init__(self, smoothing):
        from timm.loss import AsymmetricLossMultiLabel

        self.smoothing = smoothing
        self.loss = AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=1, clip=0.05)

    def __call__(self, logits, targets):
        if self.smoothing:
            targets = targets * (1 - self.smoothing) + self.smoothing / 2
        return self.loss(logits.float(), targets) / logits.shape[0]


def pos_weights(positives, samples):
    """--pos_weight auto: each class's negatives over its positives in the training split (1 for a class without
    positives, which has nothing to weigh)."""
    return [float((samples - p) / p) if p else 1.0 for p in positives]


def task_loss(args, multi_label=False, pos_weight=None):
    """The loss against the labels: per-sample cross-entropy with --label_smoothing, or BCE with --bce_loss; for
    multi-label data, per-class BCE (with `pos_weight`) or timm's asymmetric loss (--multi_label_loss asl)."""
    if multi_label:
        if args.multi_label_loss == "asl":
            return AsymmetricLoss(args.label_smoothing)
        return MultiLabelBCE(args.label_smoothing, pos_weight)
    if args.bce_loss:
        return BinaryCrossEntropy(args.label_smoothing, args.bce_target_thresh)
    return torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing, reduction="none")


def distillation_loss(kind, student, teacher, temperature, multi_label=False):
    """DeiT's two kinds, per sample: `soft`, the KL divergence of the student's softened distribution from the
    teacher's, times T^2 (Hinton's scaling, which keeps its gradient's size across temperatures); `hard`, the
    cross-entropy against the teacher's top class. (DeiT's own code divides the soft sum by batch x classes; this
    is per sample, as timm's distillation tasks and torch's `batchmean` take it.) Multi-label: the BCE of each
    class's softened sigmoid against the teacher's (soft, times T^2), or against its 0/1 decisions (hard), summed
    over classes as the task's BCE is."""
    if multi_label:
        target = (teacher > 0).float() if kind == "hard" else (teacher / temperature).sigmoid()
        scale = 1.0 if kind == "hard" else temperature ** 2
        student = student if kind == "hard" else student / temperature
        return F.binary_cross_entropy_with_logits(student, target, reduction="none").sum(dim=1) * scale
    if kind == "hard":
        return F.cross_entropy(student, teacher.argmax(dim=1), reduction="none")
    log_s, log_t = F.log_softmax(student / temperature, dim=1), F.log_softmax(teacher / temperature, dim=1)
    return F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(dim=1) * temperature ** 2


class Objective:
    """What the loop minimises for one micro-batch: the mean task loss, and with a teacher (utils/run/teacher.py)
    (1 - alpha) x that + alpha x the mean distillation loss. A model with a distillation token (timm's
    deit_*_distilled, in training) answers with two heads: the first learns the labels, the second the teacher."""

    def __init__(self, args, teacher=None, multi_label=False, pos_weight=None):
        self.task = task_loss(args, multi_label, pos_weight)
        self.multi_label = multi_label
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
        distill = distillation_loss(self.kind, distill_head.float(), teacher.float(), self.temperature,
                                    self.multi_label).mean()
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


# Options whose meaning is one label a sample: set with multi-label data, each is refused in one line.
SINGLE_LABEL_ONLY = {"bce_loss": "multi-label data trains with binary cross-entropy per class already",
                     "bce_target_thresh": "binarises --bce_loss's one-hot targets; multi-label targets are 0/1 already",
                     "metrics": "scores one predicted class a sample; multi-label runs report mAP, per-class AP, "
                                "precision, recall and F1 at --threshold"}
MULTI_LABEL_ONLY = {"pos_weight": "weighs the positives of multi-label data; one-label-a-sample data has none to weigh",
                    "multi_label_loss": "is for multi-label data (samples with lists of labels)",
                    "threshold": "is for multi-label data (samples with lists of labels)"}


def label_kind(args, defaults, source, train, class_names, log=print):
    """(whether the data's samples carry several labels (its source says), --pos_weight auto's weights or None),
    once the data is loaded; an option for the other kind of labels is refused (check_labels). The weights come
    from the whole training split, the same on every rank (each reads every row's labels, not its shard's)."""
    multi_label = source.multi_label(train) is not None
    check_labels(args, defaults, multi_label)
    if not multi_label or args.pos_weight != "auto":
        return multi_label, None
    positives, samples = source.positives(train, len(class_names))  # a stream's label column read whole
    weights = pos_weights(positives, samples)
    more = " ..." if len(weights) > 20 else ""
    log(f"pos_weight auto: {', '.join(f'{w:.3g}' for w in weights[:20])}{more} (positives "
        f"{', '.join(map(str, positives[:20]))}{more} of {samples} training samples)")
    return multi_label, weights


def check_labels(args, defaults, multi_label):
    """Once the data says whether its samples carry several labels: an option for the other kind, set away from
    its default, is refused in one line (ConfigError), never trained on without a word."""
    need = requirement(args)
    if multi_label:
        need(not args.bce_loss, "bce_loss", SINGLE_LABEL_ONLY["bce_loss"])
        for key in ("bce_target_thresh", "metrics"):
            need(getattr(args, key) == defaults[key], key, SINGLE_LABEL_ONLY[key])
        need(0 < args.threshold < 1, "threshold", "must be in (0, 1)")
        need(args.pos_weight is None or args.multi_label_loss == "bce", "pos_weight", "weighs the positives of the "
             "BCE; --multi_label_loss asl has its own asymmetry and no weights: drop one of the two")
        return
    for key, why in MULTI_LABEL_ONLY.items():
        need(getattr(args, key) == defaults[key], key, why)
