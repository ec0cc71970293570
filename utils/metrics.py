"""Validation figures from per-sample results: sums first, then fractions; never a mean of means."""

from pathlib import Path

TOPK_MODULE = str(Path(__file__).parent / "evaluate_modules" / "topk_accuracy")


def load_topk_metric():
    """The repository's own `evaluate` module (evaluate.load("accuracy") would need the Hub)."""
    import evaluate

    # keep_in_memory: no cache file, so processes computing at once never share a lock file.
    return evaluate.load(TOPK_MODULE, keep_in_memory=True)


def sums(ranked, labels, losses, k):
    """Counts and loss sum of a set of samples (ranked: [N, >=k] class indices, best first)."""
    hits = ranked[:, :k] == labels[:, None]
    return {"samples": int(labels.numel()),
            "correct_top1": int(hits[:, 0].sum()),
            "correct_topk": int(hits.any(dim=1).sum()),
            "loss_sum": float(losses.double().sum())}


def summarize(metric, ranked, labels, losses, k):
    """Global validation figures of gathered per-sample results, accuracies through `evaluate`."""
    preds, refs = ranked.tolist(), labels.tolist()
    top1 = metric.compute(predictions=preds, references=refs, k=1)
    topk = metric.compute(predictions=preds, references=refs, k=k)
    n = len(refs)
    loss_sum = float(losses.double().sum())
    return {"val_top1": top1["accuracy"], "val_topk": topk["accuracy"], "topk": k,
            "val_loss": loss_sum / max(n, 1), "val_samples": n,
            "correct_top1": top1["correct"], "correct_topk": topk["correct"], "loss_sum": loss_sum}


def rank_sums(ranked, labels, losses, owners, rank, k):
    """The sums of the samples that `rank` itself scored (padding already dropped by the gather)."""
    mine = owners == rank
    return sums(ranked[mine], labels[mine], losses[mine], k)


def topk_for(num_classes):
    """k of the top-k figure: 5, or the class count when smaller (computed, never set to 100 % by hand)."""
    return min(5, num_classes)

