"""Validation figures: the built-in ones against scikit-learn, exact sums, --metrics from cache or folder."""

import textwrap

import numpy as np
import pytest
import torch
from conftest import TINY, read_json, read_jsonl, runs_in_one_process
from ranks import run_ranks
from sklearn.metrics import confusion_matrix, f1_score, precision_score, recall_score

from utils.evaluation.class_figures import class_scores, confusion_matrix as our_confusion_matrix, topk_accuracy
from utils.evaluation.metrics import (PER_CLASS_LOG_MAX, figure_name, MetricError, load_metrics, parse_metric_spec,
                                      rank_sums, result_figures, summarize, sums, topk_for, validation_row)


@pytest.fixture(scope="module")
def metrics():
    return load_metrics()


def test_topk_accuracy_counts_the_labels_among_the_first_k():
    ranked = [[2, 0, 1], [1, 2, 0], [0, 1, 2], [1, 0, 2], [2, 1, 0]]
    refs = [0, 0, 0, 1, 0]
    assert topk_accuracy(ranked, refs, k=1) == {"accuracy": 0.4, "correct": 2, "total": 5}
    assert topk_accuracy(ranked, refs, k=2) == {"accuracy": 0.6, "correct": 3, "total": 5}
    assert topk_accuracy(ranked, refs, k=3)["correct"] == 5
    with pytest.raises(ValueError, match="k=4 but only 3"):
        topk_accuracy(ranked, refs, k=4)


@pytest.mark.parametrize("seed", range(5))
def test_class_scores_and_confusion_match_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    refs = rng.integers(0, 7, 60)  # classes 7 and 8 never occur; 7 may be predicted
    preds = np.where(rng.random(60) < 0.5, refs, rng.integers(0, 8, 60))
    scores = class_scores(preds, refs, 9)
    for key, fn in (("macro_f1", f1_score), ("macro_precision", precision_score), ("macro_recall", recall_score)):
        assert scores[key] == pytest.approx(fn(refs, preds, average="macro", zero_division=0), abs=1e-12), key
    assert scores["recall"][:7] == pytest.approx(list(recall_score(refs, preds, labels=range(7), average=None)))
    assert scores["support"] == np.bincount(refs, minlength=9).tolist()
    assert (7 in preds) and scores["recall"][7] is None  # predicted, but no images: no accuracy, not 0
    assert scores["precision"][7] == 0.0 and scores["recall"][8] is None and scores["precision"][8] is None
    matrix = our_confusion_matrix(preds, refs, 9)
    assert matrix == confusion_matrix(refs, preds, labels=range(9)).tolist()


def test_a_figure_is_named_for_its_scope_and_for_the_ema_in_one_place():
    assert figure_name("val_balanced_accuracy", ema=True) == "val_ema_balanced_accuracy"
    assert figure_name("val_worst_recall", "video") == "video_worst_recall"
    assert figure_name("video_top1", ema=True) == "video_ema_top1" and figure_name("clip_top1", ema=True) == \
        "clip_ema_top1"
    assert figure_name("val_f1_macro", "video", ema=True) == "video_ema_f1_macro"


def test_topk_is_never_faked():
    assert topk_for(1000) == 5 and topk_for(3) == 3 and topk_for(2) == 2


def test_summary_is_exact_on_uneven_sizes(metrics):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 7, generator=g)  # 37 divides by neither 2 nor 8
    labels = torch.randint(7, (37,), generator=g)
    losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    ranked = logits.topk(5, dim=1).indices
    fig = summarize(metrics, ranked, labels, losses, 5, 7)
    top1 = int((logits.argmax(1) == labels).sum())
    top5 = sum(int(labels[i] in ranked[i]) for i in range(37))
    assert (fig["val_samples"], fig["correct_top1"], fig["correct_topk"]) == (37, top1, top5)
    assert fig["val_top1"] == top1 / 37 and fig["val_topk"] == top5 / 37
    assert fig["val_loss"] == pytest.approx(float(losses.double().mean()), rel=1e-12)
    assert fig["val_macro_f1"] == pytest.approx(f1_score(labels, logits.argmax(1), average="macro"), abs=1e-12)
    matrix = np.array(fig["confusion_matrix"])
    assert matrix.sum() == 37 and np.trace(matrix) == top1


def test_validation_row_carries_per_class_accuracy_until_it_would_drown_the_dashboard(metrics):
    g = torch.Generator().manual_seed(2)
    labels = torch.tensor([0, 0, 1, 1, 1, 2])
    ranked = torch.tensor([[0, 1], [1, 0], [1, 0], [1, 2], [0, 1], [2, 0]])
    fig = summarize(metrics, ranked, labels, torch.rand(6, generator=g), 2, 4)  # class 3: no images
    row = validation_row(fig, ["a/b", "c", "d", "e"])
    assert {k: v for k, v in row.items() if k.startswith("val_class_acc/")} == \
        pytest.approx({"val_class_acc/a_b": 0.5, "val_class_acc/c": 2 / 3, "val_class_acc/d": 1.0})
    results = result_figures(fig, ["a/b", "c", "d", "e"])
    assert results["per_class_accuracy"] == pytest.approx({"a/b": 0.5, "c": 2 / 3, "d": 1.0, "e": None})
    assert results["per_class_images"] == {"a/b": 2, "c": 3, "d": 1, "e": 0}
    many = [f"k{i}" for i in range(PER_CLASS_LOG_MAX + 1)]
    labels = torch.arange(PER_CLASS_LOG_MAX + 1)
    fig = summarize(metrics, labels[:, None], labels, torch.zeros(len(labels)), 1, len(many))
    assert not any(k.startswith("val_class_acc/") for k in validation_row(fig, many))
    assert len(result_figures(fig, many)["per_class_accuracy"]) == len(many)


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


def test_metric_specs():
    assert parse_metric_spec("accuracy") == ("accuracy", {})
    assert parse_metric_spec("f1:average=macro,beta=0.5") == ("f1", {"average": "macro", "beta": 0.5})
    with pytest.raises(MetricError, match="NAME:KEY=VALUE"):
        parse_metric_spec("f1:macro")


# A Hub-style metric module as `evaluate` caches it: scores like sklearn's f1 (binary unless told).
F1_LIKE = textwrap.dedent('''
    import datasets
    import evaluate
    from sklearn.metrics import f1_score


    class {cls}(evaluate.Metric):
        def _info(self):
            return evaluate.MetricInfo(description="", citation="", inputs_description="",
                                       features=datasets.Features({{"predictions": datasets.Value("int64"),
                                                                   "references": datasets.Value("int64")}}))

        def _compute(self, predictions, references, average="binary"):
            return {{"{name}": float(f1_score(references, predictions, average=average)), "note": "text"}}
''')


def cached_hub_metric(cache, name):
    """The layout evaluate.load leaves in HF_MODULES_CACHE after loading `name` from the Hub once."""
    folder = cache / "evaluate_modules" / "metrics" / f"evaluate-metric--{name}" / ("0" * 64)
    folder.mkdir(parents=True)
    for parent in (cache / "evaluate_modules", cache / "evaluate_modules" / "metrics", folder.parent, folder):
        (parent / "__init__.py").touch()
    (folder / f"{name}.py").write_text(F1_LIKE.format(cls=name.title(), name=name))


# Fine on the start-up check (4 samples), broken on a real validation set.
FRAGILE = textwrap.dedent('''
    import datasets
    import evaluate


    class Fragile(evaluate.Metric):
        def _info(self):
            return evaluate.MetricInfo(description="", citation="", inputs_description="",
                                       features=datasets.Features({"predictions": datasets.Value("int64"),
                                                                   "references": datasets.Value("int64")}))

        def _compute(self, predictions, references):
            if len(references) > 4:
                raise RuntimeError("too many samples")
            return {"fragile": 1.0}
''')


ERROR_CASES = [("no_such_metric_xyz", "metrics: cannot load 'no_such_metric_xyz' ("),
               ("fone", "metrics: 'fone' cannot score class predictions (ValueError: "),
               ("fone:average=macro fone:average=weighted", "metrics: 'fone:average=weighted' would be logged as "
                                                            "val_fone, which another entry already is"),
               ("{fragile}", "metrics: 'fragile' failed on the validation predictions (RuntimeError: too many")]


@pytest.fixture(scope="module")
def metric_runs(tmp_path_factory):
    """A run with a Hub metric from the cache and a local module folder, then the ERROR_CASES: in one fresh
    interpreter (plain python: its stderr is all its own), for `evaluate` reads HF_MODULES_CACHE at import."""
    root = tmp_path_factory.mktemp("metric_runs")
    cache = root / "modules"
    cached_hub_metric(cache, "fone")
    local = root / "ftwo"
    local.mkdir()
    (local / "ftwo.py").write_text(F1_LIKE.format(cls="Ftwo", name="ftwo"))
    fragile = root / "fragile"
    fragile.mkdir()
    (fragile / "fragile.py").write_text(FRAGILE)
    base = [*TINY, "--epochs", "1", "--warmup_epochs", "0"]
    runs = [[*base, "--metrics", "fone:average=macro", f"{local}:average=weighted", "--output_dir", root / "run"]]
    runs += [[*base, "--metrics", *specs.format(fragile=fragile).split(), "--output_dir", root / f"error{i}"]
             for i, (specs, _) in enumerate(ERROR_CASES)]
    return root, runs_in_one_process(runs, {"HF_MODULES_CACHE": str(cache)}, root)


@pytest.mark.slow
def test_hub_metric_from_the_cache_offline_and_a_local_module_folder(metric_runs):
    root, (good, *_) = metric_runs
    assert good["code"] == 0, good["stderr"][-3000:]
    assert "evaluate" in good["imported"]
    out = root / "run"
    results = read_json(out / "results.json")
    val = [r for r in read_jsonl(out / "metrics.jsonl") if "val_top1" in r][-1]
    # average=macro through a Hub-style module is the shipped macro F1, computed another way
    assert results["val_fone"] == pytest.approx(results["macro_f1"], abs=1e-12) == val["val_fone"]
    assert 0 <= results["val_ftwo"] <= 1 and "val_fone_note" not in results  # text is not a figure


@pytest.mark.slow
def test_metric_that_cannot_be_loaded_or_used_is_one_line(metric_runs):
    root, (_, *errors) = metric_runs
    for i, ((specs, message), run) in enumerate(zip(ERROR_CASES, errors)):
        out = root / f"error{i}"
        ours = [line for line in run["stderr"].splitlines() if line.startswith("train_classification.py")]
        assert run["code"] == 2 and "Traceback" not in run["stderr"], run["stderr"][-2000:]
        assert len(ours) == 1 and ours[0].startswith(f"train_classification.py: error: {message}"), ours
        if "fragile" in specs:  # found at the first validation: what training wrote so far stays
            assert (out / "metrics.jsonl").is_file() and not (out / "results.json").exists()
        else:
            assert not out.exists()


@pytest.mark.slow
def test_bad_metric_on_two_processes_stops_every_rank_with_the_same_line(tmp_path):
    out = tmp_path / "run"
    job = run_ranks([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--metrics", "no_such_metric_xyz",
                     "--output_dir", out], nproc=2, timeout=180)
    # Each rank fails on its own, before any collective: the same line, exit 2, none left at a barrier.
    assert [rank.returncode for rank in job.ranks] == [2, 2] and not job.torn_down and not out.exists(), job.report()
    ours = [[line for line in rank.stderr.splitlines() if line.startswith("train_classification.py")]
            for rank in job.ranks]
    assert ours[0] == ours[1] and len(ours[0]) == 1 and "metrics: cannot load 'no_such_metric_xyz'" in ours[0][0]
    assert "Traceback" not in job.stderr and "DistBackendError" not in job.stderr
