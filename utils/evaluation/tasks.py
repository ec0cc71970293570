"""What validation scores, by the kind of labels a sample carries: one class (softmax; top-1, top-k, macro F1, the
confusion matrix) or several (sigmoid; mAP, per-class AP, micro and macro precision/recall/F1 at --threshold, exact
match). The loop asks the run's task (`task_for`) and never which one it holds; so do training (its loss, its class
counts), the teacher and the records. What a task answers (SingleLabel in single_label_task.py, MultiLabel in
multi_label_task.py):

    multi_label, labels_text, counted, note, clip_figure   its kind, and how lines name it
    REFUSED           {option: why} of the options for the other kind (utils/config/labels.py refuses them)
    loss(options, balance), distillation(kind, student, teacher, T)   its training loss and DeiT's term, per sample
    class_counts(rows, weights), sample_counts(rows, counts)   its labels counted per class, and per sample
    outputs, probabilities, activate   the model's scores of a batch, and as probabilities
    fields, figures, samples, own, row, results, line, ema_line, global_sums   validation's figures and records
    decided, label_text   a batch's predicted and true labels, and a label as the lines and tables write it
    thresholded, exported, exported_output   how predict.py decides labels and what an exported graph outputs
    clip_hits, averaged_fields, video_labels, video_keys   the multi-view test's
    folder_fields     what a model folder's config says of the kind

Either way the figures come from the gathered per-sample outputs (utils/evaluation/scoring.py: padding dropped,
each sample once), never from per-rank means: mAP is a ranking over every sample's scores, which no sum of
per-rank figures gives. The per-rank files of --dump_rank_metrics keep the figures that are sums.
"""

from utils.evaluation.metrics import figure_name
from utils.evaluation.multi_label_task import MultiLabel
from utils.evaluation.single_label_task import SingleLabel

__all__ = ["MultiLabel", "SingleLabel", "task_for", "task_kind", "tracked_key", "tuned_thresholds"]


def tuned_thresholds(figures, threshold, ema):
    """Per-class thresholds of the weights the model folder holds (the EMA's with --model_ema), each class without
    positives in validation at the run's `threshold`; None for single-label figures."""
    tuned = figures.get("val_ema_tuned_thresholds" if ema else "val_tuned_thresholds")
    return None if tuned is None else [threshold if t is None else t for t in tuned]


def task_kind(multi_label):
    """The task class of data whose samples carry several labels (`multi_label`) or one."""
    return MultiLabel if multi_label else SingleLabel


def task_for(multi_label, num_classes, metrics=None, threshold=0.5, tta_kind=None, track=None):
    """The run's task: MultiLabel when the data's samples carry several labels (the source says), else SingleLabel.
    (`metrics`: the evaluate modules that score single-label figures; predict.py needs none. `track`:
    --track_metric, checked against the kind by utils/config/labels.py; None: top1, or map.)"""
    if multi_label:
        return MultiLabel(num_classes, threshold, tta_kind, track or MultiLabel.DEFAULT_TRACK)
    return SingleLabel(metrics, num_classes, tta_kind, track or SingleLabel.DEFAULT_TRACK)


def tracked_key(task, ema):
    """The figure best/, --keep_best and --early_stop follow: the task's, of the EMA with --model_ema."""
    return figure_name(task.tracked, ema=True) if ema else task.tracked



def tracked_figure(multi_label, track=None, ema=False):
    """The figure a run tracks, named as its validation rows name it: that of its kind's task (several labels a
    sample: `multi_label`) for --track_metric `track` (None: the kind's default), the EMA's with `ema`; what
    tracked_key says of the run's task, for a reader of its files (tune.py)."""
    kind = task_kind(multi_label)
    key = kind.TRACKED[track or kind.DEFAULT_TRACK][0]
    return figure_name(key, ema=True) if ema else key
