"""The losses of each kind of labels, which its task (utils/evaluation/tasks.py) builds for training from the
LossOptions: cross-entropy (label smoothing; long-tailed data: --logit_adjust, --focal_gamma, --class_weights) or
timm's binary cross-entropy (--bce_loss) for one label a sample; binary cross-entropy per class (--pos_weight,
--focal_gamma) or timm's asymmetric loss for several; and DeiT's distillation term of each kind.

Each loss is kept per sample (cross-entropy) or per sample and class (BCE) until the loop averages it: the loop has
already left out images that could not be decoded."""

import torch
import torch.nn.functional as F

from utils.models.timm_library import import_timm


class BinaryCrossEntropy:
    """timm's BinaryCrossEntropy (one-vs-all, as "ResNet strikes back" trains), per sample and class.

    Class-index targets are one-hot encoded with --label_smoothing by timm (off value eps / C, on value
    1 - eps + eps / C). Targets that MixUp/CutMix made dense are smoothed here the same way, as timm's Mixup smooths
    them before its BCE (torchvision's MixUp, ours, does not). Then --bce_target_thresh, when given, makes every
    target above it 1 and the rest 0 (timm's target_threshold; A1-A3 use 0.2)."""

    def __init__(self, smoothing, target_threshold):
        self.smoothing = smoothing
        self.loss = import_timm("timm.loss").BinaryCrossEntropy(smoothing=smoothing, target_threshold=target_threshold,
                                                                 reduction="none")

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
        self.smoothing = smoothing
        self.loss = import_timm("timm.loss").AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=1, clip=0.05)

    def __call__(self, logits, targets):
        if self.smoothing:
            targets = targets * (1 - self.smoothing) + self.smoothing / 2
        return self.loss(logits.float(), targets) / logits.shape[0]


def single_label_loss(options, balance=None):
    """The loss of one label a sample: per-sample cross-entropy with --label_smoothing (--logit_adjust, --focal_gamma),
    or timm's BCE with --bce_loss; --class_weights weighs each sample's loss by its class's. `options`: the LossOptions
    (utils/training/objective.py); `balance` (utils/training/balance.py): the weights and prior they derive from the
    class counts."""
    tau = None if balance is None else balance.logit_adjust  # --logit_adjust: the prior and TAU come with the counts
    if options.bce_loss:
        loss = BinaryCrossEntropy(options.label_smoothing, options.bce_target_thresh)
    elif tau is not None or options.focal_gamma:
        loss = AdjustedCrossEntropy(options.label_smoothing, balance.log_prior, tau, options.focal_gamma)
    else:
        loss = torch.nn.CrossEntropyLoss(label_smoothing=options.label_smoothing, reduction="none")
    return loss if balance is None or balance.class_weights is None else ClassWeighted(loss, balance.class_weights)


def multi_label_loss(options, balance=None):
    """The loss of several labels a sample: per-class BCE (--pos_weight, --focal_gamma) or timm's asymmetric loss
    (--multi_label_loss asl)."""
    if options.multi_label_loss == "asl":
        return AsymmetricLoss(options.label_smoothing)
    return MultiLabelBCE(options.label_smoothing, balance and balance.pos_weight, options.focal_gamma)


def softmax_distillation(kind, student, teacher, temperature):
    """DeiT's two kinds, per sample: `soft`, the KL divergence of the student's softened distribution from the
    teacher's, times T^2 (Hinton's scaling, which keeps its gradient's size across temperatures); `hard`, the
    cross-entropy against the teacher's top class. (DeiT's own code divides the soft sum by batch x classes; this
    is per sample, as timm's distillation tasks and torch's `batchmean` take it.)"""
    if kind == "hard":
        return F.cross_entropy(student, teacher.argmax(dim=1), reduction="none")
    log_s, log_t = F.log_softmax(student / temperature, dim=1), F.log_softmax(teacher / temperature, dim=1)
    return F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(dim=1) * temperature ** 2


def sigmoid_distillation(kind, student, teacher, temperature):
    """DeiT's two kinds for several labels a sample, per sample: the BCE of each class's softened sigmoid against the
    teacher's (soft, times T^2), or against its 0/1 decisions (hard), summed over classes as the task's BCE is."""
    target = (teacher > 0).float() if kind == "hard" else (teacher / temperature).sigmoid()
    scale = 1.0 if kind == "hard" else temperature ** 2
    student = student if kind == "hard" else student / temperature
    return F.binary_cross_entropy_with_logits(student, target, reduction="none").sum(dim=1) * scale
