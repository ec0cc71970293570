"""What validation scores, by the kind of labels a sample carries: one class (softmax; top-1, top-k, macro F1, the
confusion matrix) or several (sigmoid; mAP, per-class AP, micro and macro precision/recall/F1 at --threshold, exact
match). The loop asks the run's task (`task_for`) and never which one it holds.

Either way the figures come from the gathered per-sample outputs (utils/evaluation/scoring.py: padding dropped,
each sample once), never from per-rank means: mAP is a ranking over every sample's scores, which no sum of
per-rank figures gives. The per-rank files of --dump_rank_metrics keep the figures that are sums.
"""

import torch
import torch.nn.functional as F

from utils.evaluation import tta
from utils.evaluation.calibration import calibration_bins, expected_calibration_error
from utils.evaluation.multi_label_figures import COUNTS, counts_at, multi_label_figures
from utils.evaluation.metrics import figure_name, rank_sums, result_figures, summarize, topk_for, validation_row

PER_CLASS_LOG_MAX = 100  # more classes than this: per-class AP goes to results.json, not to every row
MULTI_SCALARS = ("threshold",)  # the multi-label figures beside the val_ ones that rows and results.json keep


class SingleLabel:
    """One class a sample: the figures of utils/evaluation/metrics.py, tracked by top-1 (or --track_metric's)."""

    multi_label = False
    # --track_metric: the figure --keep_best, --early_stop and best/ follow (the EMA's with --model_ema), its name
    TRACKED = {"top1": ("val_top1", "top-1"), "balanced_accuracy": ("val_balanced_accuracy", "balanced accuracy"),
               "macro_f1": ("val_macro_f1", "macro F1")}
    sum_keys = ("correct_top1", "correct_topk", "loss_sum")  # --dump_rank_metrics: what adds up over ranks
    # Options for the other kind of labels, each refused with data of this kind (utils/config/labels.py), and why.
    REFUSED = {"pos_weight": "weighs the positives of multi-label data; one-label-a-sample data has none to weigh",
               "multi_label_loss": "is for multi-label data (samples with lists of labels)",
               "threshold": "is for multi-label data (samples with lists of labels)"}

    def __init__(self, metrics, num_classes, tta_kind=None, track="top1"):
        self.metrics, self.classes, self.k, self.tta = metrics, num_classes, topk_for(num_classes), tta_kind
        self.tracked, self.tracked_name = self.TRACKED[track]
        # what validation also reports of the averaged weights (the tracked figure among them)
        self.ema_keys = tuple(dict.fromkeys(("val_top1", "val_topk", "val_loss", "val_balanced_accuracy", "val_ece",
                                             self.tracked)))

    def outputs(self, model, pixels):
        """Logits (with --tta flip: the log of the averaged softmax, which reads the same way)."""
        return tta.scores(model, pixels, self.tta)

    def probabilities(self, model, pixels):
        """Class probabilities (softmax), as predict.py lists them."""
        return self.activate(self.outputs(model, pixels))

    @staticmethod
    def activate(logits):
        return logits.softmax(dim=1)

    def clip_hits(self, probs, labels):
        """The multi-view test's clips whose own top class is right."""
        return int((probs.argmax(dim=1) == labels).sum())

    def averaged_fields(self, probs, labels):
        """The fields of videos scored by their averaged (float64) probabilities: the loss is the NLL of the mean."""
        return probs.topk(self.k, dim=1).indices, labels, -probs.gather(1, labels[:, None]).squeeze(1).clamp(
            min=1e-12).log(), probs.max(dim=1).values

    def fields(self, logits, labels):
        """Per-sample tensors to gather: the top-k classes, the label, the cross-entropy, the top class's probability
        (what calibration is measured on)."""
        return (logits.topk(self.k, dim=1).indices, labels, F.cross_entropy(logits, labels, reduction="none"),
                logits.float().softmax(dim=1).max(dim=1).values)

    def figures(self, fields):
        """The figures of utils/evaluation/metrics.py, and the calibration of the top class's probability: val_ece
        and its bins (utils/evaluation/calibration.py)."""
        ranked, labels, losses, confidence = fields
        figures = summarize(self.metrics, ranked, labels, losses, self.k, self.classes)
        bins = calibration_bins(confidence, ranked[:, 0] == labels)
        return {**figures, "val_ece": expected_calibration_error(bins), "calibration_bins": bins}

    def samples(self, fields, index):
        """Each scored sample's dataset `index`, label, prediction, its probability, the true class's and the loss:
        what top_losses.csv and .png show (utils/reporting/failures.py)."""
        ranked, labels, losses, confidence = fields
        return {"index": index.tolist(), "label": labels.tolist(), "predicted": ranked[:, 0].tolist(),
                "probability": confidence.tolist(), "true_probability": (-losses.double()).exp().tolist(),
                "loss": losses.tolist()}

    def own(self, fields, owners, rank):
        return rank_sums(*fields[:3], owners, rank, self.k)

    def line(self, figures):
        return (f"top-1 {figures['val_top1']:.4f} top-{self.k} {figures['val_topk']:.4f} macro F1 "
                f"{figures['val_macro_f1']:.4f} balanced {figures['val_balanced_accuracy']:.4f} worst class "
                f"{figures['val_worst_recall']:.4f} loss {figures['val_loss']:.4f}")

    def ema_line(self, figures):
        return (f"; EMA top-1 {figures['val_ema_top1']:.4f} balanced {figures['val_ema_balanced_accuracy']:.4f} "
                f"loss {figures['val_ema_loss']:.4f}")

    def row(self, figures, class_names):
        return validation_row(figures, class_names)

    def results(self, figures, class_names):
        calibrated = {key: figures[key] for key in ("temperature", "temperature_halves") if key in figures}  # --calibrate
        return {**result_figures(figures, class_names), "calibration_bins": figures["calibration_bins"], **calibrated}

    def global_sums(self, figures):
        """What the per-rank sums of --dump_rank_metrics add up to (eval/.../global.json)."""
        return {"samples": figures["val_samples"], **{key: figures[key] for key in self.sum_keys}}


class MultiLabel:
    """Several classes a sample (multi-hot targets): sigmoid probabilities, tracked by mAP.

    mAP is the mean over the classes that have a positive in the validation split of scikit-learn's
    average_precision_score (the area under each class's precision-recall steps); a class without positives
    has no AP and is counted in `val_map_classes_without_positives`. The loss is binary cross-entropy, summed
    over the classes of each sample as training sums it (no --pos_weight, no smoothing: the data's own loss, as
    validation scores
    plain cross-entropy for single-label runs)."""

    multi_label = True
    TRACKED = {"map": ("val_map", "mAP"), "macro_f1": ("val_f1_macro", "macro F1")}
    sum_keys = ("loss_sum", "true_positives", "false_positives", "false_negatives", "exact_matches")
    REFUSED = {"bce_loss": "multi-label data trains with binary cross-entropy per class already",
               "bce_target_thresh": "binarises --bce_loss's one-hot targets; multi-label targets are 0/1 already",
               "metrics": "scores one predicted class a sample; multi-label runs report mAP, per-class AP, precision, "
                          "recall and F1 at --threshold",
               "class_weights": "weighs one label a sample; multi-label data weighs each class's positives with "
                                "--pos_weight auto",
               "logit_adjust": "adds the log-prior of one class a sample to softmax logits; multi-label data has a "
                               "sigmoid a class",
               "calibrate": "fits one temperature to a softmax's logits; multi-label data has a sigmoid a class, each "
                            "its own"}

    def __init__(self, num_classes, threshold=0.5, tta_kind=None, track="map"):
        self.classes, self.threshold, self.tta = num_classes, threshold, tta_kind
        self.tracked, self.tracked_name = self.TRACKED[track]
        self.ema_keys = tuple(dict.fromkeys(("val_map", "val_f1_micro", "val_loss", "val_ece", "val_tuned_thresholds",
                                             self.tracked)))
        self.k = topk_for(num_classes)  # the probabilities predict.py lists beside the labels

    def outputs(self, model, pixels):
        """Logits; with --tta flip the log-odds of the sigmoid probabilities averaged with the flipped view's."""
        logits = model(pixels).float()
        if self.tta is None:
            return logits
        mean = (logits.sigmoid() + model(pixels.flip(-1)).float().sigmoid()) / 2
        return mean.log() - (-mean).log1p()

    def probabilities(self, model, pixels):
        """Each class's sigmoid probability (with --tta flip: averaged over the two views)."""
        return self.activate(self.outputs(model, pixels))

    @staticmethod
    def activate(logits):
        return logits.sigmoid()

    def clip_hits(self, probs, targets):
        """The multi-view test's clips whose own labels at the threshold are exactly right."""
        return int(((probs >= self.threshold) == targets.bool()).all(dim=1).sum())

    def averaged_fields(self, probs, targets):
        """The fields of videos scored by their averaged probabilities: the BCE of the mean, summed over classes."""
        p = probs.clamp(1e-12, 1 - 1e-12)
        loss = -(targets * p.log() + (1 - targets.double()) * (-p).log1p()).sum(dim=1)
        return probs, targets, loss

    def fields(self, logits, targets):
        """Per-sample tensors to gather: the class probabilities, the multi-hot targets, the BCE."""
        loss = F.binary_cross_entropy_with_logits(logits, targets.float(), reduction="none").sum(dim=1)
        return logits.sigmoid(), targets.to(torch.uint8), loss

    def figures(self, fields):
        """Those of multi_label_figures, and the calibration of every class's decision: each (sample, class) pair
        a binary prediction at the threshold, its confidence max(p, 1 - p) (utils/evaluation/calibration.py)."""
        probs, targets, losses = fields
        figures = multi_label_figures(probs.double().numpy(), targets.numpy().astype(bool),
                                      losses.double().numpy(), self.threshold)
        decided = probs >= self.threshold
        bins = calibration_bins(torch.where(decided, probs, 1 - probs).flatten(),
                                (decided == targets.bool()).flatten())
        return {**figures, "val_ece": expected_calibration_error(bins), "calibration_bins": bins}

    def samples(self, fields, index):
        """Each scored sample's dataset `index`, labels, the labels at the threshold, and its loss (top_losses)."""
        probs, targets, losses = fields
        return {"index": index.tolist(), "label": [row.nonzero().flatten().tolist() for row in targets],
                "predicted": [row.nonzero().flatten().tolist() for row in probs >= self.threshold],
                "probability": probs.tolist(), "loss": losses.tolist()}

    def own(self, fields, owners, rank):
        probs, targets, losses = fields
        mine = (owners == rank).numpy()
        counts = counts_at(probs.numpy()[mine], targets.numpy()[mine].astype(bool), self.threshold)
        return {"samples": int(mine.sum()), "loss_sum": float(losses.double().numpy()[mine].sum()),
                **{key: int(value.sum()) for key, value in counts.items() if key != "exact_matches"},
                "exact_matches": int(counts["exact_matches"])}

    def line(self, figures):
        return (f"mAP {figures['val_map']:.4f} F1 micro {figures['val_f1_micro']:.4f} macro "
                f"{figures['val_f1_macro']:.4f} exact {figures['val_exact_match']:.4f} loss {figures['val_loss']:.4f}")

    def ema_line(self, figures):
        return f"; EMA mAP {figures['val_ema_map']:.4f} loss {figures['val_ema_loss']:.4f}"

    def row(self, figures, class_names):
        row = {key: value for key, value in figures.items()
               if (key in MULTI_SCALARS or key.startswith("val_")) and not isinstance(value, list)}
        if len(class_names) <= PER_CLASS_LOG_MAX:
            for name, ap in zip(class_names, figures["per_class_ap"]):
                if ap is not None:  # a class without positives in validation has no AP
                    row[f"val_class_ap/{name.replace('/', '_')}"] = ap
        return row

    def results(self, figures, class_names):
        scalars = {key: value for key, value in figures.items()
                   if (key in MULTI_SCALARS or key.startswith("val_")) and not isinstance(value, list)}
        return {**scalars, "calibration_bins": figures["calibration_bins"],
                "per_class_ap": dict(zip(class_names, figures["per_class_ap"])),
                "per_class_tuned_threshold": dict(zip(class_names, figures["val_tuned_thresholds"])),
                "per_class_positives": dict(zip(class_names, figures["class_support"])),
                "per_class_counts": {name: {key: figures[key][i] for key in COUNTS}
                                     for i, name in enumerate(class_names)}}

    def global_sums(self, figures):
        return {"samples": figures["val_samples"], "loss_sum": figures["loss_sum"],
                **{key: int(sum(figures[key])) for key in self.sum_keys[1:4]},
                "exact_matches": figures["exact_matches"]}


def tuned_thresholds(figures, threshold, ema):
    """Per-class thresholds of the weights the model folder holds (the EMA's with --model_ema), each class without
    positives in validation at the run's `threshold`; None for single-label figures."""
    tuned = figures.get("val_ema_tuned_thresholds" if ema else "val_tuned_thresholds")
    return None if tuned is None else [threshold if t is None else t for t in tuned]


def task_for(multi_label, num_classes, metrics=None, threshold=0.5, tta_kind=None, track=None):
    """The run's task: MultiLabel when the data's samples carry several labels (the source says), else SingleLabel.
    (`metrics`: the evaluate modules that score single-label figures; predict.py needs none. `track`:
    --track_metric, checked against the kind by utils/config/labels.py; None: top1, or map.)"""
    if multi_label:
        return MultiLabel(num_classes, threshold, tta_kind, track or "map")
    return SingleLabel(metrics, num_classes, tta_kind, track or "top1")


def tracked_key(task, ema):
    """The figure best/, --keep_best and --early_stop follow: the task's, of the EMA with --model_ema."""
    return figure_name(task.tracked, ema=True) if ema else task.tracked

