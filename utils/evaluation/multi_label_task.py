"""MultiLabel, the kind of labels of several classes a sample (utils/evaluation/label_kind.py says what a kind
provides): its data side (MultiHot); sigmoid; mAP, per-class AP, micro and macro precision/recall/F1 at --threshold,
exact match; its BCE losses and distillation term; what the report draws of it."""

import numpy as np
import torch
import torch.nn.functional as F

from utils.data.datasets.label_kinds import MultiHot, multi_hot_matrix
from utils.evaluation.calibration import calibration_bins, expected_calibration_error
from utils.evaluation.label_losses import multi_label_loss, sigmoid_distillation
from utils.evaluation.multi_label_figures import COUNTS, counts_at, multi_label_figures
from utils.evaluation.metrics import topk_for

PER_CLASS_LOG_MAX = 100  # more classes than this: per-class AP goes to results.json, not to every row
MULTI_SCALARS = ("threshold",)  # the multi-label figures beside the val_ ones that rows and results.json keep


class MultiLabel(MultiHot):
    """Several classes a sample (multi-hot targets): sigmoid probabilities, tracked by mAP.

    mAP is the mean over the classes that have a positive in the validation split of scikit-learn's
    average_precision_score (the area under each class's precision-recall steps); a class without positives
    has no AP and is counted in `val_map_classes_without_positives`. The loss is binary cross-entropy, summed
    over the classes of each sample as training sums it (no --pos_weight, no smoothing: the data's own loss, as
    validation scores
    plain cross-entropy for single-label runs)."""

    labels_text = "several labels"
    counted = "positives"
    note = " (multi-label)"
    clip_figure = "exact match"
    folder_fields = {"multi_label": True}  # its outputs are each class's own (a sigmoid, not a softmax)
    video_keys = ("val_map", "val_f1_micro", "val_f1_macro", "val_exact_match", "val_loss")
    distillation = staticmethod(sigmoid_distillation)
    thresholded = True  # each class predicted at its threshold
    exported = "probabilities"  # each class's own: a sigmoid in the exported graph

    # What the report shows of the classes (utils/reporting/report.py): each class's AP, and its counts at the
    # threshold; no confusion between classes
    class_table, class_picture, class_csv = "average_precision", "per_class_ap", "per_class_counts"
    calibrated = "decision on each class"  # what calibration.png's confidence is of

    @staticmethod
    def exported_output(logits):
        return logits.sigmoid()

    DEFAULT_TRACK = "map"  # the tracked figure without --track_metric
    TRACKED = {"map": ("val_map", "mAP"), "macro_f1": ("val_f1_macro", "macro F1")}
    UNTRACKED = "{} scores one label a sample; multi-label data tracks map or macro_f1"
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
                            "its own",
               "probe": "votes or fits one class a sample (kNN, a softmax head); not available for multi-label data "
                        "yet"}

    def __init__(self, num_classes, threshold=0.5, tta_kind=None, track="map"):
        super().__init__(num_classes)  # the multi-hot rows' width
        self.classes, self.threshold, self.tta = num_classes, threshold, tta_kind
        self.tracked, self.tracked_name = self.TRACKED[track]
        self.ema_keys = tuple(dict.fromkeys(("val_map", "val_f1_micro", "val_loss", "val_ece", "val_tuned_thresholds",
                                             self.tracked)))
        self.k = topk_for(num_classes)  # the probabilities predict.py lists beside the labels

    @classmethod
    def of(cls, num_classes, metrics=None, threshold=0.5, tta_kind=None, track="map"):
        """The run's kind (tasks.task_for): its labels decided at `threshold` (--metrics score one class a sample)."""
        return cls(num_classes, threshold, tta_kind, track)

    @staticmethod
    def loss(options, balance=None):
        return multi_label_loss(options, balance)

    def class_counts(self, rows, weights=None):
        """Each class's positives among the training samples (or the sum of their `weights`), of `rows`: lists of
        class indices (a sample counts once for each of its classes)."""
        matrix = multi_hot_matrix(rows, self.classes)
        return matrix.sum(axis=0, dtype=np.int64) if weights is None else (matrix * weights[:, None]).sum(axis=0)

    @staticmethod
    def sample_counts(rows, counts):
        """Each sample's rarest label's count (one without labels counts as a class of its own: the samples without
        any)."""
        unlabelled = sum(1 for row in rows if not len(row))
        return np.asarray([min(counts[c] for c in row) if len(row) else unlabelled for row in rows])

    def video_labels(self, videos):
        return torch.zeros((videos, self.classes), dtype=torch.uint8)

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

    # An export's parity (utils/export/parity.py): what its outputs are, how two models' answers agree, the score
    scored = "map"

    @staticmethod
    def exported_probabilities(output):
        """The exported graph outputs each class's probability already."""
        return output.float()

    @staticmethod
    def exported_logits(output):
        """The log-odds of the exported probabilities, what `outputs` gives (float64: 0 and 1 stay -inf and inf)."""
        p = output.double()
        return p.log() - (-p).log1p()

    @staticmethod
    def agree(probs, other, thresholds):
        """Each sample's answer the same under both models: its label set at each class's threshold."""
        cut = torch.as_tensor(thresholds, dtype=probs.dtype)
        return ((probs >= cut) == (other >= cut)).all(dim=1)

    def score(self, probs, targets):
        """mAP of the probabilities against the multi-hot targets (multi_label_figures')."""
        figures = multi_label_figures(probs.double().numpy(), targets.numpy().astype(bool), np.zeros(len(targets)),
                                      self.threshold)
        return figures["val_map"]

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
        return {**figures, "val_ece": expected_calibration_error(bins), "calibration_bins": bins,
                "label_kind": self.name}

    def samples(self, fields, index):
        """Each scored sample's dataset `index`, labels, the labels at the threshold, and its loss (top_losses)."""
        probs, targets, losses = fields
        return {"index": index.tolist(), "label": [row.nonzero().flatten().tolist() for row in targets],
                "predicted": [row.nonzero().flatten().tolist() for row in probs >= self.threshold],
                "probability": probs.tolist(), "loss": losses.tolist()}

    failure_columns = ("missed", "false")  # the labels it did not predict, those it predicted wrongly

    def decided(self, logits, targets):
        """(predicted, true) labels of a batch's samples, as label_text takes them: lists of class indices, those
        predicted at the threshold."""
        return ([row.nonzero().flatten().tolist() for row in logits.sigmoid() >= self.threshold],
                [row.nonzero().flatten().tolist() for row in targets])

    @staticmethod
    def label_text(label, class_names):
        """A label (a list of class indices) as their names, "(none)" for an all-negative sample."""
        return " ".join(class_names[c] for c in label) or "(none)"

    def failure_cells(self, samples, i, class_names):
        true, predicted = set(samples["label"][i]), set(samples["predicted"][i])
        return [self.label_text(sorted(true - predicted), class_names),
                self.label_text(sorted(predicted - true), class_names)]

    def failure_title(self, samples, i, class_names):
        missed, false = self.failure_cells(samples, i, class_names)
        return f"missed: {missed}\nfalse: {false}"

    @staticmethod
    def shown_probability(samples, i):
        return None  # one a class: none stands for the sample

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

    @staticmethod
    def confusion(figures):
        return None  # a sample's classes are not one class confused for another

    @staticmethod
    def tuned_thresholds(figures, threshold, ema):
        """Per-class thresholds of the weights the model folder holds (the EMA's with --model_ema), each class without
        positives in validation at the run's `threshold`."""
        tuned = figures.get("val_ema_tuned_thresholds" if ema else "val_tuned_thresholds")
        return None if tuned is None else [threshold if t is None else t for t in tuned]

    @staticmethod
    def curves(last):
        return [("val_map", "val mAP"), ("val_f1_micro", f"val F1 micro at {last['threshold']:g}")]

    @staticmethod
    def card_rows(results):
        rows = [("val mAP", results["val_map"]), (f"val F1 micro at {results['threshold']:g}", results["val_f1_micro"]),
                ("val F1 macro", results["val_f1_macro"]), ("val loss", results["val_loss"])]
        return rows + ([("val mAP, EMA weights", results["val_ema_map"])] if "val_ema_map" in results else [])

    @staticmethod
    def headline(results):
        return f"val mAP {results['val_map']:.4f}"

    def global_sums(self, figures):
        return {"samples": figures["val_samples"], "loss_sum": figures["loss_sum"],
                **{key: int(sum(figures[key])) for key in self.sum_keys[1:4]},
                "exact_matches": figures["exact_matches"]}
