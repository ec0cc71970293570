"""Long-tailed data: class counts from the whole split, --sampler balanced, --class_weights, --logit_adjust,
--focal_gamma, balanced accuracy and the worst class's recall, --track_metric, --imbalance.

A folder of 14, 6 and 2 training images (7 validation: odd, so 2 processes pad) trains on 2 processes with a worker
each, balanced draws and the logit-adjusted loss; its figures equal scikit-learn's over the validation images scored
here, its plain logits are what validation scores, and a SIGKILL mid-epoch resumes to the same bits."""

import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same_weights, main_fails, make_folder, read_json, read_jsonl, resume_job, resumed_from, \
    run_main
from ranks import ranks_killed, ranks_ok

COUNTS = {"cat": 14, "dog": 6, "eel": 2}
RECIPE = ("--sampler", "balanced", "--logit_adjust", "1", "--steps_per_epoch", "3", "--grad_accum_steps", "2",
          "--track_metric", "balanced_accuracy", "--keep_best", "1", "--dump_rank_metrics")


@pytest.fixture(scope="module")
def tail(tmp_path_factory):
    root = tmp_path_factory.mktemp("tail")
    make_folder(root / "tr", COUNTS, noise=60)
    make_folder(root / "va", {"cat": 3, "dog": 2, "eel": 2}, noise=60)
    return root


def val_predictions(out, folder):
    """Each validation image's predicted class and label, scored here in one batch from the run's saved weights."""
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for
    from utils.data.transforms.batch import BatchInput
    from utils.run.trained import load_run

    run, model = load_run(out)
    _, val, _, _ = datasets_for(parse_args(["--train_dir", str(folder / "tr"), "--val_dir", str(folder / "va"),
                                              "--image_size", "32"]))
    items = [val[i] for i in range(len(val))]
    with torch.no_grad():
        logits = model(BatchInput(run.input.mean_std)(torch.stack([item["pixel_values"] for item in items])))
    return logits.argmax(dim=1).numpy(), np.array([item["labels"] for item in items])


@pytest.mark.slow
def test_two_processes_score_as_scikit_learn_does_and_a_sigkill_resumes_bitwise(tail, tmp_path):
    """3 epochs of 3 optimizer steps of 2 accumulated micro-batches (--steps_per_epoch: 48 balanced draws an epoch,
    validated at steps 3, 6 and 9) on 2 processes, a worker each, with the logit-adjusted loss. The counts are the
    whole split's (not a rank's shard); balanced accuracy and the worst recall equal scikit-learn's over the 7 images
    scored at once here; --eval_only on 1 process says the same with or without --logit_adjust (validation scores the
    plain logits); best/ follows balanced accuracy. The same run SIGKILLed mid-epoch and resumed with --resume latest
    ends with the same bits. (One test: the uninterrupted run is both's, and work stealing could otherwise make it
    twice.)"""
    from sklearn.metrics import balanced_accuracy_score, recall_score

    out = tmp_path / "whole"
    ranks_ok(resume_job(tail, out, 1, *RECIPE), nproc=2)
    results = read_json(out / "results.json")
    assert results["train_class_counts"] == COUNTS and results["tracked_metric"] == "val_balanced_accuracy"
    assert results["global_step"] == 9 and results["val_samples"] == 7
    predicted, labels = val_predictions(out, tail)
    assert results["val_balanced_accuracy"] == pytest.approx(balanced_accuracy_score(labels, predicted), abs=1e-12)
    assert results["val_worst_recall"] == pytest.approx(min(recall_score(labels, predicted, average=None)), abs=1e-12)
    assert results["val_top1"] == pytest.approx(float((predicted == labels).mean()), abs=1e-12)
    weights = ["--eval_only", "--init_from", out / "model.safetensors"]
    plain = run_main(resume_job(tail, tmp_path / "plain", 0, *weights))
    adjusted = run_main(resume_job(tail, tmp_path / "adjusted", 0, *weights, "--logit_adjust", "1"))
    for key in ("val_top1", "val_loss", "val_balanced_accuracy", "val_worst_recall", "per_class_accuracy"):
        assert plain[key] == adjusted[key] == results[key], key
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "val_balanced_accuracy" in r]
    assert len(rows) == 3 and rows[-1]["val_worst_recall"] == results["val_worst_recall"]
    # each epoch --steps_per_epoch optimizer steps, however many micro-batches accumulate into one
    assert [(r["step"], r["epoch"]) for r in rows] == [(3, 1.0), (6, 2.0), (9, 3.0)]
    best = read_json(out / "best" / "metrics.json")
    assert best["val_balanced_accuracy"] == max(r["val_balanced_accuracy"] for r in rows)
    killed = tmp_path / "killed"
    argv = resume_job(tail, killed, 1, *RECIPE, "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:5", nproc=2)  # epoch 1, its second step: the resumed epoch must be the same draw, its
    # first 4 micro-batches skipped
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == killed / "checkpoints" / "step_4"
    assert_same_weights(killed, out)



def test_class_weights_are_scikit_learns_and_effective_numbers_cuis():
    from sklearn.utils.class_weight import compute_class_weight

    from utils.training.balance import class_weights

    counts = np.array([50, 20, 5, 1])
    labels = np.repeat(np.arange(4), counts)
    assert class_weights(counts, "balanced") == pytest.approx(compute_class_weight("balanced", classes=np.arange(4),
                                                                                   y=labels), rel=1e-12)
    effective = np.array(class_weights(counts, "effective:0.9"))
    raw = (1 - 0.9) / (1 - 0.9 ** counts)
    assert effective == pytest.approx(raw / raw[0] * effective[0], rel=1e-12)  # Cui et al.'s, up to one scale
    assert (effective * counts).sum() == pytest.approx(counts.sum())  # whose mean over the samples is 1
    assert class_weights(counts, "effective:0") == pytest.approx([1, 1, 1, 1])


def test_each_loss_is_its_definition():
    """Logit adjustment is cross-entropy of logits + tau log(prior); focal with one-hot targets is (1 - p_t)^gamma x
    CE, with label smoothing of torch's smoothed targets, and for sigmoid outputs torchvision's sigmoid_focal_loss;
    class weights weigh a sample as torch's weighted cross-entropy does, and a MixUp target by its classes' mixed
    weights."""
    from torchvision.ops import sigmoid_focal_loss

    from utils.evaluation.label_losses import AdjustedCrossEntropy, ClassWeighted, MultiLabelBCE

    torch.manual_seed(0)
    logits, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    prior = torch.tensor([0.6, 0.25, 0.1, 0.05])
    adjusted = AdjustedCrossEntropy(0.1, prior.log().tolist(), tau=1.5)(logits, labels)
    assert torch.allclose(adjusted, F.cross_entropy(logits + 1.5 * prior.log(), labels, label_smoothing=0.1,
                                                    reduction="none"))
    focal = AdjustedCrossEntropy(0.0, gamma=2.0)(logits, labels)
    p_t = logits.softmax(dim=1).gather(1, labels[:, None]).squeeze(1)
    assert torch.allclose(focal, (1 - p_t) ** 2 * F.cross_entropy(logits, labels, reduction="none"))
    # Focal with label smoothing smooths as torch does, q = y (1 - eps) + eps / C (10 classes: the true class 0.91,
    # each other 0.01): as gamma goes to 0 it is torch's label-smoothed cross-entropy, of class indices and of
    # MixUp's rows alike; at gamma 2 each class's term -q_c log p_c is scaled by (1 - p_c)^2.
    wide, picked = torch.randn(6, 10) * 3, torch.tensor([0, 3, 9, 5, 5, 1])
    mixed10 = 0.6 * F.one_hot(picked, 10).float() + 0.4 * F.one_hot(picked.roll(1), 10).float()
    for target in (picked, mixed10):
        almost_ce = AdjustedCrossEntropy(0.1, gamma=1e-7)(wide, target)
        assert torch.allclose(almost_ce, F.cross_entropy(wide, target, label_smoothing=0.1, reduction="none"),
                              rtol=1e-5)
    q = torch.full((6, 10), 0.01)
    q[torch.arange(6), picked] = 0.91
    p = wide.softmax(dim=1)
    by_hand = -(q * (1 - p) ** 2 * p.log()).sum(dim=1)
    assert torch.allclose(AdjustedCrossEntropy(0.1, gamma=2.0)(wide, picked), by_hand, rtol=1e-5)
    targets = (torch.rand(6, 4) < 0.4).float()
    ours = MultiLabelBCE(0.0, gamma=2.0)(logits, targets)
    assert torch.allclose(ours, sigmoid_focal_loss(logits, targets, alpha=-1, gamma=2.0, reduction="none").sum(dim=1))
    weights = [0.5, 1.0, 2.0, 4.0]
    weighted = ClassWeighted(torch.nn.CrossEntropyLoss(reduction="none"), weights)
    assert torch.allclose(weighted(logits, labels), F.cross_entropy(logits, labels, weight=torch.tensor(weights),
                                                                    reduction="none"))
    mixed = 0.7 * F.one_hot(labels, 4).float() + 0.3 * F.one_hot(labels.roll(1), 4).float()
    expected = F.cross_entropy(logits, mixed, reduction="none") * (mixed @ torch.tensor(weights))
    assert torch.allclose(weighted(logits, mixed), expected)


def test_a_class_without_training_samples_has_no_weight_nor_prior_and_the_others_have_theirs():
    """--class_weights and --logit_adjust refuse a class without training samples (a weight or log-prior of 0 samples
    would be infinite); otherwise the prior is each class's share of the training split."""
    from types import SimpleNamespace

    from utils.config.options import parse
    from utils.core.errors import ConfigError
    from utils.evaluation.tasks import task_for
    from utils.training.balance import read_balance

    source = SimpleNamespace(labels_ahead=True, labels=lambda train: [0, 0, 1, 0])
    for argv, option in ((["--class_weights", "balanced"], "class_weights"), (["--logit_adjust", "1"], "logit_adjust")):
        with pytest.raises(ConfigError, match=f"^{option}: class 'c' has no training samples"):
            read_balance(parse(argv).balance, source, None, ["a", "b", "c"], task_for(False, 3), log=lambda _: None)
    balance = read_balance(parse(["--logit_adjust", "0.5"]).balance, source, None, ["a", "b"], task_for(False, 2),
                           log=lambda _: None)
    assert balance.counts == [3, 1] and balance.log_prior == pytest.approx([math.log(3 / 4), math.log(1 / 4)])
    assert balance.logit_adjust == 0.5  # its TAU, with the prior: what the loss scales the prior by
    assert balance.class_weights is None and balance.sample_weights is None


def test_balanced_accuracy_and_the_worst_recall_are_scikit_learns():
    """A class predicted but absent from validation, as scikit-learn counts it: not in the mean of recalls."""
    from sklearn.metrics import balanced_accuracy_score

    from utils.evaluation.metrics import load_metrics, summarize

    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 0])
    predicted = torch.tensor([0, 1, 0, 1, 3, 2, 0, 2, 3, 0])
    ranked = torch.stack([predicted, (predicted + 1) % 4], dim=1)
    figures = summarize(load_metrics(), ranked, labels, torch.zeros(10), 2, 4)
    with pytest.warns(UserWarning):  # scikit-learn's: y_pred has a class that y_true lacks
        theirs = balanced_accuracy_score(labels.numpy(), predicted.numpy())
    assert figures["val_balanced_accuracy"] == pytest.approx(theirs, abs=1e-12)
    assert figures["val_worst_recall"] == pytest.approx(0.5)  # classes 1 and 2: one of two, two of four


def test_imbalance_keeps_each_class_its_share_of_the_digits():
    from utils.data.sources.digits import load_digits_dataset
    from utils.data.sources.splits import long_tailed

    train = load_digits_dataset()["train"]
    before = np.bincount(train["label"][:], minlength=10)
    kept, note = long_tailed(train, 100)
    after = np.bincount(kept["label"][:], minlength=10)
    assert after.tolist() == [max(1, round(n * 100 ** (-k / 9))) for k, n in enumerate(before)]
    assert after[0] == before[0] and after[9] == 1 and "imbalance 100" in note
    again, _ = long_tailed(train, 100)
    assert again["label"][:] == kept["label"][:] and again["image"][:3] == kept["image"][:3]  # seeded


@pytest.mark.parametrize("extra, message", [
    (["--sampler", "balanced", "--dataset", "shards/", "--streaming"], "sampler: balanced draws samples with "
     "replacement, which a stream read in order cannot give"),
    (["--sampler_power", "0.5"], "sampler_power: applies to --sampler balanced"),
    (["--steps_per_epoch", "5"], "steps_per_epoch: sets the epoch of --streaming data or of --sampler balanced"),
    (["--class_weights", "effective:1.5"], "class_weights: 'effective:1.5': give balanced or effective:BETA"),
    (["--logit_adjust", "1", "--bce_loss"], "logit_adjust: adds the log-prior to softmax cross-entropy's logits"),
    (["--focal_gamma", "2", "--bce_loss"], "focal_gamma: focuses cross-entropy and multi-label BCE"),
    (["--track_metric", "map"], "track_metric: map ranks each class's sigmoid scores of multi-label data"),
    (["--dataset", "multi_digits", "--class_weights", "balanced"], "class_weights: weighs one label a sample"),
    (["--dataset", "multi_digits", "--logit_adjust", "1"], "logit_adjust: adds the log-prior of one class"),
    (["--dataset", "multi_digits", "--track_metric", "balanced_accuracy"], "track_metric: balanced_accuracy scores "
     "one label a sample"),
    (["--dataset", "synthetic", "--imbalance", "10"], "imbalance: makes the training split of the digits or of "
     "image files long-tailed; this data (synthetic)"),
])
def test_what_cannot_apply_is_refused_in_one_line(extra, message, tmp_path, capsys):
    code, err = main_fails(["--epochs", "1", "--output_dir", tmp_path / "run", *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_a_multi_label_sample_is_drawn_by_its_rarest_label():
    """Counted once per class it carries; a sample without labels is drawn as one of the samples without any; its
    count is raised to -sampler_power as a single label's is (0.5: square-root balancing)."""
    from utils.evaluation.tasks import task_for
    from utils.training.balance import sample_weights

    rows, task = [[0], [0, 1], [1, 2], [], [0], []], task_for(True, 3)
    weights = sample_weights(task, rows, np.array([3, 2, 1]), 1.0)
    assert weights == pytest.approx([1 / 3, 1 / 2, 1, 1 / 2, 1 / 3, 1 / 2])
    rooted = sample_weights(task, rows, np.array([3, 2, 1]), 0.5)
    assert rooted == pytest.approx(np.array([3, 2, 1, 2, 3, 2]) ** -0.5)


def test_the_sampler_line_gives_each_classs_expected_share_of_an_epoch_against_the_splits():
    """Single-label, power 1: every class a third of the draws, against the split's 1/6 .. 1/2. Multi-label: a class's
    share is the chance that a drawn sample carries it (the draw probabilities of its samples summed)."""
    from utils.evaluation.tasks import task_for
    from utils.training.balance import sample_weights, sampler_line

    one = task_for(False, 3)
    rows = [0, 0, 0, 1, 1, 2]
    counts = one.class_counts(rows)
    line = sampler_line(sample_weights(one, rows, counts, 1.0), rows, counts, one)
    assert line == "sampler balanced: expected share of an epoch per class 0.333 .. 0.333 (the split's: 0.167 .. 0.5)"
    several = task_for(True, 3)
    rows = [[0], [0, 1], [1, 2], [], [0], []]  # counts 3, 2, 1; weights 1/3, 1/2, 1, 1/2, 1/3, 1/2 (sum 19/6)
    counts = several.class_counts(rows)
    assert counts.tolist() == [3, 2, 1]
    line = sampler_line(sample_weights(several, rows, counts, 1.0), rows, counts, several)
    # class 0: (1/3 + 1/2 + 1/3) / (19/6) = 7/19; class 1: (1/2 + 1) / (19/6) = 9/19; class 2: 1 / (19/6) = 6/19
    assert line == (f"sampler balanced: expected share of an epoch per class {6 / 19:.3g} .. {9 / 19:.3g} "
                    f"(the split's: {1 / 6:.3g} .. {3 / 6:.3g})")
