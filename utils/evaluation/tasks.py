"""The kinds of labels (utils/evaluation/label_kind.py says what a kind provides): one class a sample (SingleLabel:
softmax; top-1, top-k, macro F1, the confusion matrix) or several (MultiLabel: sigmoid; mAP, per-class AP, micro and
macro precision/recall/F1 at --threshold, exact match). Here are the one factory of the run's kind (task_for) and the
one reader of the kind a run recorded (recorded_kind). The loop asks the run's kind and never which one it holds; so
do the data, training (its loss, its class counts), the teacher, the records and the report.

Either way the figures come from the gathered per-sample outputs (utils/evaluation/scoring.py: padding dropped,
each sample once), never from per-rank means: mAP is a ranking over every sample's scores, which no sum of
per-rank figures gives. The per-rank files of --dump_rank_metrics keep the figures that are sums.
"""

import json
from pathlib import Path

from utils.evaluation.metrics import figure_name
from utils.evaluation.multi_label_task import MultiLabel
from utils.evaluation.single_label_task import SingleLabel

__all__ = ["MultiLabel", "SingleLabel", "figures_kind", "kind_named", "read_kind", "recorded_kind", "task_for",
           "task_kind", "tracked_key", "tuned_thresholds"]

KINDS = {kind.name: kind for kind in (SingleLabel, MultiLabel)}  # by the name run.json and the figures give


def kind_named(name):
    """The kind of labels of this name (single_label, multi_label)."""
    return KINDS[name]


def task_kind(multi_label):
    """The kind of data whose samples carry several labels (`multi_label`: a data side's flag) or one."""
    return kind_named(MultiLabel.name if multi_label else SingleLabel.name)


def task_for(multi_label, num_classes, metrics=None, threshold=0.5, tta_kind=None, track=None):
    """The run's kind: MultiLabel when the data's samples carry several labels (the source says), else SingleLabel.
    (`metrics`: the evaluate modules that score single-label figures; predict.py needs none. `track`:
    --track_metric, checked against the kind by utils/config/labels.py; None: top1, or map.)"""
    kind = task_kind(multi_label)
    return kind.of(num_classes, metrics=metrics, threshold=threshold, tta_kind=tta_kind,
                   track=track or kind.DEFAULT_TRACK)


def recorded_kind(record):
    """The kind of labels a run's record (run.json, as a dict) names: its "label_kind"; a record written before the
    kind was named says it by its bool "multi_label" (absent: one label a sample)."""
    if "label_kind" in record:
        return kind_named(record["label_kind"])
    return task_kind(record.get("multi_label", False))


def read_kind(run_dir):
    """The kind of labels of the run in folder `run_dir`, as its run.json records it (recorded_kind)."""
    return recorded_kind(json.loads((Path(run_dir) / "run.json").read_text()))


def figures_kind(figures):
    """The kind of labels whose validation `figures` these are (its `figures` names it): what reporting asks."""
    return kind_named(figures["label_kind"])


def tuned_thresholds(figures, threshold, ema):
    """Per-class thresholds of the weights the model folder holds (the EMA's with --model_ema), each class without
    positives in validation at the run's `threshold`; None for single-label figures."""
    return figures_kind(figures).tuned_thresholds(figures, threshold, ema)


def tracked_key(task, ema):
    """The figure best/, --keep_best and --early_stop follow: the task's, of the EMA with --model_ema."""
    return figure_name(task.tracked, ema=True) if ema else task.tracked


def tracked_figure(kind, track=None, ema=False):
    """The figure a run tracks, named as its validation rows name it: that of its `kind` of labels (recorded_kind)
    for --track_metric `track` (None: the kind's default), the EMA's with `ema`; what tracked_key says of the run's
    task, for a reader of its files (tune.py)."""
    key = kind.TRACKED[track or kind.DEFAULT_TRACK][0]
    return figure_name(key, ema=True) if ema else key
