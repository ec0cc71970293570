"""An `evaluate` metric module: the confusion matrix of single-label predictions (shipped here, works offline)."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """Counts of (true class, predicted class) pairs: row i, column j holds how many samples
of class i were predicted as class j. The diagonal holds the right predictions."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): the predicted class index of each sample.
    references (list of int): the true class index of each sample.
    num_classes (int): the matrix is num_classes x num_classes (default: the largest index seen + 1).
Returns:
    confusion_matrix (list of list of int): rows are true classes, columns predicted ones.
Example:
    >>> m = evaluate.load("utils/evaluation/evaluate_modules/confusion_matrix")
    >>> m.compute(predictions=[0, 1, 1], references=[0, 1, 0], num_classes=2)
    {'confusion_matrix': [[1, 1], [0, 1]]}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ConfusionMatrix(evaluate.Metric):
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
        counts = np.bincount(refs * n + preds, minlength=n * n).reshape(n, n)
        return {"confusion_matrix": counts.tolist()}
