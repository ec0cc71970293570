"""SIGTERM/SIGINT, delivered the ways SLURM, torchrun, job managers and Ctrl-C deliver them: every rank
saves a checkpoint and exits 75; the rerun with --resume latest continues from it exactly.

The signal is sent from inside the run at a known step (tests/helpers/signal_at.py): to the process
group (DataLoader workers included), to the launcher, to the launcher's group, or to one rank.
A stop signal noticed during step N is acted upon at the end of step N + 1.

A signal to a launcher or its group needs the real launcher (`accelerate launch`). A signal to a rank's
own process group or to one rank does not: those runs, and every resume, are ranks forked as the launcher
starts them (tests/ranks.py): each in a session of its own with its workers, as torchrun starts them.
"""

import re
import subprocess

import pytest
from conftest import (ROOT, TINY, assert_same_weights, command, environment, read_json, read_jsonl, resume_job,
                      resumed_from)
from ranks import ranks_ok, run_ranks

from utils.training.run_lock import RunLock

pytestmark = pytest.mark.slow

MESSAGE = re.compile(r"interrupted by (SIG\w+|a signal on another rank) at step (\d+): checkpoint saved; "
                     r"rerun the same command with --resume latest")


def interrupted(argv, step, signame, target, nproc=1, rank=0, launcher=True, forked=False):
    """Run the job, signal it at `step`; returns (exit code, the step the message names, stderr). Under the
    real launcher (plain python with launcher=False), or in forked ranks (`forked`: target self or group)."""
    signal_at = [f"step:{step}", signame, target, str(rank), *argv]
    if forked:
        assert target in ("self", "group")
        proc = run_ranks(signal_at, nproc=nproc, launcher=launcher, target="helpers.signal_at:main")
        assert not proc.timed_out, proc.report()
    else:
        proc = subprocess.run(command(signal_at, nproc, launcher=launcher, script="tests/helpers/signal_at.py"),
                              cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=300,
                              start_new_session=True)
    found = MESSAGE.findall(proc.stderr)
    assert found, f"exit {proc.returncode}, no interrupt message:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr.split("interrupted by")[0], proc.stderr[-3000:]
    saved = {int(n) for _, n in found}
    assert len(saved) == 1, found  # every rank that speaks names the same step
    return proc.returncode, saved.pop(), proc.stderr


def assert_saved_at(out, step):
    """The interrupt's checkpoint, mid-epoch: complete, at that step; and the run wrote no results."""
    state = read_json(out / "checkpoints" / f"step_{step}" / "training_state.json")
    assert (state["global_step"], state["epoch_end"]) == (step, False)
    assert not (out / "results.json").exists()
    return out / "checkpoints" / f"step_{step}"


def resume_and_compare(argv, out, checkpoint, reference, nproc=1):
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=nproc)
    assert resumed_from(proc.stdout) == checkpoint
    assert_same_weights(out, reference)
    return proc


def test_sigterm_to_the_process_group_with_workers_under_plain_python(images, reference, tmp_path):
    # SLURM's way: every process of the job, the two DataLoader workers included.
    out = tmp_path / "run"
    argv = resume_job(images, out, 2)
    code, step, _ = interrupted(argv, 4, "TERM", "group", launcher=False, forked=True)
    assert (code, step) == (75, 5)
    resume_and_compare(argv, out, assert_saved_at(out, 5), reference[1])


def test_sigterm_to_a_one_process_launchers_group_with_workers(images, reference, tmp_path):
    # A job manager killing `accelerate launch`'s process group: the launcher dies at once.
    out = tmp_path / "run"
    argv = resume_job(images, out, 2)
    _, step, _ = interrupted(argv, 11, "TERM", "parent_group")
    assert step == 12
    resume_and_compare(argv, out, assert_saved_at(out, 12), reference[1])


def test_ctrl_c_under_a_one_process_launcher_is_named_and_the_rerun_continues_bitwise(images, reference, tmp_path):
    # Ctrl-C: SIGINT to the terminal's foreground group, the launcher's, workers included. Accelerate >= 1.16's
    # launcher then passes SIGTERM on to the run and exits 130; the stop is still named for the signal that came first.
    out = tmp_path / "run"
    argv = resume_job(images, out, 2)
    code, step, stderr = interrupted(argv, 3, "INT", "parent_group")
    assert (code, step) == (130, 4) and "interrupted by SIGINT at step 4" in stderr
    resume_and_compare(argv, out, assert_saved_at(out, 4), reference[1])


def test_sigterm_to_the_one_process_launcher_alone_stops_the_orphan(images, reference, tmp_path):
    # Accelerate's one-process launcher forwards nothing; killed, it leaves its training process
    # behind, which must notice (parent-death signal), save and exit rather than train on.
    out = tmp_path / "run"
    argv = resume_job(images, out, 2)
    _, step, _ = interrupted(argv, 3, "TERM", "parent")  # returns once the orphan closed its output
    assert step >= 4  # the parent-death signal arrives in its own time
    checkpoint = assert_saved_at(out, step)
    with RunLock(out).acquire() as lock:  # the orphan is gone and left the folder unlocked
        assert lock is not None
    resume_and_compare(argv, out, checkpoint, reference[1])


def test_sigterm_to_a_two_process_launcher_with_a_worker_each(images, reference, tmp_path):
    # torchrun passes SIGTERM on to each rank's process group: workers get it too.
    out = tmp_path / "run"
    argv = resume_job(images, out, 1)
    _, step, stderr = interrupted(argv, 2, "TERM", "parent", nproc=2)
    assert step >= 3
    state = read_json(out / "checkpoints" / f"step_{step}" / "training_state.json")
    assert (state["global_step"], state["world_size"]) == (step, 2)
    resume_and_compare(argv, out, out / "checkpoints" / f"step_{step}", reference[2], nproc=2)


def test_sigint_on_one_rank_at_an_epochs_last_step_keeps_its_validation(images, reference, tmp_path):
    # Rank 1 alone gets SIGINT during step 4; both stop after step 5, the last of epoch 0 on two
    # ranks. Epoch 0's validation is owed: the resumed run does it first, as the whole run did.
    out = tmp_path / "run"
    argv = resume_job(images, out, 0)
    _, step, stderr = interrupted(argv, 4, "INT", "self", nproc=2, rank=1, forked=True)
    assert step == 5 and "interrupted by SIGINT at step 5" in stderr
    state = read_json(out / "checkpoints" / "epoch_0" / "training_state.json")
    assert (state["global_step"], state["epoch_end"], state["validation_pending"]) == (5, True, True)
    resume_and_compare(argv, out, out / "checkpoints" / "epoch_0", reference[2], nproc=2)
    rows = [{k: r[k] for k in ("step", "val_top1", "val_loss")} for r in read_jsonl(out / "metrics.jsonl")
            if "val_top1" in r]
    theirs = [{k: r[k] for k in ("step", "val_top1", "val_loss")} for r in read_jsonl(reference[2] / "metrics.jsonl")
              if "val_top1" in r]
    assert rows == theirs and [r["step"] for r in rows] == [5, 10, 15]


def test_a_stop_mid_way_through_the_last_epoch_owes_no_validation(images, reference, tmp_path):
    # Steps 19-27 are the last epoch on one process. Stopped after step 22, the run has steps to train: its resumed
    # run trains them and validates once at the end, as the whole run did (before, it first validated the weights of
    # step 22: a row more, one more report to a pruner, and --early_stop deciding on them).
    out = tmp_path / "run"
    argv = resume_job(images, out, 0)
    code, step, _ = interrupted(argv, 21, "TERM", "self", launcher=False, forked=True)
    assert (code, step) == (75, 22)
    assert read_json(out / "checkpoints" / "step_22" / "training_state.json")["validation_pending"] is False
    resume_and_compare(argv, out, out / "checkpoints" / "step_22", reference[1])
    rows = [{k: r[k] for k in ("step", "val_top1", "val_loss")} for r in read_jsonl(out / "metrics.jsonl")
            if "val_top1" in r]
    theirs = [{k: r[k] for k in ("step", "val_top1", "val_loss")} for r in read_jsonl(reference[1] / "metrics.jsonl")
              if "val_top1" in r]
    assert rows == theirs and [r["step"] for r in rows] == [9, 18, 27]


def test_stop_at_an_epochs_end_keeps_the_rng_stream_of_a_model_with_dropout(tmp_path):
    # mobilenet_v3_small has dropout: its training draws from the global RNG, which validation's
    # loader also draws from. An owed validation done elsewhere would change every later mask.
    # Workers on: validation's loader must not draw from the global RNG either (its first iterator
    # would, at the first validation of each process). Epoch 1's validation is the second one.
    argv = [*TINY, "--model", "mobilenet_v3_small", "--epochs", "3", "--log_every", "1", "--num_workers", "2"]
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok([*argv, "--output_dir", whole], nproc=1, launcher=False)
    code, step, _ = interrupted([*argv, "--output_dir", out], 15, "TERM", "self", launcher=False, forked=True)
    assert (code, step) == (75, 16)  # 64 images, batch 8: step 16 ends epoch 1
    assert read_json(out / "checkpoints" / "epoch_1" / "training_state.json")["validation_pending"]
    proc = ranks_ok([*argv, "--output_dir", out, "--resume", "latest"], nproc=1, launcher=False)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "epoch_1"
    assert "epoch 1 val:" in proc.stdout
    assert_same_weights(out, whole)
