"""The real script, end to end: files it writes, exact validation on 1 vs 2 processes, LR invariance."""

import pytest
import torchvision
import yaml
from PIL import Image
from safetensors.torch import load_file

from conftest import SMALL_MODEL, TINY, drawn, read_json, read_jsonl, run_main, run_ok, snapshot
from ranks import ranks_ok

RESULT_KEYS = {"val_top1", "val_topk", "topk", "val_loss", "val_samples", "train_samples", "epochs_completed",
               "global_step", "world_size", "train_time_s", "model", "dataset", "skipped_images", "class_names",
               "nonfinite_steps_skipped", "macro_f1", "macro_precision", "macro_recall", "per_class_accuracy",
               "per_class_images", "val_balanced_accuracy", "val_worst_recall", "train_class_counts", "tracked_metric",
               "val_ece", "calibration_bins", "command", "batch"}


def test_main_in_process_writes_every_output(tmp_path, fresh_accelerate_state):
    import train_classification  # importing runs nothing

    out = tmp_path / "run"
    results = train_classification.main([*drawn(TINY), "--model", "resnet18", "--epochs", "2", "--warmup_epochs", "0.5",
                                         "--log_every", "3", "--save_every", "1", "--output_dir", str(out)])
    assert read_json(out / "results.json") == results
    assert set(results) == RESULT_KEYS
    assert results["batch"] == {"global_batch_size": 8, "processes": 1, "batch_size": 8, "grad_accum_steps": 1,
                                "found": False, "tried": []}  # how its global batch was taken, as typed
    assert {"top_losses.csv", "top_losses.png", "most_confused.csv", "calibration.png", "report.html"} <= \
        {p.name for p in out.iterdir()}  # where the model fails (test_failures.py says what they hold)
    assert len((out / "top_losses.csv").read_text().splitlines()) == 1 + 24
    assert (results["val_samples"], results["train_samples"], results["topk"]) == (37, 64, 5)
    assert (results["epochs_completed"], results["global_step"], results["world_size"]) == (2, 16, 1)
    assert 0 <= results["val_top1"] <= results["val_topk"] <= 1

    rows = read_jsonl(out / "metrics.jsonl")
    train_rows = [r for r in rows if "train_loss" in r]
    val_rows = [r for r in rows if "val_top1" in r]
    assert [r["step"] for r in train_rows] == [3, 6, 9, 12, 15]
    assert {"step", "epoch", "lr", "train_loss", "img_per_s"} <= set(train_rows[0])
    assert train_rows[0]["epoch"] == pytest.approx(3 / 8)
    assert [(r["step"], r["epoch"]) for r in val_rows] == [(8, 1.0), (16, 2.0)]
    assert {k: val_rows[-1][k] for k in ("val_top1", "val_topk", "val_loss", "val_samples")} == \
        {k: results[k] for k in ("val_top1", "val_topk", "val_loss", "val_samples")}

    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["output_dir"] == str(out) and saved["epochs"] == 2 and "config" not in saved

    model = torchvision.models.get_model("resnet18", num_classes=7)
    model.load_state_dict(load_file(out / "model.safetensors"))  # strict: a plain torchvision state dict
    assert (out / "checkpoints" / "epoch_0" / "training_state.json").is_file()
    state = read_json(out / "checkpoints" / "epoch_1" / "training_state.json")
    assert (state["epoch"], state["global_step"], state["epoch_end"], state["world_size"]) == (1, 16, True, 1)
    assert state["options"]["epochs"] == 2 and state["options"]["warmup_epochs"] == 0.5
    assert state["data"]["train_samples"] == 64 and state["validation_pending"] is False


@pytest.mark.slow
def test_default_dataset_is_the_embedded_digits(tmp_path):
    out = tmp_path / "run"
    run_main(["--max_train_steps", "2", "--epochs", "2", "--log_every", "1", "--output_dir", out])
    results = read_json(out / "results.json")
    assert (results["dataset"], results["train_samples"], results["val_samples"]) == ("digits", 1437, 360)
    assert (results["global_step"], results["epochs_completed"], results["topk"]) == (2, 0, 5)
    assert (out / "checkpoints" / "step_2" / "training_state.json").is_file()
    # the end-of-run pictures, from the default job (their content: test_report.py)
    for name, size in (("curves.png", (1100, 750)), ("confusion_matrix.png", (900, 750))):
        with Image.open(out / name) as picture:
            assert picture.format == "PNG" and picture.size == size, name
    table = (out / "confusion_matrix.csv").read_text().splitlines()
    assert table[0] == "true \\ predicted,0,1,2,3,4,5,6,7,8,9" and len(table) == 11
    assert sum(int(c) for line in table[1:] for c in line.split(",")[1:]) == 360


@pytest.mark.slow
def test_resume_continues_from_the_saved_epoch(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_main([*TINY, "--epochs", "3", "--save_every", "1", "--log_every", "1", "--output_dir", whole])
    run_main([*TINY, "--epochs", "3", "--log_every", "1", "--resume", whole / "checkpoints" / "epoch_0",
              "--output_dir", resumed])
    results = read_json(resumed / "results.json")
    assert (results["epochs_completed"], results["global_step"]) == (3, 24)
    lr = {r["step"]: r["lr"] for r in read_jsonl(whole / "metrics.jsonl") if "lr" in r}
    rows = [r for r in read_jsonl(resumed / "metrics.jsonl") if "lr" in r]
    assert [r["step"] for r in rows] == list(range(9, 25))  # continues after epoch 0's 8 steps
    assert all(r["lr"] == pytest.approx(lr[r["step"]], rel=1e-12) for r in rows)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    run_main([*TINY, "--epochs", "2", "--save_every", "1", "--output_dir", out])
    return out


@pytest.mark.parametrize("change, named", [
    (["--epochs", "4"], "other values of: epochs (2 -> 4); "),
    (["--batch_size", "4", "--lr", "0.2"], "other values of: batch_size (8 -> 4), lr (0.1 -> 0.2); "),
    (["--seed", "1"], "other values of: seed (0 -> 1); "),  # another sample order and augmentation
    (["--optimizer", "adamw"], "other values of: optimizer (sgd -> adamw); "),  # its state would not fit
    (["--weight_decay", "0.01", "--momentum", "0.8"],  # the checkpoint's values would silently win
     "other values of: momentum (0.9 -> 0.8), weight_decay (0.0005 -> 0.01); "),
    (["--synthetic_train_samples", "24"], "the training data changed since the checkpoint (64 -> 24 images)"),
])
def test_resume_refuses_what_would_not_continue_exactly(finished_run, tmp_path, capsys, fresh_accelerate_state,
                                                        change, named):
    import train_classification

    before = snapshot(finished_run)
    with pytest.raises(SystemExit) as stopped:
        train_classification.main([*TINY, "--epochs", "2", *change, "--output_dir", str(tmp_path / "new"),
                                   "--resume", str(finished_run / "checkpoints" / "epoch_0")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stopped.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("train_classification.py: error: resume: ") and named in errors[0]
    assert snapshot(finished_run) == before  # nothing written or moved
    assert not (tmp_path / "new").exists()  # the folder it would have written to is not left behind


@pytest.mark.slow
def test_resume_continues_mid_epoch_after_max_train_steps(tmp_path):
    out = tmp_path / "run"
    run_main([*TINY, "--epochs", "2", "--max_train_steps", "3", "--log_every", "1", "--output_dir", out])
    state = read_json(out / "checkpoints" / "step_3" / "training_state.json")
    assert (state["epoch"], state["step_in_epoch"], state["epoch_end"]) == (0, 3, False)
    run_main([*TINY, "--epochs", "2", "--log_every", "1", "--resume", "latest", "--output_dir", out])
    results = read_json(out / "results.json")
    assert (results["epochs_completed"], results["global_step"]) == (2, 16)
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "lr" in r]
    assert steps == list(range(1, 17))


@pytest.mark.slow
def test_validation_is_sample_exact_on_1_and_2_processes(tmp_path):
    # The same weights on one and on two processes (one seed, nothing trained): 37 val images, batch
    # 8, so the last batch is ragged on one process and padded with repeats on two.
    one, two = tmp_path / "one", tmp_path / "two"
    for out, nproc in ((one, 1), (two, 2)):
        ranks_ok([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--max_train_steps", "0", "--dump_rank_metrics",
                  "--output_dir", out], nproc=nproc)
    r1, r2 = read_json(one / "results.json"), read_json(two / "results.json")
    assert (r1["world_size"], r2["world_size"]) == (1, 2)
    assert r1["val_samples"] == r2["val_samples"] == 37
    g1, g2 = read_json(one / "eval/init/global.json"), read_json(two / "eval/init/global.json")
    assert {k: g1[k] for k in ("samples", "correct_top1", "correct_topk")} == \
        {k: g2[k] for k in ("samples", "correct_top1", "correct_topk")}
    assert g2["loss_sum"] == pytest.approx(g1["loss_sum"], rel=1e-6)
    assert r2["val_top1"] == r1["val_top1"] and r2["val_topk"] == r1["val_topk"]

    for run, results, world in ((one, r1, 1), (two, r2, 2)):
        folder = run / "eval" / "init"
        ranks = [read_json(folder / f"rank_{r}.json") for r in range(world)]
        glob = read_json(folder / "global.json")
        assert sorted(p.name for p in folder.iterdir()) == ["global.json"] + [f"rank_{r}.json" for r in range(world)]
        for key in ("samples", "correct_top1", "correct_topk"):
            assert sum(r[key] for r in ranks) == glob[key]
        assert sum(r["loss_sum"] for r in ranks) == pytest.approx(glob["loss_sum"], rel=1e-12)
        assert glob["samples"] == results["val_samples"]
        assert glob["correct_top1"] / glob["samples"] == results["val_top1"]
        assert glob["loss_sum"] / glob["samples"] == pytest.approx(results["val_loss"], rel=1e-12)
    # 37 = 24 + 13 on two ranks: batches of 8 alternate, the padded repeats are not counted.
    assert [read_json(two / f"eval/init/rank_{r}.json")["samples"] for r in (0, 1)] == [21, 16]


@pytest.mark.slow
def test_lr_follows_epoch_progress_for_any_world_size_and_accumulation(tmp_path):
    runs = {}
    for nproc, accum in ((1, 1), (2, 1), (1, 2), (2, 2)):
        out = tmp_path / f"p{nproc}a{accum}"
        job = [*TINY, "--epochs", "3", "--warmup_epochs", "1", "--log_every", "1", "--val_every", "3",
               "--grad_accum_steps", accum, "--output_dir", out]
        if nproc > 1:
            ranks_ok(job, nproc=nproc)
        else:  # one process: in this one
            run_main(job)
        rows = [r for r in read_jsonl(out / "metrics.jsonl") if "lr" in r]
        assert len({r["step"] for r in rows}) == len(rows)  # one writer: the main process
        runs[nproc, accum] = {r["epoch"]: r["lr"] for r in rows}
    # 64 samples, batch 8: 8, 4, 4 and 2 optimizer steps per epoch.
    assert [len(runs[k]) for k in ((1, 1), (2, 1), (1, 2), (2, 2))] == [24, 12, 12, 6]
    common = set.intersection(*(set(r) for r in runs.values()))
    assert len(common) == 6
    for epoch in sorted(common):
        lrs = [r[epoch] for r in runs.values()]
        assert max(lrs) - min(lrs) <= 1e-12 * max(lrs), (epoch, lrs)
    assert runs[2, 2][1.0] == pytest.approx(0.1)  # warmup over: the peak, at the same point for all


@pytest.mark.slow
def test_default_job_reaches_99_percent(tmp_path):
    out = tmp_path / "run"
    run_ok(["--output_dir", out], timeout=600)  # the README's quickstart: `accelerate launch train_classification.py`
    assert read_json(out / "results.json")["val_top1"] >= 0.99


@pytest.mark.slow
def test_torchrun_also_works(tmp_path):
    out = tmp_path / "run"
    run_ok([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", out], nproc=2, torchrun=True)
    results = read_json(out / "results.json")
    assert (results["world_size"], results["val_samples"], results["global_step"]) == (2, 37, 4)


@pytest.mark.slow
def test_a_three_epoch_run_of_the_default_job_is_already_good(tmp_path, fresh_accelerate_state):
    """The first thing a new user tries: a short run must not sit at chance (zero-initialised residual
    blocks; the default warmup shortened to fit)."""
    import train_classification
    from conftest import reset_accelerate_state

    results = train_classification.main(["--epochs", "3", "--output_dir", str(tmp_path / "three")])
    assert results["val_top1"] >= 0.90
    reset_accelerate_state()
    # One epoch (warmup 0.2): before zero-init, BatchNorm's running statistics blew up (val loss ~500 to
    # ~9,600, top-1 0.10); now it learns (0.56 here).
    results = train_classification.main(["--epochs", "1", "--output_dir", str(tmp_path / "one")])
    assert results["val_loss"] < 5 and results["val_top1"] >= 0.4


def new_children(before):
    """This process's child processes (DataLoader workers among them) that were not there `before`, alive."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_a_run_in_this_process_leaves_no_worker_behind(tmp_path, capsys):
    """main() closes its loaders' workers (train, val, a resumed epoch's, the multi-view test's) when it returns,
    and when it stops on bad input: nothing is left for a garbage collection to join later. It gives back the
    SIGTERM and SIGINT handlers it took: Ctrl-C interrupts the calling process again."""
    import signal

    import psutil

    from conftest import main_fails, make_folder

    def caller(signum, frame):  # the calling process's own handlers: main() must give these back
        pass

    handlers = [signal.signal(s, caller) for s in (signal.SIGTERM, signal.SIGINT)]
    try:
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        argv = [*TINY, "--num_workers", "2", "--epochs", "2", "--warmup_epochs", "0", "--output_dir", tmp_path / "r"]
        run_main([*argv, "--max_train_steps", "3"])  # stops mid-epoch: a checkpoint at step 3
        assert not new_children(before)
        run_main([*argv, "--resume", "latest"])  # the resumed epoch's loader skips its first batches
        assert not new_children(before)
        make_folder(tmp_path / "tr", {"cat": 4, "dog": 4})
        make_folder(tmp_path / "va", {"cat": 2, "dog": 2})
        (tmp_path / "tr" / "cat" / "zz_broken.png").write_bytes(b"not an image")
        code, err = main_fails(["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", "--image_size", "16",
                                "--batch_size", "4", "--num_workers", "2", "--epochs", "1", "--output_dir",
                                tmp_path / "bad"], capsys)
        assert code == 2 and "cannot decode" in err
        assert not new_children(before)
    finally:
        restored = [signal.signal(s, h) for s, h in zip((signal.SIGTERM, signal.SIGINT), handlers)]
    assert restored == [caller, caller]


def test_save_every_n_checkpoints_after_every_nth_epoch(tmp_path):
    """--save_every 2 over 3 epochs: after epoch 1 (the second) and at the end, not after the first."""
    out = tmp_path / "run"
    run_main([*TINY, "--synthetic_train_samples", "16", "--epochs", "3", "--save_every", "2", "--output_dir", out])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_1", "epoch_2"]


def test_an_epoch_whose_batches_accumulation_does_not_divide_has_a_step_for_its_last_group(tmp_path):
    """8 micro-batches an epoch, --grad_accum_steps 3: 3 optimizer steps (3 + 3 + 2), so epochs are laid out and
    reported in steps of 3: epoch 1.0 at step 3, 2.0 at step 6, and the schedule's warmup ends at epoch 1."""
    out = tmp_path / "run"
    results = run_main([*TINY, "--epochs", "2", "--grad_accum_steps", "3", "--warmup_epochs", "1", "--log_every", "1",
                        "--output_dir", out])
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "lr" in r]
    assert results["global_step"] == 6 and [(r["step"], r["epoch"]) for r in rows][2::3] == [(3, 1.0), (6, 2.0)]
    assert rows[2]["lr"] == pytest.approx(0.1)  # the peak LR, reached at the warmup's end: the end of epoch 0


@pytest.mark.parametrize("model", [SMALL_MODEL, "resnet18"])  # timm's folder (save_for_hf), torchvision's (our own)
def test_every_file_of_a_run_takes_the_users_umask(model, tmp_path, fresh_accelerate_state):
    """A run folder shared with colleagues: every file it writes is 0666 less the umask, the weights too (safetensors
    0.8 writes its files 0600: model.safetensors, model_ema.safetensors, model/, best/, each checkpoint's)."""
    import os

    out, mask = tmp_path / "run", os.umask(0o002)
    try:
        run_main([*TINY, "--model", model, "--epochs", "1", "--warmup_epochs", "0", "--model_ema", "--keep_best", "1",
                  "--output_dir", out])
    finally:
        os.umask(mask)
    modes = {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()}
    assert {"model.safetensors", "model_ema.safetensors", "model/model.safetensors", "best/model.safetensors",
            "checkpoints/epoch_0/model.safetensors"} <= set(modes)
    assert {name: mode for name, mode in modes.items() if mode != oct(0o664)} == {}
