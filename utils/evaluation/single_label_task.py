"""SingleLabel, the kind of labels of one class a sample (utils/evaluation/label_kind.py says what a kind provides):
its data side (ClassIndex); softmax; top-1, top-k, macro F1, balanced accuracy, the confusion matrix; its cross-entropy
losses and distillation term; what the report draws of it."""

import numpy as np
import torch
import torch.nn.functional as F

from utils.data.datasets.label_kinds import ClassIndex
from utils.evaluation import tta
from utils.evaluation.calibration import calibration_bins, expected_calibration_error
from utils.evaluation.label_losses import single_label_loss, softmax_distillation
from utils.evaluation.metrics import rank_sums, result_figures, summarize, topk_for, validation_row


class SingleLabel(ClassIndex):
    """One class a sample: the figures of utils/evaluation/metrics.py, tracked by top-1 (or --track_metric's)."""

    labels_text = "one label"  # what a sample carries, as lines say it
    counted = "samples"  # what its class counts count
    note = ""  # beside the class count in the start-up line
    clip_figure = "top-1"  # the multi-view test's figure of each clip's own prediction
    folder_fields = {}  # what a model folder's config says of the kind (utils/reporting/model_folder.py)
    video_keys = ("val_top1", "val_topk", "val_loss", "val_macro_f1", "val_balanced_accuracy", "val_worst_recall")
    distillation = staticmethod(softmax_distillation)  # DeiT's term, per sample, of a teacher's logits
    thresholded = False  # its prediction is the top class, not each class's at a threshold
    exported = "logits"  # what its exported graph outputs (predict.py --export_onnx)
    exported_output = None  # the logits as they are
    # What the report shows of the classes (utils/reporting/report.py): accuracy a class, the confusion matrix
    class_table, class_picture, class_csv = "accuracy", "confusion_matrix", "confusion_matrix"
    calibrated = "top-class probability"  # what calibration.png's confidence is of
    # --track_metric: the figure --keep_best, --early_stop and best/ follow (the EMA's with --model_ema), its name
    DEFAULT_TRACK = "top1"  # the tracked figure without --track_metric
    TRACKED = {"top1": ("val_top1", "top-1"), "balanced_accuracy": ("val_balanced_accuracy", "balanced accuracy"),
               "macro_f1": ("val_macro_f1", "macro F1")}
    UNTRACKED = ("{} ranks each class's sigmoid scores of multi-label data; one label a sample tracks top1, "
                 "balanced_accuracy or macro_f1")  # --track_metric of the other kind
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

    @classmethod
    def of(cls, num_classes, metrics=None, threshold=None, tta_kind=None, track="top1"):
        """The run's kind (tasks.task_for): scored by `metrics` (no --threshold: the top class is the prediction)."""
        return cls(metrics, num_classes, tta_kind, track)

    @staticmethod
    def loss(options, balance=None):
        """The training loss of these labels that LossOptions `options` ask for (utils/evaluation/label_losses.py)."""
        return single_label_loss(options, balance)

    def class_counts(self, rows, weights=None):
        """Each class's training samples (or the sum of their `weights`), of `rows`: class indices."""
        return np.bincount(np.asarray(rows, dtype=np.int64), weights=weights, minlength=self.classes)

    @staticmethod
    def sample_counts(rows, counts):
        """Each sample's class's count, of `counts` (class_counts'): what --sampler balanced weighs it by."""
        return counts[np.asarray(rows, dtype=np.int64)]

    @staticmethod
    def video_labels(videos):
        """The multi-view test's store of each video's label (-1 until a clip of it is scored)."""
        return torch.full((videos,), -1, dtype=torch.int64)

    def outputs(self, model, pixels):
        """Logits (with --tta flip: the log of the averaged softmax, which reads the same way)."""
        return tta.scores(model, pixels, self.tta)

    def probabilities(self, model, pixels):
        """Class probabilities (softmax), as predict.py lists them."""
        return self.activate(self.outputs(model, pixels))

    @staticmethod
    def activate(logits):
        return logits.softmax(dim=1)

    # An export's parity (utils/export/parity.py): what its outputs are, how two models' answers agree, the score
    scored = "top1"

    @staticmethod
    def exported_probabilities(output):
        """The probabilities of what the exported graph outputs (`exported`)."""
        return output.float().softmax(dim=1)

    @staticmethod
    def exported_logits(output):
        """What `outputs` gives, of the exported graph's output: predict.py's scoring of an export."""
        return output.float()

    @staticmethod
    def agree(probs, other, thresholds=None):
        """Each sample's answer the same under both models: its top class."""
        return probs.argmax(dim=1) == other.argmax(dim=1)

    @staticmethod
    def score(probs, labels):
        """Top-1 of the probabilities against the labels."""
        return float((probs.argmax(dim=1) == labels).double().mean()) if len(labels) else 0.0

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
        return {**figures, "val_ece": expected_calibration_error(bins), "calibration_bins": bins,
                "label_kind": self.name}

    def samples(self, fields, index):
        """Each scored sample's dataset `index`, label, prediction, its probability, the true class's and the loss:
        what top_losses.csv and .png show (utils/reporting/failures.py)."""
        ranked, labels, losses, confidence = fields
        return {"index": index.tolist(), "label": labels.tolist(), "predicted": ranked[:, 0].tolist(),
                "probability": confidence.tolist(), "true_probability": (-losses.double()).exp().tolist(),
                "loss": losses.tolist()}

    failure_columns = ("probability", "true_probability")  # top_losses.csv's, beside the labels

    @staticmethod
    def decided(logits, labels):
        """(predicted, true) labels of a batch's samples, as label_text takes them: class indices."""
        return logits.argmax(dim=1).tolist(), labels.tolist()

    @staticmethod
    def label_text(label, class_names):
        """A label (a class index) as its class's name."""
        return class_names[label]

    @staticmethod
    def failure_cells(samples, i, class_names):
        """top_losses.csv's failure_columns of sample `i` of `samples`."""
        return [f"{samples['probability'][i]:.6f}", f"{samples['true_probability'][i]:.6f}"]

    @staticmethod
    def failure_title(samples, i, class_names):
        """top_losses.png's title of sample `i`: its true and predicted classes and their probabilities."""
        true, predicted = class_names[samples["label"][i]], class_names[samples["predicted"][i]]
        return (f"true {true} / pred {predicted}\n"
                f"p {samples['probability'][i]:.2f}, true p {samples['true_probability'][i]:.2f}")

    @staticmethod
    def shown_probability(samples, i):
        """The probability the table of predictions shows of sample `i`: its predicted class's."""
        return samples["probability"][i]

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
        calibrated = {key: figures[key] for key in ("temperature", "temperature_halves")
                      if key in figures}  # --calibrate
        return {**result_figures(figures, class_names), "calibration_bins": figures["calibration_bins"], **calibrated}

    @staticmethod
    def confusion(figures):
        """The confusion matrix (true x predicted counts)."""
        return figures["confusion_matrix"]

    @staticmethod
    def tuned_thresholds(figures, threshold, ema):
        return None  # the top class is the prediction: no threshold

    @staticmethod
    def curves(last):
        k = last.get("topk", 5)  # (a row written before the rows said their k)
        return [("val_top1", "val top-1"), ("val_topk", f"val top-{k}")]

    @staticmethod
    def card_rows(results):
        rows = [("val top-1", results["val_top1"]), (f"val top-{results['topk']}", results["val_topk"]),
                ("val loss", results["val_loss"]), ("macro F1", results["macro_f1"])]
        return rows + ([("val top-1, EMA weights", results["val_ema_top1"])] if "val_ema_top1" in results else [])

    @staticmethod
    def headline(results):
        return f"val top-1 {results['val_top1']:.4f}"

    def global_sums(self, figures):
        """What the per-rank sums of --dump_rank_metrics add up to (eval/.../global.json)."""
        return {"samples": figures["val_samples"], **{key: figures[key] for key in self.sum_keys}}
