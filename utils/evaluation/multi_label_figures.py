"""The figures of multi-label predictions (several classes a sample, utils/evaluation/tasks.py's MultiLabel): mAP
and per-class AP (scikit-learn's average_precision_score), micro and macro precision, recall and F1 from the counts at
a threshold, exact match, and each class's F1-best threshold."""

import numpy as np

COUNTS = ("true_positives", "false_positives", "false_negatives", "true_negatives")


def counts_at(probs, targets, threshold):
    """Per-class true/false positives/negatives of the predictions `probs >= threshold`, and the exact matches."""
    predicted = probs >= threshold
    return {"true_positives": (predicted & targets).sum(axis=0), "false_positives": (predicted & ~targets).sum(axis=0),
            "false_negatives": (~predicted & targets).sum(axis=0),
            "true_negatives": (~predicted & ~targets).sum(axis=0),
            "exact_matches": int((predicted == targets).all(axis=1).sum())}


def _ratio(num, den):
    return float(num) / float(den) if den else 0.0


def multi_label_figures(probs, targets, losses, threshold):
    """The figures of (N, C) probabilities and boolean targets, and N per-sample losses (see MultiLabel)."""
    from sklearn.metrics import average_precision_score

    n, classes = targets.shape
    positives = targets.sum(axis=0)
    per_class_ap = [float(average_precision_score(targets[:, c], probs[:, c])) if positives[c] else None
                    for c in range(classes)]
    scored = [ap for ap in per_class_ap if ap is not None]
    tuned = [best_f1_threshold(targets[:, c], probs[:, c]) if positives[c] else None for c in range(classes)]
    counts = counts_at(probs, targets, threshold)
    tp, fp, fn = counts["true_positives"], counts["false_positives"], counts["false_negatives"]
    precision = [_ratio(t, t + f) for t, f in zip(tp, fp)]
    recall = [_ratio(t, t + f) for t, f in zip(tp, fn)]
    f1 = [_ratio(2 * t, 2 * t + p + q) for t, p, q in zip(tp, fp, fn)]
    loss_sum = float(losses.sum())
    return {"val_map": float(np.mean(scored)) if scored else 0.0, "val_map_classes": len(scored),
            "val_map_classes_without_positives": classes - len(scored),
            "val_f1_micro": _ratio(2 * tp.sum(), 2 * tp.sum() + fp.sum() + fn.sum()),
            "val_f1_macro": float(np.mean(f1)), "val_precision_micro": _ratio(tp.sum(), tp.sum() + fp.sum()),
            "val_precision_macro": float(np.mean(precision)), "val_recall_micro": _ratio(tp.sum(), tp.sum() + fn.sum()),
            "val_recall_macro": float(np.mean(recall)), "val_exact_match": _ratio(counts["exact_matches"], n),
            "val_loss": loss_sum / max(n, 1), "val_samples": n, "threshold": threshold,
            "loss_sum": loss_sum, "exact_matches": counts["exact_matches"],
            "per_class_ap": per_class_ap, "class_support": positives.astype(int).tolist(),
            "val_tuned_thresholds": tuned,
            **{key: counts[key].astype(int).tolist() for key in COUNTS}}


def best_f1_threshold(targets, probs):
    """The probability threshold at which one class's F1 on these samples is highest (scikit-learn's
    precision-recall curve; the lowest such threshold on a tie)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(targets, probs)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    return float(thresholds[int(np.argmax(f1))])
