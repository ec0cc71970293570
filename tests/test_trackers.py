"""Dashboards: TensorBoard and wandb (offline) get the metrics.jsonl numbers; one wandb run per job."""

import pytest
from conftest import TINY, drawn, main_fails, read_json, read_jsonl
from ranks import ranks_ok

from utils.data.datasets.synthetic import SyntheticDataset

FAST = [*TINY, "--warmup_epochs", "0", "--log_every", "2"]


def offline(tmp_path):
    return {"WANDB_MODE": "offline", "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}


def wandb_runs(out):
    return sorted(p.name for p in (out / "wandb").glob("offline-run-*"))


@pytest.mark.slow
def test_report_to_all_writes_the_same_numbers_to_both(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    ranks_ok([*drawn(FAST), "--epochs", "2", "--report_to", "all", "--output_dir", out], nproc=1, env=offline(tmp_path))
    runs = wandb_runs(out)
    assert len(runs) == 1 and (out / "wandb" / runs[0] / f"run-{runs[0].rsplit('-', 1)[1]}.wandb").is_file()
    events = EventAccumulator(str(out / "train-classification"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    rows = read_jsonl(out / "metrics.jsonl")
    keys = {key for row in rows for key in row} - {"step"}
    # per step, per epoch and per validation, per-class accuracy included: every figure, both places
    assert {"train_loss", "lr", "img_per_s", "img_per_s_per_device", "data_time_frac", "epoch_img_per_s",
            "epoch_data_time_frac", "val_top1", "val_macro_f1", "val_class_acc/class_0"} <= keys
    assert set(events.Tags()["scalars"]) == keys
    for key in keys:
        expected = [(r["step"], r[key]) for r in rows if key in r]
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in logged] == [s for s, _ in expected], key
        assert [v for _, v in logged] == pytest.approx([v for _, v in expected], rel=1e-6), key
    assert {"curves", "confusion_matrix", "calibration", "top_losses"} <= set(events.Tags()["images"])  # the PNGs
    state = read_json(out / "checkpoints" / "epoch_1" / "training_state.json")
    assert state["tracker_run_id"] == runs[0].rsplit("-", 1)[1]
    # the options as TensorBoard's hyperparameters: scalars, a list option as its text (--probe_lrs' default)
    import yaml

    hparams = yaml.safe_load(one((out / "train-classification").glob("*/hparams.yml")).read_text())
    assert hparams["probe_lrs"] == str([0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0])
    assert hparams["epochs"] == 2

    # wandb: its own confusion chart (the evaluate module's counts) and a table of validation images
    media = out / "wandb" / runs[0] / "files" / "media" / "table"
    val = [r for r in rows if "val_top1" in r]
    for row in val:
        cells = read_json(one(media.glob(f"val_confusion_matrix_table_{row['step']}_*.table.json")))
        assert cells["columns"] == ["Actual", "Predicted", "nPredictions"]
        assert sum(c[2] for c in cells["data"]) == row["val_samples"] == 37
        assert sum(c[2] for c in cells["data"] if c[0] == c[1]) == round(row["val_top1"] * 37)
    # the last chart, cell by cell, is the confusion_matrix.csv (rows: true class), so not transposed
    csv_rows = [line.split(",") for line in (out / "confusion_matrix.csv").read_text().splitlines()]
    chart = {(c[0], c[1]): c[2] for c in cells["data"]}
    assert chart == {(r[0], name): int(n) for r in csv_rows[1:] for name, n in zip(csv_rows[0][1:], r[1:])}
    assert any(chart[a, b] != chart[b, a] for a, b in chart)  # not symmetric: a transposed chart would fail
    for row in val:
        table = read_json(one(media.glob(f"val_examples_{row['step']}_*.table.json")))
        assert table["columns"] == ["image", "predicted", "true", "correct"]
        first = SyntheticDataset(37, 16, 7, seed=2)  # the val set; 8 images: the main process's first batch
        assert [r[2] for r in table["data"]] == [f"class_{first[i]['labels']}" for i in range(8)]
        assert all(r[3] == (r[1] == r[2]) for r in table["data"])
    # at the end, the table of predictions: the 24 highest losses of top_losses.csv, in its order, then 13 others
    final = read_json(one(media.glob(f"val_predictions_{val[-1]['step']}_*.table.json")))
    assert final["columns"] == ["image", "true", "predicted", "probability", "loss", "which"]
    top = list(__import__("csv").DictReader((out / "top_losses.csv").open()))
    assert [r[4] for r in final["data"][:24]] == pytest.approx([float(r["loss"]) for r in top], abs=1e-5)
    assert [r[5] for r in final["data"]] == ["top loss"] * 24 + ["sample"] * 13
    assert max(r[4] for r in final["data"][24:]) <= min(r[4] for r in final["data"][:24])
    # and at each validation that beat every earlier one's top-1, the same table as val_predictions_best
    best = [row["step"] for i, row in enumerate(val) if all(row["val_top1"] > r["val_top1"] for r in val[:i])]
    logged = sorted(int(p.name.split("_")[3]) for p in media.glob("val_predictions_best_*.table.json"))
    assert logged == best and best[0] == val[0]["step"]


def one(paths):
    paths = list(paths)
    assert len(paths) == 1, paths
    return paths[0]


@pytest.mark.slow
def test_one_wandb_run_for_a_2_process_job_and_resume_continues_it(tmp_path):
    out = tmp_path / "run"
    argv = [*FAST, "--epochs", "2", "--report_to", "wandb", "--output_dir", out]
    ranks_ok([*argv, "--max_train_steps", "5"], nproc=2, env=offline(tmp_path))  # stops mid-epoch 1: step_5
    first = wandb_runs(out)
    assert len(first) == 1  # one run for the job, not one per process
    run_id = first[0].rsplit("-", 1)[1]
    assert read_json(out / "checkpoints" / "step_5" / "training_state.json")["tracker_run_id"] == run_id
    ranks_ok([*argv, "--resume", "latest"], nproc=2, env=offline(tmp_path))
    runs = wandb_runs(out)
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs)  # the same run, continued


def test_online_wandb_without_login_is_one_line_before_anything(tmp_path, monkeypatch, capsys):
    for name, value in {"WANDB_MODE": "", "WANDB_API_KEY": "", "HOME": str(tmp_path),
                        "NETRC": str(tmp_path / "no-netrc")}.items():
        monkeypatch.setenv(name, value)  # read when the run starts
    out = tmp_path / "run"
    code, err = main_fails([*FAST, "--report_to", "wandb", "--output_dir", out], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1
    assert "report_to: wandb is online but not logged in: run `wandb login`" in errors[0]
    assert "WANDB_MODE=offline" in errors[0] and not out.exists()


@pytest.mark.slow
def test_a_multi_label_runs_wandb_table_shows_each_images_label_sets(tmp_path):
    """The table of a validation's first images on a multi-label run: each image's labels at the threshold and its
    true ones, written as the task writes them (names, "(none)" for none), correct when the sets are equal."""
    out = tmp_path / "run"
    ranks_ok(["--dataset", "multi_digits", "--epochs", "1", "--max_train_samples", "64", "--max_val_samples", "16",
              "--batch_size", "16", "--num_workers", "0", "--report_to", "wandb", "--output_dir", out], nproc=1,
             env=offline(tmp_path))
    media = out / "wandb" / wandb_runs(out)[0] / "files" / "media" / "table"
    table = read_json(one(media.glob("val_examples_*.table.json")))
    assert table["columns"] == ["image", "predicted", "true", "correct"] and len(table["data"]) == 16
    names = set(read_json(out / "labels.json").values())
    for _, predicted, true, correct in table["data"]:
        for cell in (predicted, true):
            assert cell == "(none)" or set(cell.split(" ")) <= names, cell
        assert correct == (predicted == true)
