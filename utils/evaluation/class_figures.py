"""The figures of single-label predictions, from counts: top-k accuracy, each class's precision, recall and F1 with
their macro means and balanced accuracy, and the confusion matrix. Plain numpy over the gathered predictions of the
whole split (utils/evaluation/metrics.py sums them; scikit-learn's definitions, tests/test_metrics.py checks them):
`evaluate` is imported only for the metrics --metrics adds, since importing it costs a run seconds."""

import numpy as np


def topk_accuracy(ranked, references, k=1):
    """{"accuracy", "correct", "total"}: the samples whose label is among their first `k` ranked classes (`ranked`:
    one row of class indices a sample, best first, at least k of them)."""
    ranked = np.asarray(ranked, dtype=np.int64).reshape(len(references), -1)
    if ranked.shape[1] < k:
        raise ValueError(f"k={k} but only {ranked.shape[1]} ranked predictions per sample")
    hits = (ranked[:, :k] == np.asarray(references, dtype=np.int64)[:, None]).any(axis=1)
    correct = int(hits.sum())
    return {"accuracy": correct / max(len(references), 1), "correct": correct, "total": len(references)}


def _ratio(num, den):
    return np.divide(num, den, out=np.zeros(len(num)), where=den > 0)


def class_scores(predictions, references, num_classes):
    """Each class's precision, recall (its accuracy) and F1, and their macro means over the classes that occur among
    the labels or the predictions (scikit-learn's average="macro"; an undefined ratio counts 0, its zero_division=0).
    A class in neither has no scores (None), a class without samples no recall. balanced_accuracy: the mean recall of
    the classes with samples (scikit-learn's balanced_accuracy_score), worst_recall the lowest of them; support: the
    samples of each class, predicted: the samples predicted as it."""
    preds, refs = np.asarray(predictions, dtype=np.int64), np.asarray(references, dtype=np.int64)
    support = np.bincount(refs, minlength=num_classes)
    predicted = np.bincount(preds, minlength=num_classes)
    correct = np.bincount(refs[preds == refs], minlength=num_classes)
    precision, recall = _ratio(correct, predicted), _ratio(correct, support)
    f1 = _ratio(2 * precision * recall, precision + recall)
    seen, present = (support + predicted) > 0, support > 0

    def per_class(values, defined=seen):
        return [float(v) if d else None for v, d in zip(values, defined)]

    def macro(values):
        return float(values[seen].mean()) if seen.any() else 0.0

    return {"macro_precision": macro(precision), "macro_recall": macro(recall), "macro_f1": macro(f1),
            "balanced_accuracy": float(recall[present].mean()) if present.any() else 0.0,
            "worst_recall": float(recall[present].min()) if present.any() else 0.0,
            "precision": per_class(precision), "recall": per_class(recall, present), "f1": per_class(f1),
            "support": support.tolist(), "predicted": predicted.tolist()}


def confusion_matrix(predictions, references, num_classes):
    """Counts of (true class, predicted class): row i, column j holds the samples of class i predicted as j."""
    preds, refs = np.asarray(predictions, dtype=np.int64), np.asarray(references, dtype=np.int64)
    counts = np.bincount(refs * num_classes + preds, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes).tolist()
