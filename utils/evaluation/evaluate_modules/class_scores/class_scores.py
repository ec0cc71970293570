"""An `evaluate` metric module: per-class and macro precision, recall and F1 (shipped here, works offline)."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """Precision, recall and F1 of every class from single-label predictions, and their
unweighted (macro) means. A class's recall is its accuracy: the fraction of its samples predicted
right. The means run over the classes that occur among the references or the predictions (as
scikit-learn's average="macro" does); a class that occurs in neither has no scores (None), and a
class with no samples has no recall (None), even when some samples were predicted as it."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): the predicted class index of each sample.
    references (list of int): the true class index of each sample.
    num_classes (int): how many classes there are (default: the largest index seen + 1).
Returns:
    macro_precision, macro_recall, macro_f1 (float); balanced_accuracy (the mean recall of the classes with
    samples, as scikit-learn's balanced_accuracy_score), worst_recall (the lowest of those recalls); precision, recall, f1 (list of float or None,
    one per class); support (list of int: samples of each class); predicted (list of int).
    An undefined ratio (no samples predicted as a class, or none of it) counts as 0, as in
    scikit-learn's zero_division=0.
Example:
    >>> m = evaluate.load("utils/evaluation/evaluate_modules/class_scores")
    >>> m.compute(predictions=[0, 1, 1], references=[0, 1, 0])["macro_f1"]
    0.6666666666666666
"""


def _ratio(num, den):
    return np.divide(num, den, out=np.zeros(len(num)), where=den > 0)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ClassScores(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, num_classes=None):
        preds, refs = np.asarray(predictions, dtype=np.int64), np.asarray(references, dtype=np.int64)
        n = num_classes or int(max(preds.max(initial=-1), refs.max(initial=-1)) + 1)
        support = np.bincount(refs, minlength=n)
        predicted = np.bincount(preds, minlength=n)
        correct = np.bincount(refs[preds == refs], minlength=n)
        precision, recall = _ratio(correct, predicted), _ratio(correct, support)
        f1 = _ratio(2 * precision * recall, precision + recall)
        seen = (support + predicted) > 0

        def per_class(values, defined=seen):
            return [float(v) if d else None for v, d in zip(values, defined)]

        def macro(values):
            return float(values[seen].mean()) if seen.any() else 0.0

        present = support > 0  # balanced accuracy: the mean recall of the classes that have samples (scikit-learn's)
        balanced = float(recall[present].mean()) if present.any() else 0.0
        worst = float(recall[present].min()) if present.any() else 0.0
        return {"macro_precision": macro(precision), "macro_recall": macro(recall), "macro_f1": macro(f1),
                "balanced_accuracy": balanced, "worst_recall": worst,
                "precision": per_class(precision), "recall": per_class(recall, support > 0), "f1": per_class(f1),
                "support": support.tolist(), "predicted": predicted.tolist()}
