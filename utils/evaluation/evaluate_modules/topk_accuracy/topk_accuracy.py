"""An `evaluate` metric module: top-k accuracy from ranked predictions (shipped here, works offline)."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """Fraction of samples whose reference label is among the first k ranked predictions.
Also returns the integer count of such samples (`correct`) and the sample count (`total`), so that
results from different shards can be added exactly."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of int): per sample, class indices ranked best first (at least k of them).
    references (list of int): the true class index of each sample.
    k (int): how many ranked predictions count; 1 gives ordinary accuracy.
Returns:
    accuracy (float), correct (int), total (int)
Example:
    >>> m = evaluate.load("utils/evaluation/evaluate_modules/topk_accuracy")
    >>> m.compute(predictions=[[2, 0], [1, 2]], references=[0, 0], k=2)
    {'accuracy': 0.5, 'correct': 1, 'total': 2}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TopkAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": datasets.Sequence(datasets.Value("int64")),
                "references": datasets.Value("int64"),
            }),
        )

    def _compute(self, predictions, references, k=1):
        ranked = np.asarray(predictions, dtype=np.int64).reshape(len(references), -1)
        if ranked.shape[1] < k:
            raise ValueError(f"k={k} but only {ranked.shape[1]} ranked predictions per sample")
        hits = (ranked[:, :k] == np.asarray(references, dtype=np.int64)[:, None]).any(axis=1)
        correct = int(hits.sum())
        return {"accuracy": correct / max(len(references), 1), "correct": correct, "total": len(references)}
