"""Validation figures: top-k from the shipped evaluate module, sums that partition exactly."""

import pytest
import torch

from utils.metrics import load_topk_metric, rank_sums, summarize, sums, topk_for


@pytest.fixture(scope="module")
def metric():
    return load_topk_metric()


def test_evaluate_module_counts_topk(metric):
    ranked = [[2, 0, 1], [1, 2, 0], [0, 1, 2], [1, 0, 2], [2, 1, 0]]
    refs = [0, 0, 0, 1, 0]
    assert metric.compute(predictions=ranked, references=refs, k=1) == {"accuracy": 0.4, "correct": 2, "total": 5}
    assert metric.compute(predictions=ranked, references=refs, k=2) == {"accuracy": 0.6, "correct": 3, "total": 5}
    assert metric.compute(predictions=ranked, references=refs, k=3)["correct"] == 5


def test_topk_is_never_faked():
    assert topk_for(1000) == 5 and topk_for(3) == 3 and topk_for(2) == 2


def test_summary_is_exact_on_uneven_sizes(metric):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 7, generator=g)  # 37 divides by neither 2 nor 8
    labels = torch.randint(7, (37,), generator=g)
    losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    ranked = logits.topk(5, dim=1).indices
    fig = summarize(metric, ranked, labels, losses, 5)
    top1 = int((logits.argmax(1) == labels).sum())
    top5 = sum(int(labels[i] in ranked[i]) for i in range(37))
    assert (fig["val_samples"], fig["correct_top1"], fig["correct_topk"]) == (37, top1, top5)
    assert fig["val_top1"] == top1 / 37 and fig["val_topk"] == top5 / 37
    assert fig["val_loss"] == pytest.approx(float(losses.double().mean()), rel=1e-12)


def test_rank_sums_partition_the_global_figures():
    g = torch.Generator().manual_seed(1)
    ranked = torch.randint(7, (37, 5), generator=g)
    labels = torch.randint(7, (37,), generator=g)
    losses = torch.rand(37, generator=g)
    owners = torch.tensor([0] * 8 + [1] * 8 + [0] * 8 + [1] * 8 + [0] * 5)  # uneven shards
    parts = [rank_sums(ranked, labels, losses, owners, r, 5) for r in (0, 1)]
    whole = sums(ranked, labels, losses, 5)
    assert [p["samples"] for p in parts] == [21, 16]
    for key in ("samples", "correct_top1", "correct_topk"):
        assert parts[0][key] + parts[1][key] == whole[key]
    assert parts[0]["loss_sum"] + parts[1]["loss_sum"] == pytest.approx(whole["loss_sum"], rel=1e-12)
