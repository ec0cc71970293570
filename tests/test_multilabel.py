"""Multi-label data (several labels a sample): its figures equal scikit-learn's over every validation sample on 1
and 2 processes (an odd-sized split, padding dropped), the per-rank sums add up, --pos_weight comes from the whole
training split, a run killed on 2 processes resumes bitwise with MixUp, and predict.py lists what validation
counted."""

import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import assert_same_weights, main_fails, read_json, read_jsonl, resumed_from, run_main
from ranks import ranks_killed, ranks_ok

CLASSES = ["cloud", "field", "road", "water"]  # "water" has no positive in validation


def tags(i):
    """Row i's labels, as class names (how a Hub dataset or a CSV of names holds them); some rows have none."""
    return [name for c, name in enumerate(CLASSES[:3]) if (i >> c) & 1]


def tile(labels, rng):
    """A 20x20 image whose colour channels say its labels (with noise): something a tiny run can learn."""
    pixels = rng.integers(0, 80, (20, 20, 3))
    for name in labels:
        pixels[..., CLASSES.index(name) % 3] += 150
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


@pytest.fixture(scope="session")
def tagged(tmp_path_factory):
    """A save_to_disk dataset whose `tags` column lists class names: 48 train rows (one of them tagged
    "water"), 37 validation rows (odd: the second rank's last batch is padded)."""
    import datasets

    rng = np.random.default_rng(0)
    train_tags = [tags(i) for i in range(47)] + [["water", "cloud"]]
    val_tags = [tags(i * 5 + 1) for i in range(37)]
    split = {name: datasets.Dataset.from_dict({"picture": [tile(t, rng) for t in rows], "tags": rows},
                                              features=datasets.Features(picture=datasets.Image(),
                                                                         tags=datasets.List(datasets.Value("string"))))
             for name, rows in (("train", train_tags), ("validation", val_tags))}
    path = tmp_path_factory.mktemp("tagged") / "saved"
    datasets.DatasetDict(split).save_to_disk(str(path))
    return path


def job(data, out, *extra):
    return ["--dataset", data, "--image_size", "32", "--batch_size", "4", "--epochs", "2", "--warmup_epochs", "0.5",
            "--log_every", "1", "--num_workers", "1", "--output_dir", out, *extra]


def sklearn_figures(probs, targets, threshold=0.5):
    from sklearn.metrics import accuracy_score, average_precision_score, precision_recall_fscore_support

    has = targets.sum(axis=0) > 0
    ap = [average_precision_score(targets[:, c], probs[:, c]) if has[c] else None for c in range(targets.shape[1])]
    predicted = probs >= threshold
    micro = precision_recall_fscore_support(targets, predicted, average="micro", zero_division=0)
    macro = precision_recall_fscore_support(targets, predicted, average="macro", zero_division=0)
    return {"per_class_ap": ap, "val_map": float(np.mean([a for a in ap if a is not None])),
            "val_precision_micro": micro[0], "val_recall_micro": micro[1], "val_f1_micro": micro[2],
            "val_precision_macro": macro[0], "val_recall_macro": macro[1], "val_f1_macro": macro[2],
            "val_exact_match": accuracy_score(targets, predicted)}


def test_the_figures_are_scikit_learns():
    """Random scores with ties, a class without positives: the same numbers as scikit-learn's."""
    from utils.evaluation.multi_label_figures import multi_label_figures

    rng = np.random.default_rng(3)
    targets = rng.random((41, 5)) < 0.3
    targets[:, 4] = False  # no positive: no AP, counted apart
    probs = np.round(rng.random((41, 5)), 1)  # ties
    ours = multi_label_figures(probs, targets, np.ones(41), threshold=0.5)
    theirs = sklearn_figures(probs, targets)
    assert ours["per_class_ap"][4] is None and ours["val_map_classes_without_positives"] == 1
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-12) if key != "per_class_ap" else ours[key] == value, key


def test_the_validation_loss_is_the_bce_summed_over_each_samples_classes():
    """Known logits, by hand: a sample's validation loss is its classes' binary cross-entropies summed (as training
    sums them: one scale with the training loss), val_loss their mean over the samples; a video's loss, from its
    views' averaged probabilities, is summed alike."""
    import math

    from utils.evaluation.tasks import MultiLabel

    logits = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 0.0, 1.5]])
    targets = torch.tensor([[1, 0, 0], [0, 1, 1]], dtype=torch.uint8)

    def bce(x, y):
        p = 1 / (1 + math.exp(-x))
        return -math.log(p if y else 1 - p)

    hand = [sum(bce(x, y) for x, y in zip(row, labels)) for row, labels in zip(logits.tolist(), targets.tolist())]
    task = MultiLabel(3)
    fields = task.fields(logits, targets)
    assert fields[2].tolist() == pytest.approx(hand, rel=1e-6)
    assert task.figures(fields)["val_loss"] == pytest.approx(sum(hand) / 2, rel=1e-6)
    probs = torch.tensor([[1 / (1 + math.exp(-x)) for x in row] for row in logits.tolist()], dtype=torch.float64)
    assert task.averaged_fields(probs, targets)[2].tolist() == pytest.approx(hand, rel=1e-12)


def test_track_metric_macro_f1_follows_the_macro_f1_of_multi_label_figures():
    """--track_metric macro_f1 on multi-label data: the figure --keep_best, --early_stop and best/ follow
    (train_classification.tracked_figure) is val_f1_macro (val_ema_f1_macro with --model_ema). Two validations where
    micro F1 rises and macro F1 falls (the frequent class found everywhere, the two rare ones no longer): the second
    is no better, and --early_stop 1 stops there."""
    from types import SimpleNamespace

    from train_classification import tracked_figure
    from utils.evaluation.tasks import task_for
    from utils.training.early_stop import Patience

    targets = torch.tensor([[1, 0, 0]] * 4 + [[1, 1, 0], [1, 0, 1]], dtype=torch.uint8)
    first = torch.tensor([[1, 0, 0]] * 3 + [[0, 0, 0], [0, 1, 0], [0, 0, 1]])  # 3 of class 0 missed, rare ones right
    second = torch.tensor([[1, 0, 0]] * 6)  # class 0 everywhere, the rare ones missed
    task = task_for(True, 3, track="macro_f1")
    patience, scores = Patience(patience=1), []
    for said in (first, second):
        figures = task.figures(task.fields(said * 6.0 - 3.0, targets))  # logits of +-3: decided at 0.5
        figures.update({f"val_ema_{key[4:]}": figures[key] for key in task.ema_keys})  # as validate() adds them
        for ema in (None, object()):
            assert tracked_figure(SimpleNamespace(task=task, ema=ema), figures) == figures["val_f1_macro"]
        scores.append((figures["val_f1_micro"], figures["val_f1_macro"]))
        stopped = patience.update(tracked_figure(SimpleNamespace(task=task, ema=None), figures), epoch=len(scores))
    # micro up, macro down (pytest.approx compares flat sequences: 9.2 refuses a list of pairs)
    assert [figure for pair in scores for figure in pair] == pytest.approx([10 / 13, (6 / 9 + 1 + 1) / 3,
                                                                            12 / 14, 1 / 3])
    assert stopped and patience.best == pytest.approx(scores[0][1])


def main_fails_with(call, capsys):
    """(exit code, stderr's lines) of `call()`, which must stop."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        call()
    return stopped.value.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def val_outputs(out, data, weights=None):
    """Every validation sample's probabilities, targets, the class names and the logits (float64), computed in this
    process in one batch from the run's saved weights (the raw ones, or the state dict file `weights`), in the
    split's order."""
    from safetensors.torch import load_file

    from utils.config.settings import datasets_for
    from utils.config.options import parse_args
    from utils.data.transforms.batch import BatchInput
    from utils.run.trained import load_run

    run, model = load_run(out)
    if weights is not None:
        model.load_state_dict(load_file(weights))
    _, val, names, _ = datasets_for(parse_args(["--dataset", str(data), "--image_size", "32"]))
    items = [val[i] for i in range(len(val))]
    pixels = torch.stack([item["pixel_values"] for item in items])
    with torch.no_grad():
        logits = model(BatchInput(run.input.mean_std)(pixels))
    targets = torch.stack([item["labels"] for item in items]).numpy().astype(bool)
    return logits.sigmoid().double().numpy(), targets, names, logits.double().numpy()


def summed_bce(logits, targets):
    """Each sample's binary cross-entropy summed over its classes, by hand in float64: -log(p) for a positive,
    -log(1 - p) for a negative, p = sigmoid(logit) (written as log(1 + e^-x) and log(1 + e^x))."""
    return np.where(targets, np.logaddexp(0, -logits), np.logaddexp(0, logits)).sum(axis=1)


RECIPE = ("--mixup_alpha", "0.4", "--cutmix_alpha", "1.0", "--pos_weight", "auto", "--model_ema", "--keep_best", "1",
          "--dump_rank_metrics")


@pytest.fixture(scope="module")
def two_process_run(tagged, tmp_path_factory):
    """The tagged data trained on 2 processes (a worker each) with MixUp/CutMix, --pos_weight auto and EMA: what the
    exactness test reads and the killed run must end as."""
    out = tmp_path_factory.mktemp("two") / "run"
    (out.parent / "stdout.txt").write_text(ranks_ok(job(tagged, out, *RECIPE), nproc=2).stdout)
    return out


@pytest.mark.slow
def test_two_processes_score_every_sample_once_as_scikit_learn_does(tagged, two_process_run, tmp_path, capsys):
    """Trained on 2 processes, 37 validation images: mAP, per-class AP, P/R/F1 and exact match equal
    scikit-learn's over the 37 computed at once here; --eval_only on 1 process says the same; the per-rank files
    add up to global.json; --pos_weight auto is each class's negatives over positives in all 48 rows; best/
    follows the EMA's mAP; val_loss is each sample's BCE summed over its classes, by hand; top_losses.csv's rows (of
    the EMA's weights) name the labels missed and those falsely given; model/thresholds.json is tuned on the weights
    model/ holds (the EMA's), not on the raw ones."""
    out = two_process_run
    results = read_json(out / "results.json")
    probs, targets, names, logits = val_outputs(out, tagged)
    assert names == CLASSES and results["val_samples"] == 37 == len(targets)
    assert read_json(out / "model" / "config.json")["input"]["multi_label"] is True  # its outputs: a sigmoid a class
    console = (out.parent / "stdout.txt").read_text()  # the start-up lines say the kind, and count positives
    assert "48 train / 37 val images, 4 classes (multi-label), 2 process(es)" in console
    assert "class counts (training positives): " in console and "water 1" in console
    assert read_json(out / "run.json")["input"]["train_crop_scale"] == [0.85, 1.0]  # multi-label data's crop
    theirs = sklearn_figures(probs, targets)
    assert [results["per_class_ap"][n] for n in names] == pytest.approx(theirs.pop("per_class_ap"), abs=1e-12)
    for key, value in theirs.items():
        assert results[key] == pytest.approx(value, abs=1e-12), key
    assert results["val_map_classes_without_positives"] == 1 and results["per_class_ap"]["water"] is None
    positives = [sum(name in tags(i) for i in range(47)) + (name in ("water", "cloud")) for name in CLASSES]
    assert results["pos_weight"] == {n: pytest.approx((48 - p) / p) for n, p in zip(CLASSES, positives)}
    folder = out / "eval" / "epoch_1"
    ranks = [read_json(folder / f"rank_{r}.json") for r in (0, 1)]
    total = read_json(folder / "global.json")
    assert total["samples"] == 37 and sum(r["samples"] for r in ranks) == 37
    for key in ("true_positives", "false_positives", "false_negatives", "exact_matches"):
        assert sum(r[key] for r in ranks) == total[key], key
    assert sum(r["loss_sum"] for r in ranks) == pytest.approx(total["loss_sum"], rel=1e-9)
    one = run_main(job(tagged, tmp_path / "one", "--eval_only", "--init_from", out / "model.safetensors"))
    for key in ("val_map", "val_f1_micro", "val_f1_macro", "val_exact_match", "per_class_ap"):
        assert one[key] == pytest.approx(results[key], abs=1e-12), key
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["val_map"] for r in rows if "val_map" in r][-1] == results["val_map"]
    pictures = {p.name for p in out.glob("*.png")}  # per-class AP in place of the confusion matrix
    assert pictures == {"curves.png", "per_class_ap.png", "calibration.png", "top_losses.png"}, pictures
    assert (out / "per_class_counts.csv").is_file()
    best = read_json(out / "best" / "metrics.json")  # --keep_best follows mAP, the EMA's with --model_ema
    assert best["val_ema_map"] == max(r["val_ema_map"] for r in rows if "val_ema_map" in r)
    # val_loss: each sample's BCE summed over its 4 classes (as training sums it, so that the two losses beside each
    # other in metrics.jsonl and curves.png are on one scale), averaged over the 37; no --pos_weight in it
    losses = summed_bce(logits, targets)
    assert results["val_loss"] == pytest.approx(losses.mean(), rel=1e-5)
    assert [r["val_loss"] for r in rows if "val_loss" in r][-1] == results["val_loss"]
    # top_losses.csv (the default 24 rows) of the weights model/ holds (the EMA's with --model_ema, those of
    # predict.py --ema): each row's loss is that sample's, highest first; `missed` the true labels below the threshold
    # (false negatives), `false` those at or above it that are not true
    held, _, _, held_logits = val_outputs(out, tagged, weights=out / "model" / "model.safetensors")
    held_losses = summed_bce(held_logits, targets)
    table = list(csv.DictReader((out / "top_losses.csv").open()))
    assert len(table) == 24 and [float(r["loss"]) for r in table] == sorted((float(r["loss"]) for r in table),
                                                                             reverse=True)

    def named(text):
        return set() if text == "(none)" else set(text.split())

    wrong = 0
    for row in table:
        i = int(row["index"])
        assert float(row["loss"]) == pytest.approx(held_losses[i], abs=1e-4)
        if np.abs(held[i] - 0.5).min() < 1e-5:  # a probability at the threshold: a rounding could decide it
            continue
        truth, said = ({names[c] for c in np.flatnonzero(on)} for on in (targets[i], held[i] >= 0.5))
        assert (named(row["true"]), named(row["predicted"])) == (truth, said)
        assert (named(row["missed"]), named(row["false"])) == (truth - said, said - truth)
        wrong += truth != said
    assert wrong  # some rows where the labels are wrong: missed and false say something
    # model/thresholds.json: each class's F1-best threshold on these 37 samples of the weights model/ holds, the
    # run's threshold for "water" (no positive)
    from utils.evaluation.multi_label_figures import best_f1_threshold

    def f1_best(p):
        return [best_f1_threshold(targets[:, c], p[:, c]) if targets[:, c].any() else results["threshold"]
                for c in range(len(names))]

    saved = read_json(out / "model" / "thresholds.json")
    assert saved["threshold"] == 0.5 and list(saved["tuned"]) == names
    assert list(saved["tuned"].values()) == pytest.approx(f1_best(held), abs=1e-6)
    assert f1_best(probs) != pytest.approx(f1_best(held), abs=1e-6)  # the raw weights' are other thresholds
    # ... so predict.py applies them to the weights they were tuned on (--ema), and refuses them on the raw ones
    import predict

    image = tmp_path / "tile.png"
    tile(["cloud"], np.random.default_rng(0)).save(image)
    assert predict.main([str(out), str(image), "--ema", "--threshold", "tuned", "--num_workers", "0"])[0]["path"]
    code, err = main_fails_with(lambda: predict.main([str(out), str(image), "--threshold", "tuned"]), capsys)
    assert code == 2 and len(err) == 1 and "--threshold tuned: " in err[0] and "model_ema.safetensors" in err[0] and \
        "add --ema" in err[0]
    checkpoint = next((out / "checkpoints").iterdir())  # a checkpoint's weights are not those tuned either
    code, err = main_fails_with(lambda: predict.main([str(out), str(image), "--threshold", "tuned", "--checkpoint",
                                                      str(checkpoint)]), capsys)
    assert code == 2 and len(err) == 1 and "--threshold tuned: " in err[0] and "drop --checkpoint" in err[0]


@pytest.mark.slow
def test_sigkill_and_resume_on_two_processes_is_bitwise_with_mixup_and_pos_weight(tagged, two_process_run, tmp_path):
    whole, out = two_process_run, tmp_path / "run"
    argv = job(tagged, out, *RECIPE, "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:8", nproc=2)  # epoch 1 (6 steps an epoch on each rank), mid-epoch
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_7"
    assert_same_weights(out, whole)
    assert read_json(out / "results.json")["val_ema_map"] == read_json(whole / "results.json")["val_ema_map"]


def test_multi_label_options_are_refused_on_single_label_data_and_the_reverse(tagged, tmp_path, capsys):
    code, err = main_fails(["--dataset", "digits", "--pos_weight", "auto", "--output_dir", tmp_path / "a"], capsys)
    assert code == 2 and "pos_weight: weighs the positives of multi-label data" in err
    code, err = main_fails(job(tagged, tmp_path / "b", "--bce_loss"), capsys)
    assert code == 2 and "bce_loss: multi-label data trains with binary cross-entropy per class already" in err
    assert len(err.strip().splitlines()) == 1
    code, err = main_fails(job(tagged, tmp_path / "c", "--multi_label_loss", "asl", "--pos_weight", "auto"), capsys)
    assert code == 2 and "pos_weight: weighs the positives of the BCE; --multi_label_loss asl has" in err


@pytest.mark.slow
def test_a_teacher_of_the_other_kind_of_labels_is_refused(two_process_run, tmp_path, capsys):
    """The multi-label run as the teacher of a single-label run on the same four classes: one line, exit 2."""
    rng = np.random.default_rng(6)
    for name in CLASSES:
        (tmp_path / "tr" / name).mkdir(parents=True)
        for i in range(2):
            tile([name], rng).save(tmp_path / "tr" / name / f"{i}.png")
    code, err = main_fails(["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "tr", "--image_size", "32",
                            "--teacher", two_process_run, "--output_dir", tmp_path / "out"], capsys)
    assert code == 2 and "teaches several labels a sample, this run's data has one label a sample" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out" / "config.yaml").exists()


def test_a_pretrained_classifier_cannot_teach_multi_label_data(tagged, tmp_path, capsys):
    """A model name's pretrained classifier is a softmax over one label a sample: multi-label data refuses it in one
    line, before any weights are fetched."""
    code, err = main_fails(job(tagged, tmp_path / "out", "--teacher", "resnet18", "--teacher_pretrained"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "resnet18's pretrained classifier teaches one label a sample, this run's data has several labels" in err


def test_an_unknown_validation_class_is_one_line_naming_the_row(tmp_path, capsys):
    import datasets

    rng = np.random.default_rng(1)
    features = datasets.Features(image=datasets.Image(), labels=datasets.List(datasets.Value("string")))
    rows = {"train": [["a"], ["b"], ["a", "b"], []], "validation": [["a"], ["b", "c"]]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict({"image": [tile([], rng) for _ in r], "labels": r},
                                                        features=features) for s, r in rows.items()}
                         ).save_to_disk(str(tmp_path / "d"))
    code, err = main_fails(job(tmp_path / "d", tmp_path / "out"), capsys)
    assert code == 2 and "row 1 of column 'labels' names 'c', which is not one of the 2 training classes" in err


@pytest.mark.slow
def test_predict_lists_the_labels_validation_counted(tmp_path):
    """multi_digits, a short run on 2 processes with --threshold 0.3: its validation tiles written as PNG files
    (lossless), predicted at the run's threshold (0.3, not 0.5): per class, the true and false positives equal those
    of the run's last validation; --threshold tuned reads model/thresholds.json; the ONNX graph ends in the sigmoid:
    its output "probabilities", predict.py's on the same pixels."""
    import predict
    from utils.data.sources.multi_digits import load_multi_digits
    from utils.data.sources.splits import subset

    out = tmp_path / "run"
    ranks_ok(["--dataset", "multi_digits", "--epochs", "1", "--max_train_samples", "256", "--max_val_samples", "75",
              "--batch_size", "32", "--num_workers", "1", "--threshold", "0.3", "--output_dir", out], nproc=2)
    results = read_json(out / "results.json")
    assert results["threshold"] == 0.3
    val = subset(load_multi_digits()["validation"], 75)  # the run's validation rows
    files = tmp_path / "tiles"
    files.mkdir()
    for i in range(len(val)):
        val[i]["image"].save(files / f"{i:03d}.png")
    rows = at_run = predict.main([str(out), str(files), "--top_k", "10"])  # no --threshold: the run's; all 10 classes
    names = results["class_names"]
    listed = np.array([[dict(zip(r["labels"], r["probs"]))[n] for n in names] for r in rows])
    assert ((listed >= 0.3) & (listed < 0.5)).any()  # labels that 0.5 would not give: the threshold decides them
    for row, p in zip(rows, listed):  # (away from 0.3: the listed probabilities are rounded to 6 places)
        assert all((n in row["predicted"]) == (q >= 0.3) for n, q in zip(names, p) if abs(q - 0.3) > 1e-6)
    predicted = np.array([[n in r["predicted"] for n in names] for r in rows])
    truth = np.array([[c in labels for c in range(len(names))] for labels in val["label"]])
    counts = results["per_class_counts"]
    assert [int((predicted & truth)[:, c].sum()) for c in range(10)] == [counts[n]["true_positives"] for n in names]
    assert [int((predicted & ~truth)[:, c].sum()) for c in range(10)] == [counts[n]["false_positives"] for n in names]
    tuned = json.loads((out / "model" / "thresholds.json").read_text())["tuned"]
    assert tuned == pytest.approx(results["per_class_tuned_threshold"])
    rows = predict.main([str(out), str(files), "--threshold", "tuned", "--top_k", "10"])  # every probability
    for row in rows:  # (probs are rounded to 6 places: a tuned threshold is one of validation's probabilities)
        probs = dict(zip(row["labels"], row["probs"]))
        assert all((n in row["predicted"]) == (probs[n] >= tuned[n]) for n in names if abs(probs[n] - tuned[n]) > 1e-6)
    assert any(r["predicted"] != s["predicted"] for r, s in zip(rows, at_run)), "tuned thresholds changed nothing"
    # A run folder whose run.json says the kind as runs did before it was named (a bool): predicted alike
    record = json.loads((out / "run.json").read_text())
    assert record.pop("label_kind") == "multi_label"
    (out / "run.json").write_text(json.dumps({**record, "multi_label": True}))
    assert predict.main([str(out), str(files), "--top_k", "10"]) == at_run
    from utils.evaluation.tasks import kind_named
    from utils.inference import EvalGraph, load_run

    run, model = load_run(out)
    graph = EvalGraph(model, run.input, kind_named(run.label_kind).of(len(run.classes))).eval()
    pixels = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(graph(pixels), EvalGraph(model, run.input)(pixels).sigmoid())
    # --export_onnx: the exported graph's output is "probabilities", each in [0, 1]: on the tiles' pixels (as
    # predict.py reads the files), the sigmoid of the PyTorch logits and the probabilities predict.py listed
    import onnxruntime

    from utils.inference import eval_dataset

    predict.main([str(out), "--export_onnx", str(tmp_path / "m.onnx")])
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["probabilities"]
    read, _ = eval_dataset(run, sorted(files.iterdir()))
    pixels = torch.stack([read[i]["pixel_values"] for i in range(len(read))])
    got = session.run(None, {"pixels": pixels.numpy()})[0]
    assert got.shape == (75, 10) and got.min() >= 0 and got.max() <= 1
    with torch.no_grad():
        assert np.abs(got - EvalGraph(model, run.input)(pixels).sigmoid().numpy()).max() <= 1e-5
    assert np.abs(got - listed).max() <= 1e-5


@pytest.fixture(scope="session")
def csv_files(tmp_path_factory):
    """Images listed by CSV files: train.csv in Planet's layout (image_name,tags; names space-separated), val.csv in
    ChestX-ray14's (Image Index,Finding Labels; names '|'-separated, a quoted comma in a name), 23 validation rows."""
    root = tmp_path_factory.mktemp("csv")
    rng = np.random.default_rng(2)
    (root / "img").mkdir()
    lines = {"train.csv": ["image_name,tags"], "val.csv": ["Image Index,Finding Labels,Patient"]}
    for split, count, sep in (("train.csv", 32, " "), ("val.csv", 23, "|")):
        for i in range(count):
            labels = tags(i if split == "train.csv" else 3 * i + 2)
            name = f"img/{split[:-4]}_{i}.png"
            tile(labels, rng).save(root / name)
            lines[split].append(f"{name},{sep.join(labels)},x" if sep == "|" else f"{name},{sep.join(labels)}")
    for split, rows in lines.items():
        (root / split).write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.slow
def test_csv_label_files_train_on_two_processes(csv_files, tmp_path):
    out = tmp_path / "run"
    ranks_ok(["--train_csv", csv_files / "train.csv", "--val_csv", csv_files / "val.csv", "--image_size", "32",
              "--batch_size", "4", "--epochs", "1", "--num_workers", "1", "--track_metric", "macro_f1",
              "--output_dir", out], nproc=2)
    results = read_json(out / "results.json")
    assert results["class_names"] == CLASSES[:3] and results["val_samples"] == 23
    assert results["tracked_metric"] == "val_f1_macro"  # --track_metric macro_f1: multi-label data's macro F1
    assert results["dataset"] == f"csv:{csv_files / 'train.csv'}"
    positives = [sum(name in tags(3 * i + 2) for i in range(23)) for name in CLASSES[:3]]
    assert list(results["per_class_positives"].values()) == positives


def test_a_bad_label_file_is_one_line_naming_it(csv_files, tmp_path, capsys):
    bad = tmp_path / "val.csv"
    bad.write_text("image_name,tags\nimg/val_0.png,cloud\nimg/val_1.png,cloud snow\n")
    common = ["--train_csv", csv_files / "train.csv", "--data_root", csv_files, "--output_dir", tmp_path / "o"]
    code, err = main_fails([*common, "--val_csv", bad], capsys)
    assert code == 2 and f"{bad}:3: class 'snow' is not one of the 3 classes of the training file" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("image_name,tags\n")
    code, err = main_fails([*common, "--val_csv", empty], capsys)
    assert code == 2 and f"{empty}: holds no rows" in err
    code, err = main_fails([*common, "--val_csv", csv_files / "val.csv", "--csv_labels_column", "tags"], capsys)
    assert code == 2 and "no column 'tags' (--csv_labels_column); columns are: Image Index, Finding Labels" in err


@pytest.mark.slow
def test_a_video_csv_trains_and_its_multi_view_test_is_exact_on_1_and_2_processes(videos, tmp_path, capsys):
    """The `videos` fixture listed by a CSV with several labels a video (5 validation videos, odd), r3d_18,
    --test_clips 3 --test_crops 2: the multi-view figures (sigmoid averaged per video) alike on 1 and 2 processes,
    the per-rank sums adding up; the test's line names the clips' figure, exact match."""
    files = sorted(videos.rglob("*.mp4"))
    for split in ("tr", "va"):
        rows = [f"{f.relative_to(videos)},{f.parent.name}{' motion' if int(f.stem) % 2 else ''}"
                for f in files if f.parts[-3] == split]
        (tmp_path / f"{split}.csv").write_text("path,labels\n" + "\n".join(rows) + "\n")
    common = ["--train_csv", tmp_path / "tr.csv", "--val_csv", tmp_path / "va.csv", "--data_root", videos,
              "--model", "r3d_18", "--image_size", "16", "--clip_len", "4", "--batch_size", "2", "--epochs", "1",
              "--lr", "0.01", "--num_workers", "1", "--test_clips", "3", "--test_crops", "2", "--dump_rank_metrics"]
    results = {}
    for nproc, extra in ((2, ()), (1, ("--eval_only", "--init_from", tmp_path / "p2" / "model.safetensors"))):
        out = tmp_path / f"p{nproc}"  # trained on 2 processes, its weights scored again on 1 (in this process)
        if nproc == 1:
            capsys.readouterr()
            run_main([*common, *extra, "--output_dir", out])
            line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("test (3 clips x 2 crops)"))
            assert ", clip exact match " in line and "video mAP " in line, line
        else:
            ranks_ok([*common, *extra, "--output_dir", out], nproc=nproc)
        results[nproc] = read_json(out / "results.json")
        ranks = [read_json(out / "eval" / "test" / f"rank_{r}.json") for r in range(nproc)]
        total = read_json(out / "eval" / "test" / "global.json")
        assert sum(r["samples"] for r in ranks) == total["samples"] == 5
        for key in ("true_positives", "false_positives", "false_negatives", "exact_matches"):
            assert sum(r[key] for r in ranks) == total[key], key
    one, two = results[1], results[2]
    assert one["class_names"] == ["left", "motion", "right"] and one["test_clips_scored"] == 15
    for key in ("video_map", "video_f1_micro", "video_exact_match", "clip_top1", "test_videos", "val_map"):
        assert one[key] == pytest.approx(two[key], abs=1e-9), key


@pytest.mark.slow
def test_streamed_shards_with_a_list_column_train_on_two_processes(tmp_path):
    """Parquet shards whose label column is a List(ClassLabel), --streaming on 2 processes (a shard each, a
    worker each): multi-label by itself; --pos_weight auto counts the whole split, not a process's shards."""
    import datasets

    rng = np.random.default_rng(4)
    features = datasets.Features(image=datasets.Image(), label=datasets.List(datasets.ClassLabel(names=CLASSES[:3])))
    rows = {"train-00000-of-00002": range(0, 16), "train-00001-of-00002": range(16, 40),
            "validation-00000-of-00001": range(40, 51)}
    for name, ids in rows.items():  # tags(i % 5): each shard's share of positives differs from the split's
        labels = [[CLASSES.index(n) for n in tags(i % 5)] for i in ids]
        datasets.Dataset.from_dict({"image": [tile(tags(i % 5), rng) for i in ids], "label": labels},
                                   features=features).to_parquet(tmp_path / f"{name}.parquet")
    out = tmp_path / "run"
    ranks_ok(["--dataset", tmp_path, "--streaming", "--image_size", "32", "--batch_size", "4", "--epochs", "1",
              "--num_workers", "1", "--pos_weight", "auto", "--output_dir", out], nproc=2)
    results = read_json(out / "results.json")
    positives = [sum(name in tags(i % 5) for i in range(40)) for name in CLASSES[:3]]
    assert results["pos_weight"] == {n: pytest.approx((40 - p) / p) for n, p in zip(CLASSES, positives)}
    assert results["val_samples"] == 11 and "val_map" in results
    # the stream crops as multi-label data does, at any size (at 128 px one label a sample would crop 8-100 %)
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    train = datasets_for(parse_args(["--dataset", str(tmp_path), "--streaming", "--image_size", "128"]))[0]
    assert tuple(train.preset(0)[0].transforms[0].scale) == (0.85, 1.0)


def test_mixup_and_cutmix_mix_multi_hot_targets_as_they_mix_the_images():
    """A batch of multi-hot targets through the training input's MixUp (then CutMix): each target is the mix of
    its own and its neighbour's (torchvision's roll) in the proportion the pixels were mixed."""
    from utils.data.transforms.batch import BatchInput, BatchOptions

    rng = np.random.default_rng(5)
    pixels = torch.tensor(rng.integers(0, 256, (6, 3, 8, 8)), dtype=torch.uint8)
    targets = torch.tensor(rng.random((6, 4)) < 0.5, dtype=torch.float32)
    for mixup, cutmix in ((0.4, 0.0), (0.0, 1.0)):
        options = BatchOptions(random_erase=0, mixup_alpha=mixup, cutmix_alpha=cutmix, mix_prob=1.0, seed=0)
        inputs = BatchInput.for_training(options, 4, 0, ((0.5,) * 3, (0.25,) * 3))
        x = inputs(pixels)
        mixed, mixed_targets = inputs.augment(x, targets, epoch=0, batch=1)
        if cutmix:  # the share of each image's pixels (all three channels) left as they were
            lam = (mixed == x).all(dim=1).flatten(1).float().mean(dim=1)[0].item()
        else:
            lam = ((mixed - x.roll(1, 0)) / (x - x.roll(1, 0))).flatten()[0].item()
        assert 0 < lam < 1
        assert torch.allclose(mixed_targets, lam * targets + (1 - lam) * targets.roll(1, 0), atol=1e-4)


def test_a_csv_without_validation_carves_its_fraction_by_label_set_and_class_names_order_its_classes(csv_files,
                                                                                                   tmp_path):
    """--val_fraction of the training CSV, stratified by label set (8 sets of 4 rows: 1 of each to validation),
    said at start-up; --class_names sets the class order (and may name a class no row has)."""
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    (tmp_path / "names.txt").write_text("road\ncloud\nfield\nsnow\n")
    args = parse_args(["--train_csv", str(csv_files / "train.csv"), "--val_fraction", "0.25", "--image_size", "16",
                       "--class_names", str(tmp_path / "names.txt")])
    train, val, names, notes = datasets_for(args)
    assert names == ["road", "cloud", "field", "snow"] and (len(train), len(val)) == (24, 8)
    label_sets = sorted(tuple(sorted(row)) for row in val.dataset.labels)
    assert label_sets == sorted(tuple(sorted(names.index(n) for n in tags(i))) for i in range(8))  # one of each
    assert "stratified by label set" in notes[0]
    assert torch.equal(val[0]["labels"], torch.zeros(4).index_fill_(0, torch.tensor(val.dataset.labels[0],
                                                                                  dtype=torch.int64), 1.0))


def test_multi_label_data_is_cropped_keeping_most_of_each_image(tagged, csv_files):
    """A random crop of 8 % of the area cuts labelled objects out of a multi-label image while their labels stay on:
    multi-label data (a list column, CSV files of names) crops 85-100 % by default at any size, says so and records
    it; the same files' folder as one label a sample, of 128 px, keeps ImageNet's 8-100 %; --train_crop_scale wins."""
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    def train_crop(*argv):
        train = datasets_for(parse_args([*map(str, argv), "--image_size", "128"]))[0]
        crop = train.dataset.preset(0)[0].transforms[0]
        return tuple(crop.scale), tuple(crop.ratio)

    ratio = (3 / 4, 4 / 3)
    assert train_crop("--dataset", tagged) == ((0.85, 1.0), ratio)
    assert train_crop("--train_csv", csv_files / "train.csv", "--val_csv", csv_files / "val.csv") == ((0.85, 1.0),
                                                                                                     ratio)
    assert train_crop("--dataset", tagged, "--train_crop_scale", "0.3", "0.9") == ((0.3, 0.9), ratio)
    assert train_crop("--train_dir", csv_files, "--val_dir", csv_files) == ((0.08, 1.0), ratio)  # a folder: one label


def test_wandbs_table_of_images_shows_each_samples_predicted_and_true_label_sets():
    """The wandb table of a validation's first images (utils/reporting/trackers.py) takes what the task decides: a
    multi-label sample's labels at the threshold and its true ones, written as the task writes them."""
    from utils.evaluation.tasks import task_for
    from utils.reporting import trackers

    task = task_for(True, 4, threshold=0.6)
    logits = torch.logit(torch.tensor([[0.7, 0.2, 0.6, 0.1], [0.1, 0.59, 0.1, 0.1], [0.9, 0.9, 0.9, 0.9]]))
    batch = {"pixel_values": torch.zeros(3, 3, 8, 8, dtype=torch.uint8),
             "labels": torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)}
    images, predicted, true = trackers.examples(batch, logits, task.decided)
    assert len(images) == 3 and predicted == [[0, 2], [], [0, 1, 2, 3]] and true == [[0, 3], [], [0, 1, 2, 3]]
    names = ["cat", "dog", "car", "sky"]
    assert [task.label_text(p, names) for p in predicted] == ["cat car", "(none)", "cat dog car sky"]
    single = task_for(False, 4)  # one class a sample: the top one
    one = {**batch, "labels": torch.tensor([0, 3, 2])}
    assert trackers.examples(one, logits, single.decided)[1:] == ([0, 1, 0], [0, 3, 2])


def test_a_sample_that_fails_to_load_has_no_positives_and_a_streamed_label_out_of_range_fails_it():
    """Multi-hot targets of samples that cannot be used: a file that does not decode (ImageRows, StreamRows) gets
    all zeros, as its pixels are zeros; a streamed row naming a class past the class count is a bad sample with
    the index in its error (load_item's check of a single label), not an IndexError that ends the run."""
    import io

    import datasets
    from torchvision.transforms import v2

    from utils.data.datasets.images import ImageRows
    from utils.data.datasets.label_kinds import MultiHot
    from utils.data.streaming.rows import StreamRows
    from utils.data.transforms.images import Fixed

    def png(value):
        buffer = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buffer, "PNG")
        return buffer.getvalue()

    images = [{"bytes": png(10), "path": "a.png"}, {"bytes": png(20), "path": "b.png"},
              {"bytes": b"not an image", "path": "c.png"}]
    features = datasets.Features(image=datasets.Image(decode=False), label=datasets.List(datasets.Value("int64")))
    in_range = datasets.Dataset.from_dict({"image": images, "label": [[0, 2], [1], [1]]}, features=features)
    rows = ImageRows(in_range, Fixed(v2.Identity(), 8), decoded=False, targets=MultiHot(3))
    assert [rows[i]["labels"].tolist() for i in range(3)] == [[1, 0, 1], [0, 1, 0], [0, 0, 0]]
    assert [rows[i]["valid"] for i in range(3)] == [True, True, False]

    streamed = datasets.Dataset.from_dict({"image": images, "label": [[0, 2], [1, 3], [1]]}, features=features)
    stream = StreamRows(streamed.to_iterable_dataset(num_shards=1), Fixed(v2.Identity(), 8), 0, 8, 0, 1, 3, 3, 3, {}, 1,
                        MultiHot(3))
    stream.set_epoch(0)
    items = {item["source"] or "a.png": item for item in stream}
    assert items["a.png"]["valid"] and items["a.png"]["labels"].tolist() == [1, 0, 1]
    assert not items["b.png"]["valid"] and "label 3 is not one of the 3 classes" in items["b.png"]["error"]  # the edge
    assert not items["c.png"]["valid"]
    assert items["b.png"]["labels"].tolist() == items["c.png"]["labels"].tolist() == [0, 0, 0]
