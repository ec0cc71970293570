"""The kind of labels as one hierarchy: run.json names it and one reader gives it back (old records' bool too), and the
report draws and tabulates what the kind says, whatever keys its figures happen to hold."""

import json

import pytest
from conftest import TINY, read_json

from utils.evaluation.tasks import MultiLabel, SingleLabel, read_kind, recorded_kind, task_for


def recorded(tmp_path, multi_label):
    """A run folder's run.json and labels.json as a run of TINY's options on data of this kind writes them."""
    from utils.config.options import parse
    from utils.run.trained import trained_run, write_record

    settings = parse(TINY)
    write_record(tmp_path, trained_run(settings, ["a", "b", "c"], task_for(multi_label, 3).multi_label))
    (tmp_path / "labels.json").write_text(json.dumps({"0": "a", "1": "b", "2": "c"}))
    return read_json(tmp_path / "run.json")


@pytest.mark.parametrize("multi_label, name", [(False, "single_label"), (True, "multi_label")])
def test_run_json_names_the_kind_and_reads_it_back_as_old_records_said_it(tmp_path, multi_label, name):
    from utils.run.trained import read_run
    from utils.drivers.trial_run import objective_key

    record = recorded(tmp_path, multi_label)
    assert record["label_kind"] == name and "multi_label" not in record  # by name, the bool gone
    assert read_run(tmp_path).label_kind == name and read_kind(tmp_path).name == name
    (tmp_path / "config.yaml").write_text("track_metric: null\nmodel_ema: false\n")
    assert objective_key(tmp_path, "tracked") == ("val_map" if multi_label else "val_top1")
    old = {key: value for key, value in record.items() if key != "label_kind"}
    for said in ({"multi_label": multi_label}, {}):  # a run.json written before the kind was named
        if said or not multi_label:  # (one without the bool was single-label)
            (tmp_path / "run.json").write_text(json.dumps({**old, **said}))
            assert read_run(tmp_path).label_kind == name and read_kind(tmp_path).name == name
            assert objective_key(tmp_path, "tracked") == ("val_map" if multi_label else "val_top1")
    assert recorded_kind({"label_kind": "multi_label", "multi_label": False}) is MultiLabel  # the name wins


def multi_label_figures():
    """A multi-label run's figures (2 classes), with a confusion matrix and per-class accuracy it never has: keys that
    a report guessing the kind from them would take for single-label figures."""
    task = task_for(True, 2)
    figures = {"label_kind": task.name, "per_class_ap": [0.5, None], "class_support": [3, 0], "threshold": 0.5,
               "true_positives": [2, 0], "false_positives": [1, 0], "false_negatives": [1, 0],
               "true_negatives": [4, 8], "calibration_bins": None}
    return {**figures, "confusion_matrix": [[1, 0], [0, 1]], "per_class_accuracy": [1.0, 1.0]}


def test_the_report_draws_and_tabulates_what_the_kind_says_not_what_the_keys_suggest(tmp_path):
    from utils.reporting import plots, report

    figures = multi_label_figures()
    assert [path.name for _, path in report.pictures(tmp_path, figures, ["a", "b"])] == ["per_class_ap.png"]
    assert report.per_class_table(figures, ["a", "b"]).splitlines()[0].startswith("per-class AP")
    report.write(tmp_path, {"class_names": ["a", "b"]}, figures, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["per_class_counts.csv", "results.json"]
    single = {**figures, "label_kind": "single_label"}  # the same keys, said to be single-label: drawn as such
    assert [path.name for _, path in report.pictures(tmp_path, single, ["a", "b"])] == ["confusion_matrix.png"]
    row = {"step": 4, "epoch": 1.0, "val_loss": 0.5, "val_top1": 0.75, "val_topk": 1.0, "topk": 2, "val_map": 0.6,
           "val_f1_micro": 0.4, "threshold": 0.3}  # both kinds' figures in the row: the kind picks its own
    legends = {kind: [t.get_text() for t in plots.curves_figure([row], kind).axes[3].get_legend().get_texts()]
               for kind in (SingleLabel, MultiLabel)}
    assert legends[MultiLabel] == ["val mAP (last 0.6000)", "val F1 micro at 0.3 (last 0.4000)"]
    assert legends[SingleLabel] == ["val top-1 (last 0.7500)", "val top-2 (last 1.0000)"]


def test_the_model_card_shows_the_figures_of_the_kind_its_run_recorded(tmp_path):
    from types import SimpleNamespace

    from utils.reporting.model_folder import model_card

    results = {"val_map": 0.61, "val_f1_micro": 0.5, "val_f1_macro": 0.4, "val_loss": 1.2, "threshold": 0.3,
               "val_top1": 0.9, "topk": 5, "val_topk": 1.0, "macro_f1": 0.8, "dataset": "d", "train_samples": 8,
               "class_names": ["a", "b"], "epochs_completed": 1, "world_size": 1, "val_samples": 4}
    chosen = SimpleNamespace(name="resnet18", ema=False)
    recorded(tmp_path, True)
    card = model_card("me/m", chosen, results, "cmd", read_kind(tmp_path))
    assert "| val mAP | 0.6100 |" in card and "top-1" not in card
    assert "| val top-1 | 0.9000 |" in model_card("me/m", chosen, results, "cmd", SingleLabel)


def test_the_data_side_of_each_kind_refuses_what_its_samples_cannot_take_and_stratifies_at_the_edge():
    """Multi-label rows cannot have their one label flipped nor a class's share kept: refused in one line; one label
    a sample takes both. Stratified folds need a sample of each class in each fold: a class with exactly as many
    samples as folds is enough, one fewer is refused."""
    from utils.data.datasets.label_kinds import ClassIndex, MultiHot
    from utils.data.errors import DataError

    for option in ("flip_labels", "imbalance"):
        with pytest.raises(DataError, match=f"^{option}: "):
            MultiHot.refuse(option)
        ClassIndex.refuse(option)  # nothing to refuse
    keys, how = ClassIndex.strata([0, 0, 0, 1, 1, 1], 3, ["a", "b"])
    assert how == "by class" and keys.tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(DataError, match="^folds: class 'b' has 2 training samples, fewer than the 3 folds"):
        ClassIndex.strata([0, 0, 0, 1, 1], 3, ["a", "b"])
