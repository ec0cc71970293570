"""k-fold cross-validation (--folds, crossval.py), out-of-fold predictions, label issues (cleanlab), --exclude and
--flip_labels (utils/data/sources/folds.py, utils/run/split_records.py, utils/drivers/cross_validation.py and
label_issues.py)."""

import csv
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
import torch

from conftest import ROOT, SMALL_MODEL, environment, main_fails, read_json, read_jsonl
from ranks import run_ranks

# odd-sized folds of 100 and 101
SMALL = ["--max_train_samples", "301", "--num_workers", "0", "--image_size", "16", "--no_plots"]


def data_options(**changes):
    from utils.config.options import parse

    settings = parse(["--max_train_samples", "301"])
    return dataclasses.replace(settings.data, **changes)


def digits_train():
    from utils.data.sources.digits import load_digits_dataset
    from utils.data.sources.splits import subset

    return subset(load_digits_dataset()["train"], 301)


def folds_of(train, **changes):
    """Each sample's fold, from K runs of `remake` (one a held-out fold), and the held-out names of each."""
    from utils.data.sources.folds import remake

    held = {}
    for fold in range(changes["folds"]):
        trained, val, remade, _ = remake(train, None, data_options(fold=fold, **changes))
        held[fold] = remade
        assert len(val) == len(remade.held_out) and val["label"][:] == [train["label"][i] for i in remade.held_index]
        rest = [i for i in range(len(train)) if i not in set(remade.held_index)]  # trained on: the others, only
        assert trained["label"][:] == [train["label"][i] for i in rest]
    return held


def test_the_folds_partition_the_training_split_stratified_whatever_the_training_seed():
    train = digits_train()
    held = folds_of(train, folds=4)
    places = sorted(i for remade in held.values() for i in remade.held_index)
    assert places == list(range(len(train)))  # every sample in exactly one fold
    labels = np.asarray(train["label"][:])
    for k in range(10):  # each class spread over the folds as evenly as it divides
        counts = [int((labels[remade.held_index] == k).sum()) for remade in held.values()]
        assert max(counts) - min(counts) <= 1, (k, counts)
    again = folds_of(train, folds=4, seed=7)  # another --seed of training: the same folds
    assert all(again[f].held_index == held[f].held_index for f in held)
    other = folds_of(train, folds=4, fold_seed=1)  # another fold seed: other folds
    assert any(other[f].held_index != held[f].held_index for f in held)


def test_groups_never_straddle_folds(tmp_path):
    train = digits_train()
    groups = tmp_path / "groups.csv"
    rng = np.random.default_rng(0)
    patient = {str(i): f"p{rng.integers(40)}" for i in range(len(train))}
    groups.write_text("sample,group\n" + "".join(f"{i},{g}\n" for i, g in patient.items()))
    held = folds_of(train, folds=3, groups=str(groups))
    fold_of_group = {}
    for fold, remade in held.items():
        for name in remade.held_out:
            assert fold_of_group.setdefault(patient[name], fold) == fold
    assert sorted(i for remade in held.values() for i in remade.held_index) == list(range(len(train)))


def test_exclude_removes_exactly_the_named_samples_and_a_name_that_matches_none_is_one_line(tmp_path):
    from utils.data.errors import DataError
    from utils.data.sources.folds import remake

    train = digits_train()
    named = tmp_path / "issues.csv"
    named.write_text("rank,sample\n1,17\n2,4\n3,300\n4,0\n")  # the first and the last samples among them
    kept, _, remade, notes = remake(train, None, data_options(exclude=str(named)))
    assert remade.excluded == 4 and len(kept) == len(train) - 4
    left = [i for i in range(len(train)) if i not in (0, 4, 17, 300)]
    assert kept["label"][:] == [train["label"][i] for i in left]
    for fold in range(3):  # folds of what is left: each held-out sample named as the split names it
        _, val, remade, _ = remake(train, None, data_options(exclude=str(named), folds=3, fold=fold))
        assert not {"0", "4", "17", "300"} & set(remade.held_out)
        assert val["label"][:] == [train["label"][int(name)] for name in remade.held_out]
    named.write_text("sample\n17\n301\n")
    with pytest.raises(DataError, match=r"exclude: 1 of the 2 samples .* not in the training split, e.g. '301'"):
        remake(train, None, data_options(exclude=str(named)))


def test_flipped_labels_are_the_same_in_every_fold_and_the_validation_split_is_untouched():
    from utils.data.sources.folds import remake

    train = digits_train()
    labels = train["label"][:]
    runs = [remake(train, None, data_options(flip_labels=0.1, folds=3, fold=fold)) for fold in range(3)]
    flipped = runs[0][2].flipped
    assert len(flipped) == 30 and all(run[2].flipped == flipped for run in runs)
    assert all(labels[int(name)] == label != given for name, label, given in flipped)
    held = {i: given for run in runs for i, given in zip(run[2].held_index, run[1]["label"][:])}
    changed = {i for i in held if held[i] != labels[i]}
    assert changed == {int(name) for name, _, _ in flipped}  # only those, each to its recorded label
    val = object()
    assert remake(train, val, data_options(flip_labels=0.1))[1] is val  # the split's own validation as it was


def test_the_flips_are_a_function_of_the_sample_whatever_exclude_leaves_out(tmp_path):
    """--flip_labels with --exclude (the retrain after label issues): the samples left are flipped as they were without
    it, to the same labels; the excluded flips are gone, not drawn again among the rest."""
    from utils.data.sources.folds import remake

    train = digits_train()
    _, _, alone, _ = remake(train, None, data_options(flip_labels=0.1))
    dropped = [name for name, _, _ in alone.flipped[:20]] + ["0", "1", "2"]  # 20 flipped samples, and 3 others
    named = tmp_path / "issues.csv"
    named.write_text("sample\n" + "\n".join(dropped) + "\n")
    kept, _, both, notes = remake(train, None, data_options(flip_labels=0.1, exclude=str(named)))
    assert both.flipped == [row for row in alone.flipped if row[0] not in dropped] and len(both.flipped) == 10
    given = dict(zip([name for name in map(str, range(len(train))) if name not in dropped], kept["label"][:]))
    assert all(given[name] == label for name, _, label in both.flipped)  # trained on the same wrong label
    assert notes[-1].endswith(f"left out of training ({named}), 20 of them flipped")


def test_each_fold_is_launched_on_the_cut_the_driver_reads(tmp_path):
    """With --fold_seed 3, fold f's command holds out what the driver reads as seed 3's fold f (its pictures, its
    record), not the default seed's."""
    from utils.config.options import parse
    from utils.data.sources.folds import remake
    from utils.drivers.cross_validation import SCRIPT, CrossValidation

    train = digits_train()
    driver, default = folds_of(train, folds=3, fold_seed=3), folds_of(train, folds=3)
    cv = CrossValidation(tmp_path, 3, 3, sys.executable, tuple(SMALL))
    for fold in range(3):
        command = cv.command(fold)
        settings = parse(command[command.index(str(SCRIPT)) + 1:])
        assert (settings.data.folds, settings.data.fold, settings.data.fold_seed) == (3, fold, 3)
        launched = remake(train, None, settings.data)[2].held_index
        assert launched == driver[fold].held_index and launched != default[fold].held_index


@pytest.mark.slow
def test_a_file_a_fold_skips_as_unreadable_is_named_and_the_others_keep_their_pictures(images, tmp_path):
    """Four corrupt training files with --skip_bad_images: each fold's run leaves them out; crossval.py finishes, names
    them (its line, the first three; cv_results.json, all), and the out-of-fold rows are every other sample once; the
    picture of each other sample of a fold that held one out is that sample's (placed by its index in the split, not
    by its row's order)."""
    from utils.config.options import parse
    from utils.reporting.failures import picture
    from utils.drivers.cross_validation import CrossValidation, held_out_pictures

    data = tmp_path / "data"
    shutil.copytree(images, data)
    broken = data / "tr" / "dog" / "zz_broken.png"
    others = [data / "tr" / "cat" / "zz_b1.png", data / "tr" / "eel" / "zz_b2.png", data / "tr" / "eel" / "zz_b3.png"]
    for path in (broken, *others):
        path.write_bytes(b"not an image")
    named = sorted(map(str, (broken, *others)))
    base = ["--model", SMALL_MODEL, "--train_dir", str(data / "tr"), "--val_dir", str(data / "va"), "--image_size",
            "16", "--batch_size", "4", "--epochs", "1", "--num_workers", "0", "--skip_bad_images", "--no_plots"]
    out = tmp_path / "cv"
    done = subprocess.run([sys.executable, str(ROOT / "crossval.py"), "--output_dir", str(out), "--folds", "3",
                           "--launch", sys.executable, "--", *base], cwd=ROOT, env=environment(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (f"crossval.py: 4 file(s) of the training split skipped as unreadable (--skip_bad_images), so in no "
            f"out-of-fold prediction and no label issue: {', '.join(named[:3])} ... (cv_results.json)") \
        in done.stdout.splitlines()
    assert read_json(out / "cv_results.json")["skipped_images"] == named
    oof = table(out / "oof_predictions.csv")
    assert len(oof) == 36 and not set(named) & {row["sample"] for row in oof}
    assert sorted(int(row["index"]) for row in oof) == sorted(set(range(40)) - {12, 25, 38, 39})  # each class's last
    broken_place = 25
    cv = CrossValidation(out, 3, 0, sys.executable, tuple(base))
    for fold in range(3):  # the fold that holds it out
        settings = parse([*base, "--folds", "3", "--fold", str(fold)])
        _, val, _, _ = settings.source.datasets(settings.data, settings.input)
        names = settings.source.remade.held_out
        if str(broken) in names:
            break
    rows = [(int(row["index"]), row["sample"], int(row["fold"])) for row in oof if row["fold"] == str(fold)]
    assert str(broken) in names and any(row[0] > broken_place for row in rows)  # samples after it in its fold
    for row, shown in zip(rows, held_out_pictures(cv, rows)):
        assert np.array_equal(shown, picture(val, names.index(row[1]))), row


def test_the_options_after_the_dashes_are_checked_as_a_fold_of_the_folds_asked_for(tmp_path, capsys):
    import crossval

    assert crossval.main(["--output_dir", str(tmp_path / "x"), "--folds", "3", "--", "--probe", "knn"]) == 2
    said = capsys.readouterr().err.strip().splitlines()  # (it said "got 2" whatever --folds was)
    assert len(said) == 1 and said[0].endswith("--probe knn votes instead: use --probe linear, got 3"), said
    assert not (tmp_path / "x").exists()


def test_a_label_issues_quality_is_shown_to_two_significant_digits():
    """The given label's probability, often under 0.01: "quality 0.00" on every picture said nothing."""
    import numpy as np

    from utils.drivers.label_issues import issues_figure

    issues = [((4, "a/4.png", 1, "cat"), "dog", 0.0012), ((9, "a/9.png", 0, "dog"), "cat", 0.31)]
    figure = issues_figure(issues, [np.zeros((8, 8, 3), np.uint8)] * 2)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert [title.splitlines()[-1] for title in titles] == ["quality 0.0012", "quality 0.31"]


@pytest.mark.parametrize("argv, line", [
    (["--folds", "1", "--fold", "0"], "folds: must be >= 2"),
    (["--folds", "3", "--fold", "3"], "fold: must be in 0..2 (--folds 3)"),
    (["--folds", "3"], "folds: needs --fold I"),
    (["--fold", "1"], "fold: needs --folds K"),
    (["--dataset", "synthetic", "--folds", "3", "--fold", "0"], "folds: remakes the training split of map-style"),
    (["--dataset", "moving_digits", "--folds", "3", "--fold", "0"], "folds: remakes the training split of map-style"),
    (["--group_column", "patient", "--folds", "3", "--fold", "0"], "group_column: names a column of --train_csv"),
    (["--folds", "3", "--fold", "0", "--max_val_samples", "10"], "max_val_samples: with --folds the held-out fold"),
    (["--flip_labels", "1.5"], "flip_labels: must be in (0, 1)"),
    (["--exclude", "/nonexistent.csv"], "exclude: no file /nonexistent.csv"),
])
def test_options_that_cannot_apply_are_one_line(argv, line, capsys):
    code, err = main_fails(argv, capsys)
    assert code == 2 and line in err and len(err.strip().splitlines()) == 1, err


def test_a_class_with_fewer_samples_than_folds_is_named(capsys):
    code, err = main_fails(["--max_train_samples", "30", "--folds", "5", "--fold", "0", "--num_workers", "0"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "folds: class '" in err and "fewer than the 5 folds" in err, err


def test_a_group_column_missing_or_with_empty_values_is_one_line(tmp_path, capsys):
    from conftest import make_folder

    root = make_folder(tmp_path / "images", {"cat": 6, "dog": 6})
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    table = tmp_path / "train.csv"
    table.write_text("path,labels,site\n" + "".join(f"{f},{f.parts[0]},{'s1' if i % 3 else ''}\n"
                                                   for i, f in enumerate(files)))
    base = ["--train_csv", table, "--data_root", root, "--folds", "2", "--fold", "0", "--num_workers", "0"]
    code, err = main_fails([*base, "--group_column", "hospital"], capsys)
    assert code == 2 and "group_column:" in err and "no column 'hospital'" in err and len(err.strip().splitlines()) == 1
    code, err = main_fails([*base, "--group_column", "site"], capsys)
    assert code == 2 and "group_column: 4 training samples have an empty 'site'" in err, err


# One cross-validation the end-to-end tests share: 3 folds of 601 digits (held-out folds of 200, 200, 201), 5 % of the
# labels flipped, each fold one process (its launcher adds nothing the tests look at) on conftest.SMALL_MODEL (41 s
# against resnet18's 71); the smallest case found whose folds learn enough for cleanlab to find 80 % of the flips
# (601 samples, 10 epochs: 27 of 30 in 28 issues; 6 epochs, 25). A checkpoint every 20 steps (mid-epoch: 13 steps an
# epoch) for the kill test; every 2, each fold wrote 65 of them, a quarter of its time.
CV = ["--model", SMALL_MODEL, "--max_train_samples", "601", "--num_workers", "0", "--image_size", "16",
      "--epochs", "10", "--batch_size", "32", "--flip_labels", "0.05", "--checkpoint_every_steps", "20",
      "--keep_last", "2", "--no_plots"]


def crossval(out, *extra, **kw):
    return subprocess.Popen([sys.executable, str(ROOT / "crossval.py"), "--output_dir", str(out), "--folds", "3",
                             "--launch", sys.executable, *extra, "--", *CV], cwd=ROOT, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The shared cross-validation, run once per session: the first xdist worker to ask runs it, the other waits for
    it under a lock in the session's common temporary folder and reads it (none of the tests writes to it)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()  # one folder for every worker of this session: their basetemps' parent
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root  # (-n 0: the parent of every session)
    out, said = root / "crossval_shared" / "cv", root / "crossval_shared" / "said.txt"
    with open(root / "crossval_shared.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.is_file():
            shutil.rmtree(out.parent, ignore_errors=True)
            out.parent.mkdir()
            job = crossval(out)
            printed = job.communicate(timeout=600)[0]
            assert job.returncode == 0, printed[-3000:]
            said.write_text(printed)
    return out, said.read_text()


def table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rescored(folder, argv, ema=False, checkpoint=None):
    """The held-out fold's class probabilities by a plain re-scoring of the fold run's saved weights (the EMA's with
    `ema`), as predict.py scores: its eval graph (the run's normalisation and model) on the validation's uint8
    pixels."""
    from utils.config.options import parse
    from utils.inference import EvalGraph
    from utils.run.trained import load_run

    run, model = load_run(folder, ema=ema, checkpoint=checkpoint)
    settings = parse([str(a) for a in argv])
    _, val, _, _ = settings.source.datasets(settings.data, settings.input)
    pixels = torch.stack([val[i]["pixel_values"] for i in range(len(val))])
    with torch.no_grad():
        return EvalGraph(model, run.input)(pixels).softmax(dim=1).numpy()


@pytest.mark.slow
def test_the_out_of_fold_file_holds_every_sample_once_with_its_fold_runs_probabilities(finished):
    out, said = finished
    oof = table(out / "oof_predictions.csv")
    assert [int(row["index"]) for row in oof] == list(range(601))  # every training sample once, in the split's order
    assert sorted(Counter(row["fold"] for row in oof).values()) == [200, 200, 201]
    classes = [str(k) for k in range(10)]
    for fold in range(3):
        rows = [row for row in oof if row["fold"] == str(fold)]
        probs = np.asarray([[float(row[c]) for c in classes] for row in rows])
        expected = rescored(out / f"fold_{fold}", [*CV, "--folds", "3", "--fold", fold])
        np.testing.assert_allclose(probs, expected, atol=2e-6)  # this fold's weights, none other's
        split = read_json(out / f"fold_{fold}" / "run.json")["split"]
        assert split == {"folds": 3, "fold": fold, "fold_seed": 0, "stratified": "by class", "flipped_labels": 30}
    flips = [(out / f"fold_{fold}" / "flipped_labels.csv").read_text() for fold in range(3)]
    assert flips[0] == flips[1] == flips[2] and len(flips[0].splitlines()) == 31


def test_crossval_says_each_validation_of_each_fold_as_it_comes(finished):
    """As a run's own lines do: which fold of how many, its epoch of its epochs, its tracked figure (the run's own), the
    time elapsed and left (none once the last fold's last epoch is in)."""
    import re

    out, said = finished
    lines = re.findall(r"^crossval\.py: fold (\d) of 3: epoch (\d+)/10, val_top1 (\S+); elapsed \S+, ~(\S+) left$",
                       said, re.M)
    assert [(int(fold), int(epoch)) for fold, epoch, _, _ in lines] == [(f, e) for f in range(3) for e in range(1, 11)]
    for fold, epoch, value, _ in lines:
        row = next(r for r in read_jsonl(out / f"fold_{fold}" / "metrics.jsonl") if r.get("epoch") == int(epoch)
                   and "val_top1" in r)
        assert value == f"{row['val_top1']:.4f}"
    assert lines[-1][3] == "0:00:00"


def test_an_interval_is_cut_to_what_its_figure_can_be():
    """A t interval over a few folds of a share near 1 (or 0) reaches past it: cut there (val_topk 1.0165 and worst
    recall -0.1298 were written before); a loss is cut at 0 only, --metrics' own figures not at all."""
    from utils.evaluation.metrics import figure_range
    from utils.drivers.label_issues import interval

    _, _, (low, high) = interval([1.0, 0.96, 1.0], figure_range("val_topk"))
    uncut = interval([1.0, 0.96, 1.0])[2]
    assert uncut[1] > 1.0 and (low, high) == (uncut[0], 1.0)
    assert interval([0.0, 0.2, 0.0], figure_range("val_worst_recall"))[2][0] == 0.0
    assert interval([0.02, 0.5, 0.03], figure_range("val_loss"))[2][0] == 0.0
    assert interval([0.02, 0.5, 0.03], figure_range("val_bleu"))[2][0] < 0  # a --metrics figure: no range known
    shares = ["val_top1", "val_ema_topk", "video_top1", "clip_ema_top1", "macro_f1", "val_map", "val_f1_micro",
              "val_exact_match", "val_ece", "val_balanced_accuracy", "val_recall_macro"]
    assert {figure_range(key) for key in shares} == {(0.0, 1.0)}
    assert {figure_range(key) for key in ("val_loss", "video_ema_loss", "val_map_classes", "test_videos")} == \
        {(0.0, float("inf"))}


@pytest.mark.slow
def test_cv_results_give_each_figure_per_fold_with_its_mean_and_t_interval(finished):
    from scipy import stats

    from utils.evaluation.metrics import figure_range

    out, said = finished
    summary = read_json(out / "cv_results.json")
    top1 = summary["figures"]["val_top1"]
    folds = [read_json(out / f"fold_{f}" / "results.json")["val_top1"] for f in range(3)]
    assert top1["folds"] == folds and sorted(summary["samples"]) == [200, 200, 201]
    assert top1["mean"] == pytest.approx(np.mean(folds)) and top1["std"] == pytest.approx(np.std(folds, ddof=1))
    half = stats.t.ppf(0.975, 2) * np.std(folds, ddof=1) / np.sqrt(3)
    assert top1["ci95"] == pytest.approx([np.mean(folds) - half, np.mean(folds) + half])
    assert {"val_balanced_accuracy", "val_loss", "macro_f1", "val_ece"} <= set(summary["figures"])
    for key, figure in summary["figures"].items():  # each inside what its figure can be
        low, high = figure_range(key)
        assert low <= figure["ci95"][0] <= figure["mean"] <= figure["ci95"][1] <= high, key
    assert f"val_top1 {top1['mean']:.4f}" in said


@pytest.mark.slow
def test_the_flipped_labels_are_found_among_the_label_issues(finished):
    out, said = finished
    flipped = {row["sample"]: row for row in table(out / "fold_0" / "flipped_labels.csv")}
    issues = table(out / "label_issues.csv")
    caught = [row for row in issues if row["sample"] in flipped]
    assert len(caught) / len(flipped) >= 0.8 and len(caught) / len(issues) >= 0.7, (len(caught), len(issues))
    assert all(row["given_label"] == flipped[row["sample"]]["given_label"] for row in caught)
    assert [int(row["rank"]) for row in issues] == list(range(1, len(issues) + 1))
    quality = [float(row["quality"]) for row in issues]  # ranked worst first, by self-confidence as scored
    assert quality == sorted(quality)
    assert (out / "label_issues.png").stat().st_size > 1000 and "Label issues" in (out / "report.html").read_text()


@pytest.mark.slow
def test_a_fold_on_two_processes_scores_each_held_out_sample_once_with_its_weights(finished, tmp_path):
    out, _ = finished
    argv = [*CV, "--folds", "3", "--fold", "2", "--epochs", "1", "--batch_size", "16"]
    job = run_ranks([*argv, "--output_dir", tmp_path / "run"], nproc=2)
    assert job.returncode == 0, job.report()
    rows = table(tmp_path / "run" / "fold_predictions.csv")
    one_process = [row["index"] for row in table(out / "oof_predictions.csv") if row["fold"] == "2"]
    assert [row["index"] for row in rows] == one_process  # the same fold, each sample once: no padding repeated
    probs = np.asarray([[float(row[str(k)]) for k in range(10)] for row in rows])
    np.testing.assert_allclose(probs, rescored(tmp_path / "run", argv), atol=2e-6)


@pytest.mark.slow
def test_a_cross_validation_killed_during_its_second_fold_resumes_to_the_same_files(finished, tmp_path):
    out, _ = finished
    again = tmp_path / "cv"
    again.mkdir()  # its first and last folds finished as the uninterrupted one's did (the same runs: time spared)
    shutil.copy(out / "crossval.json", again)
    for fold in (0, 2):
        shutil.copytree(out / f"fold_{fold}", again / f"fold_{fold}", ignore=shutil.ignore_patterns("checkpoints"))
    job = crossval(again, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list((again / "fold_1" / "checkpoints").glob("step_*")):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[0][-3000:]
        time.sleep(0.1)
    os.kill(job.pid, signal.SIGKILL)  # its fold's launcher gets SIGTERM (parent-death signal): it saves
    job.communicate()
    finished_again = crossval(again)
    said = finished_again.communicate(timeout=600)[0]
    assert finished_again.returncode == 0, said[-3000:]
    assert "fold 0 of 3" not in said and "fold 2 of 3" not in said and "fold 1 of 3 continues (--resume latest)" in said
    assert "resumed from" in (again / "fold_1" / "console.log").read_text()
    for name in ("oof_predictions.csv", "label_issues.csv", "cv_results.json"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.slow
def test_a_folder_of_another_cross_validation_is_refused_and_kept(finished, tmp_path, capsys):
    import crossval  # in this process: what is refused is refused before any fold starts

    out, _ = finished
    before = (out / "crossval.json").read_bytes()
    assert crossval.main(["--output_dir", str(out), "--folds", "4", "--", *CV]) == 2
    assert "holds a cross-validation with another folds (3)" in capsys.readouterr().err
    assert crossval.main(["--output_dir", str(out), "--folds", "3", "--", *CV, "--epochs", "11"]) == 2
    assert "holds a cross-validation with another base" in capsys.readouterr().err
    assert (out / "crossval.json").read_bytes() == before
    assert crossval.main(["--output_dir", str(tmp_path / "x"), "--folds", "3", "--", "--fold", "1"]) == 2
    assert "--fold: set by crossval.py" in capsys.readouterr().err and not (tmp_path / "x").exists()



@pytest.mark.slow
def test_multi_label_folds_partition_the_split_by_label_set_or_at_random():
    from utils.data.sources.folds import remake
    from utils.data.sources.multi_digits import load_multi_digits
    from utils.data.sources.splits import subset

    tiles = load_multi_digits()["train"]
    keys = [tuple(sorted(row)) for row in tiles["label"][:]]
    common = [i for i, key in enumerate(keys) if Counter(keys)[key] >= 3]  # each label set on every fold
    for train, how in ((tiles.select(common), "by label set"), (subset(tiles, 200), "at random")):
        places = []
        for fold in range(3):
            _, val, remade, _ = remake(train, None, data_options(folds=3, fold=fold))
            places += remade.held_index
            assert remade.how.startswith(how) and val["label"][:] == [train["label"][i] for i in remade.held_index]
        assert sorted(places) == list(range(len(train)))


def test_a_save_to_disk_datasets_group_column_keeps_each_group_in_one_fold(tmp_path):
    import datasets
    from PIL import Image

    from utils.data.sources.folds import remake
    from utils.data.sources.image_files import load_splits

    images = [Image.new("RGB", (8, 8), (i * 9, 0, 0)) for i in range(24)]
    sites = [f"site{i % 6}" for i in range(24)]
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=["a", "b"]),
                                 site=datasets.Value("string"))
    datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(24)], "site": sites},
                               features=features).save_to_disk(str(tmp_path / "ds"))
    seen = {}
    for fold in range(3):
        data = data_options(dataset=str(tmp_path / "ds"), group_column="site", folds=3, fold=fold,
                            max_train_samples=None)
        train, val, _, _ = load_splits(data)
        assert val is None and len(train) == 24  # no --val_fraction carve: a fold is the validation
        _, held, remade, _ = remake(train, val, data)
        assert "groups kept whole" in remade.how and len(held) == len(remade.held_index)
        for i in remade.held_index:
            assert seen.setdefault(sites[i], fold) == fold
    assert len(seen) == 6


@pytest.mark.slow
def test_with_model_ema_the_fold_predictions_are_the_averaged_weights(tmp_path):
    from conftest import run_main

    argv = [*CV, "--folds", "3", "--fold", "0", "--epochs", "1", "--max_train_samples", "121", "--model_ema",
            "--model_ema_decay", "0.5"]
    run_main([*argv, "--output_dir", tmp_path / "run"])
    rows = table(tmp_path / "run" / "fold_predictions.csv")
    probs = np.asarray([[float(row[str(k)]) for k in range(10)] for row in rows])
    np.testing.assert_allclose(probs, rescored(tmp_path / "run", argv, ema=True), atol=2e-6)  # what model/ holds
    assert np.abs(probs - rescored(tmp_path / "run", argv)).max() > 1e-3  # not the raw weights'


@pytest.mark.slow
def test_with_keep_best_the_fold_predictions_are_the_best_weights(tmp_path):
    from conftest import run_main

    argv = [*CV, "--folds", "3", "--fold", "1", "--epochs", "3", "--max_train_samples", "121", "--keep_best", "1"]
    run_main([*argv, "--output_dir", tmp_path / "run"])
    rows = table(tmp_path / "run" / "fold_predictions.csv")
    probs = np.asarray([[float(row[str(k)]) for k in range(10)] for row in rows])
    best = rescored(tmp_path / "run", argv, checkpoint=tmp_path / "run" / "best")
    np.testing.assert_allclose(probs, best, atol=2e-6)
    assert np.abs(probs - rescored(tmp_path / "run", argv)).max() > 1e-3  # not the final weights'


@pytest.mark.slow
def test_two_crossval_processes_share_the_folds_each_run_once(tmp_path, capsys):
    import crossval

    base = [*CV, "--max_train_samples", "121", "--epochs", "1"]
    command = [sys.executable, str(ROOT / "crossval.py"), "--output_dir", str(tmp_path / "cv"), "--folds", "2",
               "--launch", sys.executable, "--", *base]
    jobs = [subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) for _ in range(2)]
    said = [job.communicate(timeout=600)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], said
    for fold in range(2):  # each fold started once, by one of them
        console = (tmp_path / "cv" / f"fold_{fold}" / "console.log").read_text()
        assert console.count("$ ") == 1 and sum(f"fold {fold} of 2 starts" in s for s in said) == 1
    assert len(table(tmp_path / "cv" / "oof_predictions.csv")) == 121
    assert crossval.main(["--output_dir", str(tmp_path / "one"), "--folds", "1", "--", *base]) == 2
    assert "folds: must be >= 2" in capsys.readouterr().err and not (tmp_path / "one").exists()


@pytest.mark.parametrize("kept", ["digits_oof_3folds_8epochs", "digits_oof_3folds", "digits_oof_5folds"])
def test_label_issues_find_most_flips_at_high_precision_in_real_out_of_fold_predictions(kept):
    """The out-of-fold probabilities of `crossval.py --folds K -- --flip_labels 0.05` on the embedded digits (1,437
    samples, 72 flipped; the default recipe, and 8 epochs), kept in tests/data: the issues found hold at least 80 % of
    the flips, and at least 90 % of them are flips (cleanlab's default filter found 74-78 % at 3 folds)."""
    from utils.drivers.label_issues import find_issues

    kept = np.load(ROOT / "tests" / "data" / f"{kept}.npz")
    classes = [str(k) for k in range(10)]
    rows = [(i, str(i), int(fold), classes[label], probs.tolist())
            for i, (fold, label, probs) in enumerate(zip(kept["folds"], kept["labels"], kept["probs"]))]
    found = {row[0] for row, _, _ in find_issues(classes, rows, multi_label=False)}
    flipped = set(np.flatnonzero(kept["flipped"]).tolist())
    assert len(flipped) == 72
    assert len(found & flipped) / len(flipped) >= 0.8 and len(found & flipped) / len(found) >= 0.9, \
        (len(found & flipped), len(found))
