"""The training objective: cross-entropy (label smoothing; long-tailed data: --logit_adjust, --focal_gamma,
--class_weights) or timm's binary cross-entropy (--bce_loss); for multi-label data, binary cross-entropy per class
(--pos_weight, --focal_gamma) or timm's asymmetric loss; and with a --teacher, DeiT's distillation term beside it (of
the plain logits). Validation scores the data's plain loss (utils/evaluation/tasks.py).

Each loss is kept per sample (cross-entropy) or per sample and class (BCE) until the loop averages it: the loop has
already left out images that could not be decoded."""

import importlib.util
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from utils.core.errors import ConfigError
from utils.models.libraries import check_model_name

# --distill, --distill_alpha, --distill_temperature: their defaults (utils/config/training_options.py), which a run
# without --teacher must keep (it has no distillation for them to change)
DISTILL_DEFAULTS = {"distill": "soft", "distill_alpha": 0.5, "distill_temperature": 1.0}


@dataclass(frozen=True)
class LossOptions:
    """What the options ask of the loss, read from them once (utils/config/settings.py); each field is its option's."""

    label_smoothing: float
    bce_loss: bool
    bce_target_thresh: float
    logit_adjust: float
    focal_gamma: float
    multi_label_loss: str  # bce or asl
    teacher: str  # --teacher: a run folder or a model name (utils/run/teacher.py builds it), None: no distillation
    teacher_pretrained: bool
    distill: str  # with a --teacher: soft or hard,
    distill_alpha: float  # the weight of the distillation term,
    distill_temperature: float  # and its temperature

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
    problem); `pos_weight` (--pos_weight auto) weighs each class's positive term; `gamma` (--focal_gamma) scales
    each term by (1 - p_t)^gamma, p_t the probability given to its target (torchvision's sigmoid_focal_loss,
    without its alpha: --pos_weight is the weighing of positives here)."""

    def __init__(self, smoothing, pos_weight=None, gamma=None):
        self.smoothing, self.gamma = smoothing, gamma
        self.pos_weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=torch.float32)

    def __call__(self, logits, targets):
        if self.smoothing:
            targets = targets * (1 - self.smoothing) + self.smoothing / 2
        if self.pos_weight is not None and self.pos_weight.device != logits.device:
            self.pos_weight = self.pos_weight.to(logits.device)
        logits = logits.float()
        loss = F.binary_cross_entropy_with_logits(logits, targets, pos_weight=self.pos_weight, reduction="none")
        if self.gamma:
            p = logits.sigmoid()
            loss = loss * (1 - (p * targets + (1 - p) * (1 - targets))) ** self.gamma
        return loss.sum(dim=1)


class AdjustedCrossEntropy:
    """Softmax cross-entropy (torch's label smoothing: the target q = y (1 - eps) + eps / C), with
    - --logit_adjust TAU: TAU x log(prior) added to every logit first (Menon et al., "Long-tail learning via logit
      adjustment", ICLR 2021): a rare class must win by its log-prior's margin in training, so the plain logits that
      validation and predict.py score lean towards it (the Bayes-optimal rule for balanced error at TAU 1);
    - --focal_gamma G: each class's term -q_c log p_c scaled by (1 - p_c)^G (Lin et al. 2017's focal loss; for
      one-hot targets (1 - p_t)^G x CE), which lets well-classified samples fall silent.
    Targets are class indices or MixUp/CutMix's mixed rows, as torch's cross_entropy takes them."""

    def __init__(self, smoothing, log_prior=None, tau=None, gamma=None):
        self.smoothing, self.gamma = smoothing, gamma
        self.shift = None if tau is None else tau * torch.tensor(log_prior, dtype=torch.float32)

    def __call__(self, logits, targets):
        logits = logits.float()
        if self.shift is not None:
            self.shift = self.shift.to(logits.device)
            logits = logits + self.shift
        if not self.gamma:
            return F.cross_entropy(logits, targets, label_smoothing=self.smoothing, reduction="none")
        log_p = F.log_softmax(logits, dim=1)
        q = targets.float() if targets.dim() == 2 else F.one_hot(targets, logits.shape[1]).float()
        q = q * (1 - self.smoothing) + self.smoothing / logits.shape[1]
        return -(q * (1 - log_p.exp()) ** self.gamma * log_p).sum(dim=1)


class ClassWeighted:
    """--class_weights: a per-sample loss times its class's weight (a mixed target's: the weights mixed as the
    labels were), whatever the loss (cross-entropy, focal, timm's BCE per class)."""

    def __init__(self, loss, weights):
        self.loss, self.weights = loss, torch.tensor(weights, dtype=torch.float32)

    def __call__(self, logits, targets):
        self.weights = self.weights.to(logits.device)
        weight = self.weights[targets] if targets.dim() == 1 else targets.float() @ self.weights
        loss = self.loss(logits, targets)
        return loss * weight.view(-1, *[1] * (loss.dim() - 1))


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


def label_loss(options, multi_label=False, balance=None):
    """The loss against the labels: per-sample cross-entropy with --label_smoothing (--logit_adjust, --focal_gamma),
    or BCE with --bce_loss; for multi-label data, per-class BCE (--pos_weight, --focal_gamma) or timm's asymmetric
    loss (--multi_label_loss asl). `balance` (utils/training/balance.py) holds the weights and prior the options
    derive from the class counts; --class_weights weighs each sample's loss by its class's (`options`: LossOptions)."""
    if multi_label:
        if options.multi_label_loss == "asl":
            return AsymmetricLoss(options.label_smoothing)
        return MultiLabelBCE(options.label_smoothing, balance and balance.pos_weight, options.focal_gamma)
    if options.bce_loss:
        loss = BinaryCrossEntropy(options.label_smoothing, options.bce_target_thresh)
    elif options.logit_adjust is not None or options.focal_gamma:
        loss = AdjustedCrossEntropy(options.label_smoothing, balance.log_prior, options.logit_adjust,
                                    options.focal_gamma)
    else:
        loss = torch.nn.CrossEntropyLoss(label_smoothing=options.label_smoothing, reduction="none")
    return loss if balance is None or balance.class_weights is None else ClassWeighted(loss, balance.class_weights)


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
    """What the loop minimises for one micro-batch: the mean loss on the labels (`label_loss`), and with a teacher
    (utils/run/teacher.py) (1 - alpha) x that + alpha x the mean distillation loss. A model with a distillation token (timm's
    deit_*_distilled, in training) answers with two heads: the first learns the labels, the second the teacher."""

    def __init__(self, options, teacher=None, multi_label=False, balance=None):
        self.label_loss = label_loss(options, multi_label, balance)
        self.multi_label = multi_label
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
        distill = distillation_loss(self.kind, distill_head.float(), teacher.float(), self.temperature,
                                    self.multi_label).mean()
        return (1 - self.alpha) * loss + self.alpha * distill


def check_options(options, need):
    """The loss and distillation LossOptions `options` ask for."""
    thresh, bce = options.bce_target_thresh, options.bce_loss
    need(thresh is None or 0 <= thresh < 1, "bce_target_thresh", "must be in [0, 1)")
    need(thresh is None or bce, "bce_target_thresh", "applies to --bce_loss only")
    need(not bce or importlib.util.find_spec("timm") is not None, "bce_loss", "is timm's "
         "BinaryCrossEntropy, and timm is not installed: pip install -r requirements-models.txt (or pip install timm)")
    need(options.logit_adjust is None or options.logit_adjust > 0, "logit_adjust", "must be > 0 (1: Menon et al.'s)")
    need(options.logit_adjust is None or not bce, "logit_adjust", "adds the log-prior to softmax cross-entropy's "
         "logits; --bce_loss is one sigmoid per class: drop one of the two")
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
