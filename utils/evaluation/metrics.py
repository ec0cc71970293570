"""Validation figures of gathered per-sample results (utils/evaluation/class_figures.py, and the `evaluate` metrics
--metrics adds): sums first, never a mean of means."""

import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from utils.core.errors import UserError
from utils.core.io import write_json_atomic
from utils.evaluation.class_figures import class_scores, confusion_matrix, topk_accuracy

PER_CLASS_LOG_MAX = 100  # more classes than this: per-class accuracy goes to results.json, not to every row
RESERVED = ("top1", "topk", "loss", "samples", "macro", "class_acc")  # --metrics labels the built-in figures use


class MetricError(UserError):
    """A --metrics name that cannot be loaded or cannot score class predictions."""


@dataclass
class Metrics:
    """The `evaluate` metrics --metrics adds to the built-in figures: label -> (module, compute kwargs)."""

    extra: dict = field(default_factory=dict)


def parse_metric_spec(spec):
    """'f1:average=macro,beta=0.5' -> ('f1', {'average': 'macro', 'beta': 0.5}); values read as YAML scalars."""
    name, _, options = spec.partition(":")
    kwargs = {}
    for option in filter(None, options.split(",")):
        key, eq, value = option.partition("=")
        if not eq or not key:
            raise MetricError(f"metrics: {spec!r}: options go as NAME:KEY=VALUE[,KEY=VALUE], e.g. f1:average=macro")
        kwargs[key.strip()] = yaml.safe_load(value)
    if not name:
        raise MetricError(f"metrics: {spec!r} names no metric")
    return name, kwargs


def load_metrics(specs=()):
    """The --metrics `specs` loaded (from the Hub, its cache or a local module folder); evaluate is imported only for
    them."""
    metrics = Metrics()
    if specs:
        import evaluate
    for spec in specs or ():
        name, kwargs = parse_metric_spec(spec)
        try:
            module = evaluate.load(name, keep_in_memory=True)  # no cache file: no lock shared by processes
        except Exception as e:  # evaluate raises FileNotFoundError, ConnectionError, ImportError, ...
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise MetricError(f"metrics: cannot load {name!r} ({reason}); offline, a Hub metric must be in the "
                              f"cache (load it once online) or given as a local module folder") from None
        try:  # three classes: a binary-only setup fails here, not after the first epoch
            module.compute(predictions=[0, 1, 2, 2], references=[0, 1, 2, 1], **kwargs)
        except Exception as e:
            raise MetricError(f"metrics: {name!r} cannot score class predictions ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); pass options as {name}:KEY=VALUE, "
                              f"e.g. f1:average=macro") from None
        label = Path(name).name
        if label in metrics.extra or any(label == r or label.startswith(f"{r}_") for r in RESERVED):
            raise MetricError(f"metrics: {spec!r} would be logged as val_{label}, which "
                              f"{'another entry' if label in metrics.extra else 'a built-in figure'} already is; "
                              f"give each metric once (its options pick one variant)")
        metrics.extra[label] = (module, kwargs)
    return metrics


def sums(ranked, labels, losses, k):
    """Counts and loss sum of a set of samples (ranked: [N, >=k] class indices, best first)."""
    hits = ranked[:, :k] == labels[:, None]
    return {"samples": int(labels.numel()),
            "correct_top1": int(hits[:, 0].sum()),
            "correct_topk": int(hits.any(dim=1).sum()),
            "loss_sum": float(losses.double().sum())}


def summarize(metrics, ranked, labels, losses, k, num_classes):
    """Global validation figures of gathered per-sample results: the built-in ones (utils/evaluation/class_figures.py)
    and those of --metrics' `evaluate` modules (Metrics `metrics`)."""
    refs, preds = labels.tolist(), ranked[:, 0].tolist()
    top1 = topk_accuracy(ranked[:, :1].tolist(), refs, k=1)
    topk = topk_accuracy(ranked[:, :k].tolist(), refs, k=k)
    scores = class_scores(preds, refs, num_classes)
    matrix = confusion_matrix(preds, refs, num_classes)
    n = len(refs)
    loss_sum = float(losses.double().sum())
    figures = {"val_top1": top1["accuracy"], "val_topk": topk["accuracy"], "topk": k,
               "val_loss": loss_sum / max(n, 1), "val_samples": n,
               "val_macro_f1": scores["macro_f1"], "val_macro_precision": scores["macro_precision"],
               "val_macro_recall": scores["macro_recall"], "val_balanced_accuracy": scores["balanced_accuracy"],
               "val_worst_recall": scores["worst_recall"],
               "correct_top1": top1["correct"], "correct_topk": topk["correct"], "loss_sum": loss_sum,
               "per_class_accuracy": scores["recall"], "class_support": scores["support"],
               "confusion_matrix": matrix}
    for label, (module, kwargs) in metrics.extra.items():
        try:
            scores = module.compute(predictions=preds, references=refs, **kwargs)
        except Exception as e:  # it passed the start-up check, but real predictions differ
            raise MetricError(f"metrics: {label!r} failed on the validation predictions ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); checkpoints so far are kept; "
                              f"drop it or change its options") from None
        for key, value in scores.items():
            if isinstance(value, numbers.Real):  # lists and strings have no place on a curve
                figures[f"val_{label}" if key == label else f"val_{label}_{key}"] = float(value)
    return figures


def figure_name(key, scope=None, ema=False):
    """Figure `key` (`<scope>_<what>`: val_top1, video_top1, clip_top1) as another `scope` reports it (val, video),
    and of the EMA's weights with `ema`: figure_name("val_top1", "video", ema=True) is "video_ema_top1"."""
    own, what = key.split("_", 1)
    return f"{scope or own}_{'ema_' * ema}{what}"


# What a figure can be, by its name without scope and EMA (figure_name): a share of samples or of classes, or a loss or
# a count. --metrics' own figures have no range known here.
SHARES = ("top1", "topk", "ece", "balanced_accuracy", "worst_recall", "macro_f1", "macro_precision", "macro_recall",
          "map", "f1_macro", "f1_micro", "precision_macro", "precision_micro", "recall_macro", "recall_micro",
          "exact_match")
COUNTS_AND_LOSSES = ("loss", "samples", "map_classes", "map_classes_without_positives", "videos", "clips_scored")


def figure_range(key):
    """(lowest, highest) that figure `key` of results.json can be: (0, 1) for a share, (0, inf) for a loss or a count;
    None when not known (--metrics' figures)."""
    what = key.split("_", 1)[1] if key.startswith(("val_", "video_", "clip_", "test_")) else key
    what = what.removeprefix("ema_")
    if what in SHARES:
        return 0.0, 1.0
    return (0.0, math.inf) if what in COUNTS_AND_LOSSES else None


SCALARS = ("val_top1", "val_topk", "topk", "val_loss", "val_samples", "val_macro_f1", "val_macro_precision",
           "val_macro_recall")


def validation_row(figures, class_names):
    """The scalars a validation logs (metrics.jsonl and dashboards alike), per-class accuracy included."""
    row = {key: value for key, value in figures.items() if key in SCALARS or key.startswith("val_")}
    if len(class_names) <= PER_CLASS_LOG_MAX:
        for name, accuracy in zip(class_names, figures["per_class_accuracy"]):
            if accuracy is not None:  # a class with no validation images has no accuracy
                row[f"val_class_acc/{name.replace('/', '_')}"] = accuracy
    return row


def result_figures(figures, class_names):
    """What results.json says of the final validation."""
    extra = {key: value for key, value in figures.items() if key.startswith("val_") and key not in SCALARS}
    return {**{key: figures[key] for key in SCALARS[:5]}, **extra,
            "macro_f1": figures["val_macro_f1"], "macro_precision": figures["val_macro_precision"],
            "macro_recall": figures["val_macro_recall"],
            "per_class_accuracy": dict(zip(class_names, figures["per_class_accuracy"])),
            "per_class_images": dict(zip(class_names, figures["class_support"]))}


def rank_sums(ranked, labels, losses, owners, rank, k):
    """The sums of the samples that `rank` itself scored (padding already dropped by the gather)."""
    mine = owners == rank
    return sums(ranked[mine], labels[mine], losses[mine], k)


def dump_rank_sums(folder, global_sums, own, accelerator):
    """GluonCV's per-rank eval files, made right: sums that add up exactly to global.json (`global_sums`: the
    task's, utils/evaluation/tasks.py)."""
    write_json_atomic(folder / f"rank_{accelerator.process_index}.json", own)
    if accelerator.is_main_process:
        write_json_atomic(folder / "global.json", global_sums)


def topk_for(num_classes):
    """k of the top-k figure: 5, or the class count when smaller (computed, never set to 100 % by hand)."""
    return min(5, num_classes)
