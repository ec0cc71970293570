"""--early_stop: training ends after PATIENCE validations without a gain, as a finished run; the count is in
checkpoints, so a run SIGKILLed on 2 processes and resumed stops where the uninterrupted one did, bitwise, and a
stopped run resumed stays stopped."""

import pytest
from conftest import TINY, assert_same_weights, read_json, read_jsonl, resume_job, resumed_from, run_main
from ranks import ranks_killed, ranks_ok

# A gain of more than 1.0 in top-1 cannot happen: the count runs from the first validation on.
NO_GAIN = ("--early_stop", "2", "--early_stop_min_delta", "1.0")


@pytest.mark.slow
def test_a_run_without_gain_stops_after_patience_validations_and_stays_stopped(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*TINY, "--synthetic_train_samples", "16", "--epochs", "6", "--output_dir", out, *NO_GAIN,
            "--track_metric", "balanced_accuracy", "--model_ema"]
    results = run_main(argv)
    assert (results["stopped_early"], results["stopped_early_epoch"], results["epochs_completed"]) == (True, 2, 3)
    assert [r["epoch"] for r in read_jsonl(out / "metrics.jsonl") if "val_top1" in r] == [1.0, 2.0, 3.0]  # epochs done
    assert (out / "model.safetensors").is_file() and read_json(out / "results.json")["stopped_early"] is True
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_2"]  # the end-of-training one
    said = capsys.readouterr().out
    assert "early stop: no val EMA balanced accuracy better than" in said and "training ended after epoch 2" in said
    again = run_main([*argv, "--resume", "latest"])
    assert "resumed a run that stopped early" in capsys.readouterr().out
    assert (again["stopped_early"], again["epochs_completed"], again["global_step"]) == \
        (True, 3, results["global_step"])
    assert "stopped_early" not in run_main([*TINY, "--epochs", "1", "--output_dir", tmp_path / "plain"])


@pytest.mark.slow
def test_sigkill_then_resume_stops_at_the_same_epoch_bitwise_on_two_processes(images, tmp_path):
    """5 steps an epoch on 2 processes (a worker each), 5 epochs: the whole run stops after epoch 2; killed after
    step 8 (epoch 1, one validation counted), resumed from step_7, it stops there too."""
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(resume_job(images, whole, 1, "--epochs", "5", *NO_GAIN), nproc=2)
    assert read_json(whole / "results.json")["stopped_early_epoch"] == 2
    argv = resume_job(images, out, 1, "--epochs", "5", *NO_GAIN, "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:8", nproc=2)
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_7"
    assert_same_weights(out, whole)
    ours, theirs = read_json(out / "results.json"), read_json(whole / "results.json")
    assert (ours["stopped_early_epoch"], ours["epochs_completed"], ours["val_top1"]) == \
        (2, 3, theirs["val_top1"])


def test_a_tie_with_the_best_is_no_gain():
    """The count runs on when a validation only equals the best (a tie is not better by more than min_delta 0);
    a real gain restarts it."""
    from utils.training.early_stop import Patience

    patience = Patience(patience=2)
    assert [patience.update(figure, epoch) for epoch, figure in enumerate([0.5, 0.5, 0.6, 0.6, 0.6])] == \
        [False, False, False, False, True]
    assert (patience.best, patience.waited, patience.stopped_epoch) == (0.6, 2, 4)
