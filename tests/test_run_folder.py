"""The run folder: one live run per folder (its lock dies with the process that took it, not with the DataLoader
workers it forked), resuming from an older checkpoint, checkpoints complete or absent when saved over, and the
checkpoint chosen once for every node."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, TINY, assert_same_weights, main_fails, read_json, resumed_from, run_main, snapshot
from ranks import ranks_killed, ranks_ok, run_ranks

from utils.training import checkpoints, run_lock
from utils.training.run_folder import FolderError
from utils.training.run_lock import RunLock


def test_a_second_run_in_a_live_runs_folder_is_refused_and_the_lock_dies_with_its_run(
        tmp_path, capsys, fresh_accelerate_state):
    import train_classification

    out = tmp_path / "run"
    with RunLock(out).acquire():  # a live run holds the folder (flock: another open file is another holder)
        with pytest.raises(SystemExit) as stopped:
            train_classification.main([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", str(out),
                                       "--resume", "latest"])
        errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert stopped.value.code == 2 and len(errors) == 1
        assert errors[0].startswith(f"train_classification.py: error: output_dir: {out} is in use by a live run (pid ")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
    # A run that ended (here: returned) holds nothing: the next one starts.
    results = train_classification.main([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", str(out)])
    assert results["global_step"] == 8
    with RunLock(out).acquire():
        pass



# A process that takes the folder's lock as `TAKE` says, forks a child that sleeps `HOLD` seconds (a DataLoader
# worker that has not yet seen its parent die), prints the child's pid and SIGKILLs itself.
KILLED_RUN = """
import fcntl, os, signal, sys, time
sys.path.insert(0, {root!r})
out, take, hold = {out!r}, {take!r}, {hold!r}
if take == "ours":  # this script's own lock
    from utils.training.run_lock import RunLock
    held = RunLock(out).acquire()  # held till the kill, as a run holds it
else:  # a lock taken as the script did before its workers let go of it (and as any other program might)
    os.makedirs(out, exist_ok=True)
    lock = open(os.path.join(out, ".lock"), "a+")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write(f"pid {{os.getpid()}} on {{os.uname().nodename}}\\n")
    lock.flush()
child = os.fork()
if child == 0:  # its output let go, as a worker's is not what the caller waits for
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    time.sleep(hold)
    os._exit(0)
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_run(out, take, hold, reaped=True):
    """Run KILLED_RUN; returns its still sleeping child's pid. `reaped=False`: the killed process is left a zombie
    (killed, not yet waited for by its parent, as a launcher that has not looked yet leaves it), and the Popen
    returned too, for the caller to reap."""
    import psutil

    script = textwrap.dedent(KILLED_RUN.format(root=str(ROOT), out=str(out), take=take, hold=hold))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline() or 0)
    if reaped:
        assert proc.wait(timeout=120) == -signal.SIGKILL, proc.stderr.read()
        return child
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    return child, proc


def running(pid):
    """Whether process `pid` runs (a zombie, ended but not yet reaped, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.slow  # starts processes
def test_a_child_forked_while_the_lock_was_held_does_not_hold_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "LEFTOVER_WAIT_S", 0.0)  # no waiting for leftovers may hide a lock they hold
    out = tmp_path / "run"
    child = killed_run(out, "ours", hold=30)
    try:
        assert alive(child)
        with RunLock(out).acquire() as lock:  # at once: the killed process's lock died with it
            assert lock.file is not None
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_child_forked_by_a_run_leaves_the_runs_own_lock_standing(tmp_path):
    """A forked child (a DataLoader worker, the drawing child) shares the lock's open file: it closes its copy, never
    unlocks it, which would unlock the run's own and let a second run into the folder."""
    out = tmp_path / "run"
    with RunLock(out).acquire():
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # the fork itself is what lets go (os.register_at_fork); the child has nothing else to do
        os.waitpid(pid, 0)
        with pytest.raises(FolderError, match="in use by a live run"):
            RunLock(out).acquire()  # another open of the file: refused while this run holds it


@pytest.mark.slow  # starts processes
def test_leftovers_of_an_ended_run_are_waited_for_and_never_called_a_live_run(tmp_path, monkeypatch):
    # Leftovers that exit within the wait: the new run waits for them, then takes the folder.
    out = tmp_path / "run"
    child = killed_run(out, "inherited", hold=3.0)
    assert running(child)  # it holds the lock when the new run asks for it ...
    with RunLock(out).acquire():
        assert not running(child)  # ... which takes the folder once it has gone
    # Leftovers that outlive the wait: one line that names the ended run as ended, never as live.
    monkeypatch.setattr(run_lock, "LEFTOVER_WAIT_S", 0.5)
    out = tmp_path / "again"
    child, zombie = killed_run(out, "inherited", hold=30, reaped=False)  # the run's pid exists: it is not running
    try:
        with open(out / ".lock") as f:
            dead = int(f.readline().split()[1])
        assert dead == zombie.pid and alive(child)
        with pytest.raises(FolderError) as refused:
            RunLock(out).acquire()
        message = str(refused.value)
        assert f"processes that the ended run pid {dead} left behind" in message and "live run" not in message
        assert f"fuser -v {out / '.lock'}" in message
    finally:
        os.kill(child, signal.SIGKILL)
        zombie.wait()


@pytest.mark.slow
def test_resuming_from_an_older_checkpoint_sets_the_newer_history_aside(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*TINY, "--epochs", "2", "--checkpoint_every_steps", "2", "--keep_best", "1", "--output_dir", out]
    run_main(argv)
    whole = tmp_path / "whole"
    shutil.copytree(out, whole)
    newer = sorted(p.name for p in (out / "checkpoints").iterdir() if p.name not in ("step_2", "step_4"))
    # Refused (other data): nothing moves, the newer history stays where `latest` finds it.
    before = snapshot(out, skip=(".lock",))
    code, err = main_fails([*argv, "--synthetic_train_samples", "24", "--resume", out / "checkpoints" / "step_4"],
                           capsys)
    assert code == 2 and "resume: the training data changed since the checkpoint" in err
    assert snapshot(out, skip=(".lock",)) == before
    proc = ranks_ok([*argv, "--keep_last", "2", "--resume", out / "checkpoints" / "step_4"], nproc=1)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_4"
    moved = [line for line in proc.stdout.splitlines() if line.startswith("resume: step_4 is older")]
    assert len(moved) == 1
    aside = Path(moved[0].split(" to ")[-1])
    assert aside.parent == out / "abandoned"
    assert sorted(p.name for p in (aside / "checkpoints").iterdir()) == newer  # kept, not deleted
    assert (aside / "best" / "metrics.json").is_file()  # best/ came from after step 4 too
    # The new history alone is in checkpoints/: its two newest (pruning saw no abandoned ones), and
    # `latest` is its end. It trained exactly like the first run.
    kept = {p.name: read_json(p / "training_state.json")["global_step"] for p in (out / "checkpoints").iterdir()}
    assert max(kept.values()) == 16 and len(kept) <= 3  # the 2 newest, and the best one
    assert checkpoints.latest(out).name == "epoch_1"
    assert_same_weights(out, whole)


AUGMENTATION = ("no_hflip", "auto_augment", "rand_augment", "random_erase", "mixup_alpha", "cutmix_alpha",
                "mix_prob", "train_crop_size", "progressive_resize", "progressive_resize_step")


def test_every_option_declares_whether_a_resumed_run_must_keep_it():
    """Declared where the option is defined: one without a declaration cannot be added, so a new option
    cannot be forgotten (a resume with a changed value of it would otherwise pass silently)."""
    import argparse

    from utils.config.options import _Declared, get_args_parser, resume_keys

    actions = [action for action in get_args_parser()._actions if action.dest != "help"]
    assert all(isinstance(getattr(action, "resume_key", None), bool) for action in actions), \
        [action.dest for action in actions if not isinstance(getattr(action, "resume_key", None), bool)]
    with pytest.raises(TypeError, match="resume_key"):
        _Declared(argparse.ArgumentParser()).add_argument_group("new").add_argument("--new_option", type=int)
    keys = resume_keys()
    # what the schedule, the sample stream and the optimizer state are made of must be kept...
    kept = AUGMENTATION + ("seed", "epochs", "batch_size", "grad_accum_steps", "lr", "optimizer", "model",
                           "bce_loss", "bce_target_thresh", "freeze_backbone", "layer_decay", "temporal_shift")
    assert set(kept) <= set(keys), sorted(set(kept) - set(keys))
    # ...and where the run reports, evaluates and checkpoints may change
    assert not {"output_dir", "resume", "log_every", "val_every", "keep_last", "report_to", "num_workers"} & set(keys)


def options_kept(args):
    """resume_values of the Settings sections that the options namespace `args` types into."""
    from types import SimpleNamespace

    from utils.config.options import resume_values
    from utils.config.settings import typed_options

    return resume_values(SimpleNamespace(**typed_options(args)))


def test_a_changed_value_of_any_resume_key_is_refused_naming_it():
    from utils.config.options import parse_args, resume_keys
    from utils.training.run_folder import FolderError, _check_options

    args, keys = parse_args([]), resume_keys()
    state = {"options": options_kept(args), "world_size": 1}
    _check_options(options_kept(args), state, 1)  # the same values: accepted
    for key in keys:
        changed = parse_args([])
        setattr(changed, key, ("another value", getattr(args, key)))
        with pytest.raises(FolderError, match=rf"other values of: {key} \("):
            _check_options(options_kept(changed), state, 1)
    with pytest.raises(FolderError, match=r"other values of: world size \(1 -> 2\)"):
        _check_options(options_kept(args), state, 2)


FILES = ("--train_dir", "{d}/tr", "--val_dir", "{d}/va")  # .npy files of 4 uint16 bands: --bands, --pixel_max apply


WAVE = [  # the option, a command's options, and the same command with another value of it
    ("sampler", [], ["--sampler", "balanced"]),
    ("sampler_power", ["--sampler", "balanced"], ["--sampler", "balanced", "--sampler_power", "0.5"]),
    ("steps_per_epoch", ["--sampler", "balanced"], ["--sampler", "balanced", "--steps_per_epoch", "3"]),
    ("class_weights", ["--class_weights", "balanced"], ["--class_weights", "effective:0.99"]),
    ("logit_adjust", ["--logit_adjust", "1"], ["--logit_adjust", "0.5"]),
    ("focal_gamma", ["--focal_gamma", "2"], ["--focal_gamma", "1"]),
    ("track_metric", [], ["--track_metric", "balanced_accuracy"]),
    ("bands", [*FILES, "--bands", "0", "1"], [*FILES, "--bands", "1", "0"]),
    ("pixel_max", [*FILES], [*FILES, "--pixel_max", "10000"]),
    ("pos_weight", ["--dataset", "multi_digits"], ["--dataset", "multi_digits", "--pos_weight", "auto"]),
    ("multi_label_loss", ["--dataset", "multi_digits"], ["--dataset", "multi_digits", "--multi_label_loss", "asl"]),
    ("train_crop_scale", [*FILES], [*FILES, "--train_crop_scale", "0.5", "1"]),
    ("train_crop_ratio", [*FILES, "--train_crop_ratio", "0.5", "2"], [*FILES, "--train_crop_ratio", "1", "1"]),
]


@pytest.mark.parametrize("key, before, after", WAVE, ids=[case[0] for case in WAVE])
def test_the_long_tail_band_and_crop_options_are_resume_keys(key, before, after, tmp_path):
    """Each option of long-tailed data (the draws, the loss, the figure followed), of the files' bands and scaling,
    and of the random train crop changes what a resumed run would compute: as the checkpoint records them (its JSON
    state), the same command resumes and a changed value is refused naming the option, not taken silently."""
    import json

    import numpy as np

    from utils.config.options import parse_args
    from utils.training.run_folder import FolderError, _check_options

    for split in ("tr", "va"):
        for name in ("a", "b"):
            (tmp_path / split / name).mkdir(parents=True)
            np.save(tmp_path / split / name / "0.npy", np.zeros((8, 8, 4), np.uint16))
    def argv(options):  # FILES in this test's folder
        return [a.format(d=tmp_path) for a in options]

    recorded, same, changed = parse_args(argv(before)), parse_args(argv(before)), parse_args(argv(after))
    assert getattr(recorded, key) != getattr(changed, key)  # the two commands differ in this option
    state = json.loads(json.dumps({"options": options_kept(recorded), "world_size": 1}))
    _check_options(options_kept(same), state, 1)
    with pytest.raises(FolderError, match=rf"other values of: {key} \("):
        _check_options(options_kept(changed), state, 1)


def test_a_checkpoint_written_before_an_option_became_a_resume_key_still_resumes():
    """Checkpoints written before the augmentation switches were resume keys recorded none of them."""
    from utils.config.options import parse_args
    from utils.training.run_folder import _check_options

    old = {"options": {key: value for key, value in options_kept(parse_args([])).items() if key not in AUGMENTATION},
           "world_size": 1}
    _check_options(options_kept(parse_args(["--mixup_alpha", "0.2", "--no_hflip"])), old, 1)


class FakeAccelerator:
    """What checkpoints.save asks of Accelerate, on one process: save_state writes two files."""

    is_main_process = True

    def __init__(self, tag):
        self.tag = tag

    def wait_for_everyone(self):
        pass

    def save_state(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name in ("model.safetensors", "optimizer.bin"):
            (Path(folder) / name).write_text(self.tag)


def test_saving_over_a_checkpoint_never_leaves_one_that_looks_complete_but_is_not(tmp_path, monkeypatch):
    out = tmp_path / "run"
    checkpoints.save(FakeAccelerator("old"), out, "epoch_0", {"global_step": 8, "epoch_end": True})

    def killed_mid_delete(path, *args, **kwargs):  # removes one file, then the process "dies"
        if not Path(path).exists():
            return
        files = sorted(Path(path).iterdir())
        files[0].unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints.shutil, "rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(FakeAccelerator("new"), out, "epoch_0", {"global_step": 8, "epoch_end": True})
    for folder in checkpoints.complete_checkpoints(out):  # complete means whole
        assert {p.name for p in folder.iterdir()} == {"model.safetensors", "optimizer.bin",
                                                      checkpoints.STATE_FILE}
    assert (out / "checkpoints" / "epoch_0" / "model.safetensors").read_text() == "new"


def test_a_checkpoint_renamed_aside_by_a_killed_replacement_is_put_back(tmp_path):
    out = tmp_path / "run"
    checkpoints.save(FakeAccelerator("old"), out, "epoch_0", {"global_step": 8, "epoch_end": True})
    (out / "checkpoints" / "epoch_0").rename(out / "checkpoints" / ".replaced-epoch_0")  # killed right here
    assert checkpoints.latest(out) is None
    checkpoints.recover(out)
    assert checkpoints.latest(out) == out / "checkpoints" / "epoch_0"
    assert (out / "checkpoints" / "epoch_0" / "model.safetensors").read_text() == "old"


@pytest.mark.slow
def test_every_node_must_see_the_run_folder_and_the_checkpoint_the_main_process_chose(tmp_path):
    # Rank 1 works in another folder, as on a node with its own local disk: a relative path names a
    # folder there that the main process never sees.
    here, elsewhere = tmp_path / "shared", tmp_path / "node1"
    here.mkdir()
    elsewhere.mkdir()
    ranks_ok([here, elsewhere, *TINY, "--epochs", "2", "--output_dir", here / "run"], nproc=2,
             target="helpers.node_local:main")  # both ranks see the same (absolute) folder
    before = sorted(p.name for p in here.rglob("*"))

    def refused(*argv):
        proc = run_ranks([here, elsewhere, *TINY, "--epochs", "2", *argv], nproc=2, target="helpers.node_local:main")
        assert proc.returncode != 0 and not proc.timed_out, proc.report()
        errors = {line for line in proc.stderr.splitlines() if line.startswith("train_classification.py: error:")}
        assert sorted(p.name for p in here.rglob("*")) == before and not any(elsewhere.iterdir())  # nothing written
        return errors

    split = ("train_classification.py: error: output_dir: process(es) 1 do not see the run folder {} as the main "
             "process does: every node must see it at the same path (shared storage); give --output_dir a path "
             "on storage that every node mounts")
    assert refused("--output_dir", "fresh") == {split.format("fresh")}  # a new run, node-local copies
    assert refused("--output_dir", "run", "--resume", "latest") == {split.format("run")}
    # The run folder shared, the checkpoint given by a path that only the main process can read:
    assert refused("--output_dir", here / "eval", "--eval_only", "--resume", "run/checkpoints/epoch_1") == {
        "train_classification.py: error: resume: process(es) 1 cannot read the checkpoint run/checkpoints/epoch_1 "
        "that the main process chose: every node must see the run folder at the same path (shared storage)"}


def test_every_option_that_changes_what_is_optimised_is_a_resume_key(fresh_accelerate_state):
    """Toggled, a switch that is not a resume key leaves the optimizer's groups (their sizes and settings) and the
    trainable parameters as they were: a checkpoint's optimizer state then still fits. (--freeze_backbone did not:
    `--resume latest --freeze_backbone` ended in torch's "parameter group that doesn't match" traceback.)"""
    import argparse

    from accelerate import Accelerator

    from utils.config.options import get_args_parser, parse, resume_keys
    from utils.core.errors import UserError
    from utils.run.job import build_model_and_optimizer

    accelerator = Accelerator(cpu=True)
    base = [*TINY, "--output_dir", "unused"]

    def optimised(argv):
        settings = parse(argv)
        model, optimizer = build_model_and_optimizer(settings, [str(i) for i in range(7)], accelerator)
        groups = [(len(g["params"]), g["weight_decay"], g["lr"]) for g in optimizer.param_groups]
        return groups, [name for name, p in model.named_parameters() if p.requires_grad]

    reference = optimised(base)
    switches = [a for a in get_args_parser()._actions
                if isinstance(a, (argparse._StoreTrueAction, argparse.BooleanOptionalAction))]
    tried, changed = [], []
    for action in switches:
        flag = action.option_strings[-1] if action.default else action.option_strings[0]
        try:
            got = optimised([*base, flag])
        except (SystemExit, UserError):  # not with this data (or needs other options, or weights offline)
            continue
        tried.append(action.dest)
        if got != reference and action.dest not in resume_keys():
            changed.append(action.dest)
    assert "freeze_backbone" in tried and "grad_checkpointing" in tried and len(tried) >= 8, tried
    assert not changed, f"change what is optimised but a resume may change them: {changed}"


def test_resuming_with_the_backbone_frozen_is_refused_in_one_line(tmp_path, capsys, fresh_accelerate_state):
    out = tmp_path / "run"
    argv = [*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", out]
    run_main([*argv, "--max_train_steps", "2"])
    code, err = main_fails([*argv, "--resume", "latest", "--freeze_backbone"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "freeze_backbone (False -> True)" in lines[0], err
    # A checkpoint written before the option was recorded: the optimizer state that does not fit is one line too,
    # and nothing of the run folder moves
    import json

    state_file = out / "checkpoints" / "step_2" / "training_state.json"
    state = json.loads(state_file.read_text())
    del state["options"]["freeze_backbone"]
    state_file.write_text(json.dumps(state))
    before = snapshot(out, skip=(".lock",))
    code, err = main_fails([*argv, "--resume", "latest", "--freeze_backbone"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "optimizer state does not fit this run's parameter groups" in lines[0]
    assert snapshot(out, skip=(".lock",)) == before


@pytest.mark.slow
def test_resume_latest_starts_afresh_in_a_folder_killed_before_its_first_checkpoint(tmp_path, capsys):
    """SIGKILLed at step 2, before any checkpoint (config.yaml, labels.json and metrics rows written): the same
    command with --resume latest is no other run's folder, it starts afresh there and trains to the end."""
    out = tmp_path / "run"
    argv = [*TINY, "--epochs", "1", "--warmup_epochs", "0", "--log_every", "1", "--output_dir", out]
    ranks_killed(argv, "step:2", nproc=1)
    assert (out / "config.yaml").is_file() and not (out / "checkpoints").exists()
    results = run_main([*argv, "--resume", "latest"])
    assert results["global_step"] == 8 and "no complete checkpoint" in capsys.readouterr().out


def test_an_evaluation_of_a_checkpoint_gets_a_folder_of_its_own(tmp_path, monkeypatch):
    """--eval_only --resume <a run's checkpoint> without --output_dir writes runs/<time>-<data>-<model>, not into the
    run it scores: that run's results.json, report and weights stay as its training left them. (A resumed training
    run, by contrast, continues in its own folder.)"""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run_main([*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", run])
    kept = {name: (run / name).read_bytes() for name in ("results.json", "report.html", "model.safetensors")}
    checkpoint = sorted((run / "checkpoints").iterdir())[-1]
    results = run_main([*TINY, "--eval_only", "--resume", checkpoint])
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.endswith("-synthetic-timm_test_resnet.r160_in1k")
    assert read_json(folders[0] / "results.json")["val_top1"] == results["val_top1"]
    assert {name: (run / name).read_bytes() for name in kept} == kept


def test_a_finished_run_resumed_keeps_its_records_and_writes_no_row_twice(tmp_path, capsys):
    """--resume latest on a run that finished: nothing to train; its final checkpoint's weights scored again for the
    end's files, which say what the run said (its training time, its batch), not a run of 0 s; metrics.jsonl keeps
    one row of that validation."""
    out = tmp_path / "run"
    argv = [*TINY, "--epochs", "2", "--warmup_epochs", "0", "--output_dir", out]
    first = run_main(argv)
    rows, record = (out / "metrics.jsonl").read_text(), read_json(out / "run.json")
    capsys.readouterr()
    again = run_main([*argv, "--resume", "latest"])
    said = capsys.readouterr().out
    assert first["train_time_s"] > 0 and "as its checkpoint was validated" in said
    assert {k: v for k, v in again.items() if k != "command"} == {k: v for k, v in first.items() if k != "command"}
    assert read_json(out / "results.json") == again and read_json(out / "run.json") == record
    assert (out / "metrics.jsonl").read_text() == rows
