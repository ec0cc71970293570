"""Exact resume: a run killed at any step and resumed with --resume latest ends bitwise-equal to one never killed.

The kill comes from inside the run (tests/helpers/signal_at.py) at an exact step or mid-save, so
each case is deterministic; the resumed run must say which checkpoint it continued from. What is tested is
the script's checkpoint and resume, not a launcher's: the runs are ranks forked as `accelerate launch` starts
them (tests/ranks.py), the kill goes to rank 0's process group (its DataLoader workers too) as SLURM's and
torchrun's signals do, or to rank 0 alone as a crash or the OOM killer sends it (its workers live on for a few
seconds), and with two ranks the other is torn down as torchrun tears it down.
"""

import re

import pytest

from conftest import assert_same_weights, read_json, read_jsonl, resume_job, resumed_from
from ranks import ranks_killed, ranks_ok, run_ranks

pytestmark = pytest.mark.slow


def train_rows(out):
    return {r["step"]: r for r in read_jsonl(out / "metrics.jsonl") if "train_loss" in r}


@pytest.mark.parametrize("nproc, workers, when, target, resumes_from", [
    (1, 2, "step:14", "alone", "step_13"),  # mid-epoch, worker processes, the rank alone killed
    (1, 0, "step:10", "group", "epoch_0"),  # right after an epoch boundary
    (1, 0, "save:step_4", "group", "step_3"),  # while a checkpoint is being written
    (2, 0, "step:4", "group", "step_3"),    # 2 processes, mid-epoch (5 steps an epoch on each rank)
    (2, 2, "step:6", "group", "epoch_0"),   # 2 processes, workers, epoch boundary
])
def test_sigkill_then_resume_latest_is_bitwise_equal(images, reference, tmp_path, nproc, workers, when, target,
                                                     resumes_from):
    out = tmp_path / "run"
    argv = resume_job(images, out, workers, "--checkpoint_every_steps", "1", "--keep_last", "2")
    # "group": the rank's process group; with one process the launcher's too (it and its workers die at once);
    # with two, torchrun then tears the other rank down. "alone": the rank alone, whose workers outlive it.
    orphans = []
    ranks_killed(argv, when, nproc, target=target, leftovers=orphans)
    try:
        assert not (out / "results.json").exists()
        if when.startswith("save:"):
            assert (out / "checkpoints" / ".partial-step_4").is_dir()  # the kill hit the save
            assert not (out / "checkpoints" / "step_4").exists()
        # The killed rank's workers, which had the folder's lock file open at fork, live until their watchdog looks
        # (up to 5 s). Stopped before the kill, they cannot end before the resume looks at the lock: the resume, at
        # once, must find the folder free all the same.
        assert target != "alone" or len(orphans) >= 2, "the killed rank's DataLoader workers are not there to test"
        proc = ranks_ok([*argv, "--resume", "latest"], nproc=nproc)  # the same command, plus --resume latest
    finally:
        for process in orphans:
            process.kill()
    assert resumed_from(proc.stdout) == out / "checkpoints" / resumes_from
    assert_same_weights(out, reference[nproc])
    ours, theirs = train_rows(out), train_rows(reference[nproc])
    assert set(ours) == set(theirs)
    for step, row in ours.items():  # the same samples, augmented alike, in the same order
        assert (row["train_loss"], row["lr"]) == (theirs[step]["train_loss"], theirs[step]["lr"]), step
    assert len(list((out / "checkpoints").iterdir())) <= 2  # --keep_last 2


def test_mid_epoch_resume_with_gradient_accumulation_is_bitwise_equal(images, tmp_path):
    # 9 micro-batches, groups of 2: 5 optimizer steps an epoch, the last group short.
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(resume_job(images, whole, 0, "--grad_accum_steps", "2"), nproc=1)
    argv = resume_job(images, out, 0, "--grad_accum_steps", "2", "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:8", 1, target="group")  # epoch 1, its third step
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=1)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_7"
    assert read_json(out / "checkpoints" / "step_7" / "training_state.json")["step_in_epoch"] == 2
    assert_same_weights(out, whole)
    assert read_json(out / "results.json")["global_step"] == 15


def pickled_modules(path):
    """The modules whose classes or functions a pickle file (or each pickle in a torch.save zip) names."""
    import pickletools
    import zipfile

    with open(path, "rb") as f:
        blobs = [f.read()]
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            blobs = [z.read(name) for name in z.namelist() if name.endswith(".pkl")]
    found = set()
    for blob in blobs:
        strings = []
        for op, arg, _ in pickletools.genops(blob):
            if op.name in ("GLOBAL", "INST"):
                found.add(arg.split(" ")[0])
            elif op.name == "STACK_GLOBAL":
                found.add(strings[-2])
            if isinstance(arg, str):
                strings.append(arg)
    return found


def test_checkpoints_name_no_module_of_ours_so_moving_code_cannot_break_their_resume(reference, tmp_path):
    """A checkpoint that pickled one of our classes would stop loading when its module moved or was renamed
    (the redesign moved every module); Accelerate's files and ours name torch, numpy and the standard library only."""
    import torch

    from utils.training.checkpoints import Position

    torch.save({"position": Position()}, tmp_path / "ours.bin")  # what the scan would catch
    assert "utils.training.checkpoints" in pickled_modules(tmp_path / "ours.bin")
    files = sorted(p for p in (reference[2] / "checkpoints").rglob("*") if p.suffix in (".bin", ".pkl", ".pt"))
    assert len(files) >= 4  # optimizer, scheduler, a random state per rank
    named = {module for path in files for module in pickled_modules(path)}
    assert named and all(module.split(".")[0] in {"torch", "numpy", "collections", "_codecs", "builtins"}
                         for module in named), sorted(named)


@pytest.mark.slow
def test_a_checkpoint_the_disk_cannot_take_stops_both_ranks_in_one_line_and_the_last_one_stays_whole(images, tmp_path):
    """Two processes with a worker each, SIGKILLed while saving epoch_1, resumed where no file may grow past half the
    weights' size (as a full disk stops a write): the save of epoch 1 fails on rank 0; both ranks stop (no hang) with
    the one line that names the folder, the space a checkpoint takes and the space free; epoch_0 is whole, byte for
    byte, no partial folder is left, and the same command without the limit resumes from epoch_0."""
    out = tmp_path / "run"
    job = resume_job(images, out, "1", "--epochs", "2", "--save_every", "1")
    ranks_killed(job, "save:epoch_1", nproc=2)
    first = out / "checkpoints" / "epoch_0"
    before = {f.name: f.read_bytes() for f in first.iterdir()}
    limit = (first / "model.safetensors").stat().st_size // 2
    stopped = run_ranks([str(limit), *job, "--resume", "latest"], target="helpers.file_size_limit:main")
    assert not stopped.timed_out and [r.returncode for r in stopped.ranks] == [2, 2], stopped.report()
    line = (re.escape(f"train_classification.py: error: checkpoint: could not write {out / 'checkpoints' / 'epoch_1'} "
                      "(File too large): a checkpoint takes about ") + r"(\d+\.\d) MiB, \d+\.\d MiB are free there; "
            + re.escape("the last one, epoch_0, is whole. Free space on that disk (or move the run folder to another) "
                        "and run again with --resume latest"))
    for rank in stopped.ranks:
        assert re.fullmatch(line, rank.stderr.strip()), rank.stderr
    taken = float(re.fullmatch(line, stopped.ranks[0].stderr.strip()).group(1))
    assert taken == round(sum(len(data) for data in before.values()) / 2**20, 1)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0"]
    assert {f.name: f.read_bytes() for f in first.iterdir()} == before
    resumed = ranks_ok([*job, "--resume", "latest"])
    assert resumed_from(resumed.stdout) == first and (out / "checkpoints" / "epoch_1").is_dir()


WRITERS_ON_A_FULL_DISK = """
import resource, signal, sys, torch
from safetensors.torch import save_file
from utils.training.checkpoints import _written

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (10000, 10000))
big, folder = {"w": torch.zeros(100000)}, sys.argv[1]
for write in (lambda: torch.save(big, folder + "/optimizer.bin"), lambda: save_file(big, folder + "/model.safetensors"),
              lambda: open(folder + "/state.json", "w").write("x" * 20000), lambda: None):
    print(_written(write))
try:
    _written(lambda: torch.zeros(2) @ torch.zeros(3))  # not a write: raised as it is
except RuntimeError:
    print("raised")
"""


def test_each_writer_a_checkpoint_uses_is_recognised_when_the_disk_stops_it(tmp_path):
    """torch's own writer (which says only "unexpected pos" when a file cannot grow), safetensors' and Python's, each
    stopped as a full disk stops them, give the reason a checkpoint could not be written; a finished write gives
    none; any other error is left to raise."""
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, "-c", WRITERS_ON_A_FULL_DISK, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.stdout.splitlines() == ["a file could not be written", "File too large", "File too large", "None",
                                        "raised"], done.stderr
