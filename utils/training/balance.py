"""Long-tailed data: the training split's class counts, read once and whole on every rank (each reads every row's
label, not its shard: every rank derives the same numbers), and what comes of them: each sample's draw weight
(--sampler balanced), each class's loss weight (--class_weights), the log-prior of --logit_adjust, and
--pos_weight auto's weights for multi-label data."""

from dataclasses import dataclass

import numpy as np

from utils.core.errors import ConfigError

SHOWN = 12  # more classes than this: the start-up line shows the head and the tail


@dataclass(frozen=True)
class BalanceOptions:
    """What the options ask of the class balance, read from them once (utils/config/settings.py)."""

    sampler: str  # --sampler: shuffle or balanced
    sampler_power: float
    class_weights: str  # --class_weights' spec
    logit_adjust: float
    pos_weight: str  # --pos_weight: auto (multi-label)


@dataclass
class Balance:
    """The class counts of the training split and the weights the options derive from them (None: not asked)."""

    counts: list = None  # training samples (multi-label: positives) of each class; None: not read (a stream)
    samples: int = None  # training samples
    sample_weights: list = None  # --sampler balanced: each sample's draw weight (unnormalised)
    class_weights: list = None  # --class_weights: each class's loss weight, mean 1 over the training samples
    log_prior: list = None  # --logit_adjust: log(count / samples) of each class,
    logit_adjust: float = None  # and its TAU, by which the loss scales it
    pos_weight: list = None  # --pos_weight auto (multi-label): each class's negatives over positives

    def results(self, class_names):
        """What results.json records of it."""
        named = {"train_class_counts": self.counts, "class_weights": self.class_weights, "pos_weight": self.pos_weight}
        return {key: dict(zip(class_names, value)) for key, value in named.items() if value is not None}


def needs_counts(options):
    """Whether an option derives from the class counts: only then does a stream, whose labels cannot be read without
    a pass over its shards, read them."""
    return options.sampler == "balanced" or bool(options.class_weights) or options.logit_adjust is not None or \
        options.pos_weight is not None


def read_balance(options, source, train, class_names, task, log=print):
    """The run's Balance: the counts of every training label (printed, head and tail), as the run's `task` counts its
    kind of labels (utils/evaluation/tasks.py), and the weights its BalanceOptions `options` ask for. A class without
    training samples has no weight or prior: --class_weights and --logit_adjust refuse it."""
    if not (source.labels_ahead or needs_counts(options)):
        return Balance()
    rows = source.labels(train)
    counts = task.class_counts(rows).astype(np.int64)
    log(counts_line(counts, class_names, task.counted))
    balance = Balance(counts=counts.tolist(), samples=len(rows))
    if options.sampler == "balanced":
        balance.sample_weights = sample_weights(task, rows, counts, options.sampler_power)
        log(sampler_line(balance.sample_weights, rows, counts, task))
    if options.class_weights or options.logit_adjust is not None:
        empty = [name for name, n in zip(class_names, counts) if n == 0]
        option = "class_weights" if options.class_weights else "logit_adjust"
        if empty:
            raise ConfigError(f"{option}: class {empty[0]!r} has no training samples ({len(empty)} such classes), "
                              f"so it has no weight or prior; drop the option or add samples of it")
    if options.class_weights:
        balance.class_weights = class_weights(counts, options.class_weights)
        log(f"class_weights {options.class_weights}: {', '.join(f'{w:.3g}' for w in balance.class_weights[:SHOWN])}"
            f"{' ...' if len(counts) > SHOWN else ''}")
    if options.logit_adjust is not None:
        balance.log_prior = np.log(counts / counts.sum()).tolist()
        balance.logit_adjust = options.logit_adjust
    if options.pos_weight == "auto":  # (multi-label data only: SingleLabel.REFUSED)
        balance.pos_weight = pos_weights(counts, len(rows))
        more = " ..." if len(counts) > 20 else ""
        log(f"pos_weight auto: {', '.join(f'{w:.3g}' for w in balance.pos_weight[:20])}{more} (positives "
            f"{', '.join(map(str, counts[:20].tolist()))}{more} of {len(rows)} training samples)")
    return balance


def counts_line(counts, class_names, counted="samples"):
    """The start-up line of the class counts (of training `counted`: samples, or multi-label positives), largest first
    (the head and the tail when there are many)."""
    order = np.argsort(-counts, kind="stable")
    pairs = [f"{class_names[i]} {counts[i]}" for i in order]
    shown = ", ".join(pairs) if len(pairs) <= SHOWN else f"{', '.join(pairs[:5])} ... {', '.join(pairs[-5:])}"
    low = counts[order[-1]]
    ratio = f"; head/tail {counts[order[0]] / low:.3g}x" if low else f"; {int((counts == 0).sum())} without samples"
    return f"class counts (training {counted}): {shown}{ratio}"


def sample_weights(task, rows, counts, power):
    """--sampler balanced: each sample's weight, its class's count ** -power; a multi-label sample's is its rarest
    label's (`task`'s sample_counts: a sample without labels counts as a class of its own, the samples without any)."""
    return (task.sample_counts(rows, counts).astype(np.float64) ** -power).tolist()


def sampler_line(weights, rows, counts, task):
    """How often --sampler balanced draws each class, expected per epoch (the share of drawn samples that carry it),
    against the split's shares."""
    weights = np.asarray(weights)
    drawn = task.class_counts(rows, weights / weights.sum())
    return (f"sampler balanced: expected share of an epoch per class {drawn.min():.3g} .. {drawn.max():.3g} "
            f"(the split's: {counts.min() / len(rows):.3g} .. {counts.max() / len(rows):.3g})")


def parse_class_weights(spec):
    """'balanced' -> None, 'effective:0.999' -> 0.999; anything else is a ValueError."""
    if spec == "balanced":
        return None
    kind, _, beta = spec.partition(":")
    try:
        value = float(beta)
    except ValueError:
        value = -1.0
    if kind != "effective" or not 0 <= value < 1:
        raise ValueError(f"{spec!r}: give balanced or effective:BETA with 0 <= BETA < 1 (e.g. effective:0.999)")
    return value


def class_weights(counts, spec):
    """--class_weights: balanced, inverse frequency; effective:BETA, the inverse of the effective number of samples
    (1 - BETA^n) / (1 - BETA) (Cui et al., CVPR 2019). Both scaled so that the mean weight over the training samples
    is 1 (sum of count x weight = samples), so the loss keeps plain cross-entropy's scale (the LR recipes carry
    over): balanced is then scikit-learn's compute_class_weight("balanced"), n_samples / (n_classes x count)."""
    counts = np.asarray(counts, dtype=np.float64)
    beta = parse_class_weights(spec)
    raw = 1 / counts if beta is None else (1 - beta) / (1 - beta ** counts)
    return (raw * counts.sum() / (raw * counts).sum()).tolist()


def pos_weights(positives, samples):
    """--pos_weight auto: each class's negatives over its positives in the training split (1 for a class without
    positives, which has nothing to weigh)."""
    return [float((samples - p) / p) if p else 1.0 for p in positives]


def check_options(options, data, need, bce_loss=False):
    """Sampling, weighing and the prior by class (`options`: BalanceOptions; `bce_loss`: timm's BCE the loss), and the
    data's (DataOptions) imbalance."""
    balanced = options.sampler == "balanced"
    need(options.sampler_power > 0, "sampler_power", "must be > 0")
    need(balanced or options.sampler_power == 1.0, "sampler_power", "applies to --sampler balanced")
    need(not balanced or not data.streaming, "sampler", "balanced draws samples with replacement, which "
         "a stream read in order cannot give; --class_weights or --logit_adjust balance a stream's loss instead")
    need(data.steps_per_epoch is None or data.streaming or balanced, "steps_per_epoch",
         "sets the epoch of --streaming data or of --sampler balanced (a shuffled epoch is one pass over the data)")
    if options.class_weights:
        try:
            parse_class_weights(options.class_weights)
        except ValueError as e:
            raise ConfigError(f"class_weights: {e}") from None
    need(options.logit_adjust is None or options.logit_adjust > 0, "logit_adjust", "must be > 0 (1: Menon et al.'s)")
    need(options.logit_adjust is None or not bce_loss, "logit_adjust", "adds the log-prior to softmax cross-entropy's "
         "logits; --bce_loss is one sigmoid per class: drop one of the two")
    need(data.imbalance is None or data.imbalance >= 1, "imbalance", "must be >= 1 (the head class's count over the "
         "tail's)")
