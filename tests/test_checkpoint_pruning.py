"""utils.training.checkpoints.prune and latest on hand-made checkpoint folders: which ones survive, which is newest."""

import json
import os
from pathlib import Path

import conftest  # noqa: F401  (puts the repo root on sys.path)
import pytest

from utils.training import checkpoints


def make(out, name, global_step, epoch_end, val_top1=None, *, with_key=True, mtime=None):
    """A complete checkpoint folder as train_classification.save_checkpoint leaves it (state file plus a
    stand-in weights file). with_key=False leaves "val_top1" out of the state altogether."""
    folder = out / "checkpoints" / name
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights of " + name.encode())
    state = {"epoch": 0, "step_in_epoch": 0, "global_step": global_step, "epoch_end": epoch_end,
             "world_size": 1, "schedule": {}, "tracker_run_id": None}
    if with_key:
        state["val_top1"] = val_top1
    (folder / checkpoints.STATE_FILE).write_text(json.dumps(state))
    if mtime is not None:
        os.utime(folder, (mtime, mtime))
    return folder


def names(out):
    return sorted(p.name for p in (out / "checkpoints").iterdir())


def run_of_checkpoints(out):
    """8 steps an epoch, a checkpoint every 3 steps and after each validation; the best (0.9, epoch_1)
    is neither the first nor the last, and the newest (step_27, mid-epoch) has no val_top1."""
    make(out, "step_3", 3, False)
    make(out, "step_6", 6, False)
    make(out, "epoch_0", 8, True, 0.5)
    make(out, "step_9", 9, False, with_key=False)  # an older state file without the key at all
    make(out, "epoch_1", 16, True, 0.9)
    make(out, "step_18", 18, False)
    make(out, "epoch_2", 24, True, 0.7)
    make(out, "step_27", 27, False)


def test_keep_last_1_keep_best_1_keeps_exactly_the_newest_and_the_best(tmp_path):
    run_of_checkpoints(tmp_path)
    checkpoints.prune(tmp_path, keep_last=1, keep_best=1)
    assert names(tmp_path) == ["epoch_1", "step_27"]
    # what survives is the folder itself, untouched
    assert (tmp_path / "checkpoints" / "epoch_1" / "model.safetensors").read_bytes() == b"weights of epoch_1"
    assert checkpoints.latest(tmp_path).name == "step_27"


def test_keep_last_2_keep_best_2_is_the_union(tmp_path):
    run_of_checkpoints(tmp_path)
    checkpoints.prune(tmp_path, keep_last=2, keep_best=2)
    # newest two: epoch_2 (24), step_27 (27); best two: epoch_1 (0.9), epoch_2 (0.7)
    assert names(tmp_path) == ["epoch_1", "epoch_2", "step_27"]


def test_keep_last_alone_counts_by_global_step_not_by_name_or_time(tmp_path):
    # Names sort step_10 < step_9 as text, and the oldest folder has the newest mtime.
    make(tmp_path, "step_10", 10, False, mtime=1_000)
    make(tmp_path, "step_9", 9, False, mtime=2_000)
    make(tmp_path, "step_2", 2, False, mtime=3_000)
    checkpoints.prune(tmp_path, keep_last=2, keep_best=0)
    assert names(tmp_path) == ["step_10", "step_9"]


def test_ties_for_best_go_to_the_earlier_checkpoint(tmp_path):
    make(tmp_path, "epoch_0", 8, True, 0.9)
    make(tmp_path, "epoch_1", 16, True, 0.9)  # same score, later: not the best
    make(tmp_path, "epoch_2", 24, True, 0.6)
    make(tmp_path, "epoch_3", 32, True, 0.5)
    checkpoints.prune(tmp_path, keep_last=1, keep_best=1)
    assert names(tmp_path) == ["epoch_0", "epoch_3"]


def test_checkpoints_without_val_top1_are_never_best(tmp_path):
    make(tmp_path, "step_3", 3, False, None)
    make(tmp_path, "step_5", 5, False, with_key=False)
    make(tmp_path, "epoch_0", 8, True, 0.1)  # a poor score is still a score
    make(tmp_path, "step_11", 11, False, None)
    make(tmp_path, "step_14", 14, False, with_key=False)
    make(tmp_path, "epoch_1", 16, True, 0.0)  # 0.0 is a score too (not "missing")
    make(tmp_path, "step_20", 20, False, None)
    checkpoints.prune(tmp_path, keep_last=1, keep_best=2)
    assert names(tmp_path) == ["epoch_0", "epoch_1", "step_20"]


@pytest.mark.parametrize("keep_best", [0, 1, 3])
def test_keep_last_0_keeps_every_checkpoint_whatever_keep_best(tmp_path, keep_best):
    # --keep_last 0 means "all" (its help and docs/configuration.md): --keep_best alone must not turn it into
    # "the K best only", which would delete the checkpoint just written and leave --resume latest an old one.
    run_of_checkpoints(tmp_path)
    before = names(tmp_path)
    checkpoints.prune(tmp_path, keep_last=0, keep_best=keep_best)
    assert names(tmp_path) == before and len(before) == 8
    assert checkpoints.latest(tmp_path).name == "step_27"


def test_hidden_leftovers_are_removed_and_complete_checkpoints_stay(tmp_path):
    make(tmp_path, "epoch_0", 8, True, 0.5)
    make(tmp_path, "step_12", 12, False)
    root = tmp_path / "checkpoints"
    (root / ".partial-step_13").mkdir()  # a save killed before its state file
    (root / ".partial-step_13" / "model.safetensors").write_bytes(b"half")
    deleting = make(tmp_path, ".deleting-step_4", 4, False)  # a prune killed between rename and rmtree
    replaced = make(tmp_path, ".replaced-epoch_0", 8, True, 0.5)  # a save of an existing name, killed midway
    assert not checkpoints.is_complete(deleting) and not checkpoints.is_complete(replaced)
    for everything_kept in ((0, 0), (5, 5), (0, 1)):  # removed whether or not anything is pruned
        checkpoints.prune(tmp_path, *everything_kept)
        assert sorted(p.name for p in root.iterdir()) == ["epoch_0", "step_12"]
        (root / ".partial-step_13").mkdir()


def test_a_prune_killed_mid_delete_leaves_no_half_checkpoint(tmp_path, monkeypatch):
    # A kill while deleting: the first folder's weights are gone, its state file not yet (rmtree had
    # started on it), then the process dies. What is left must not pass for a complete checkpoint.
    run_of_checkpoints(tmp_path)
    real_rmtree = checkpoints.shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        (path / "model.safetensors").unlink()
        raise KeyboardInterrupt  # stands for SIGKILL: nothing after this line runs

    monkeypatch.setattr(checkpoints.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.prune(tmp_path, keep_last=1, keep_best=1)
    monkeypatch.setattr(checkpoints.shutil, "rmtree", real_rmtree)
    for folder in checkpoints.complete_checkpoints(tmp_path):
        assert (folder / "model.safetensors").is_file(), f"{folder.name} looks complete but is half deleted"
    assert checkpoints.latest(tmp_path).name == "step_27"
    checkpoints.prune(tmp_path, keep_last=1, keep_best=1)  # the next prune finishes the job
    assert names(tmp_path) == ["epoch_1", "step_27"]


def test_prune_with_no_checkpoints_folder_does_nothing(tmp_path):
    checkpoints.prune(tmp_path, keep_last=1, keep_best=1)
    assert list(tmp_path.iterdir()) == []
    assert checkpoints.latest(tmp_path) is None


def test_latest_is_the_newest_by_global_step_then_epoch_end(tmp_path, monkeypatch):
    make(tmp_path, "step_9", 9, False, mtime=5_000)
    make(tmp_path, "step_10", 10, False, mtime=1_000)
    assert checkpoints.latest(tmp_path).name == "step_10"  # not the last by name or by mtime
    # At the same global step, an epoch end is the later position (the next epoch starts from it); in
    # whichever order the file system lists the two.
    make(tmp_path, "epoch_1", 16, True, 0.4, mtime=1_000)
    make(tmp_path, "step_16", 16, False, mtime=9_000)
    listed = Path.iterdir
    for reverse in (False, True):
        monkeypatch.setattr(Path, "iterdir", lambda self, reverse=reverse: iter(sorted(listed(self), reverse=reverse)))
        assert checkpoints.latest(tmp_path).name == "epoch_1"
    monkeypatch.undo()
    # Folders that are not complete checkpoints never count, however far they got.
    make(tmp_path, ".partial-step_40", 40, False)
    (tmp_path / "checkpoints" / "step_50").mkdir()  # no state file: not complete
    assert checkpoints.latest(tmp_path).name == "epoch_1"
    assert [f.name for f in checkpoints.complete_checkpoints(tmp_path)] == ["step_9", "step_10", "step_16", "epoch_1"]


class SavingAccelerator:
    """What keep_if_best asks of Accelerate, on one process: save_model writes the weights it is given."""

    is_main_process = True

    def __init__(self):
        self.saved = []

    def save_model(self, model, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_text(model)
        self.saved.append(model)


def test_best_weights_move_on_a_better_figure_only_and_a_tie_keeps_the_earlier_epoch(tmp_path):
    accelerator, record = SavingAccelerator(), []
    for epoch, top1 in enumerate([0.5, 0.5, 0.75, 0.75, 0.25]):
        checkpoints.keep_if_best(accelerator, f"weights of epoch {epoch}", tmp_path, record,
                                 {"epoch": epoch, "val_top1": top1})
    assert accelerator.saved == ["weights of epoch 0", "weights of epoch 2"]
    assert json.loads((tmp_path / "best" / "metrics.json").read_text()) == {"epoch": 2, "val_top1": 0.75}
    assert (tmp_path / "best" / "model.safetensors").read_text() == "weights of epoch 2"
    # A resumed run continues the record from best/metrics.json: its tie does not move best/ either.
    again = SavingAccelerator()
    checkpoints.keep_if_best(again, "weights of epoch 5", tmp_path, [], {"epoch": 5, "val_top1": 0.75})
    assert again.saved == [] and json.loads((tmp_path / "best" / "metrics.json").read_text())["epoch"] == 2


def test_the_loop_prunes_with_its_own_keep_last_and_keep_best(tmp_path, fresh_accelerate_state):
    """save_checkpoint hands --keep_last and --keep_best to prune, each to its own: scores that do not grow with the
    epochs (0.9, 0.1, 0.2, 0.3) with --keep_last 1 --keep_best 2 keep the newest and the two best, not the two newest
    and the best."""
    from loop_harness import Points, make_job, run_settings
    from train_classification import save_checkpoint
    from utils.run.accelerator import build_accelerator
    from utils.training.early_stop import Patience

    settings = run_settings(["--batch_size", "64", "--epochs", "4", "--num_workers", "0", "--keep_last", "1",
                             "--keep_best", "2", "--lr", "0.1"])
    job = make_job(settings, build_accelerator(settings), tmp_path, Points())
    job.patience = Patience()
    for epoch, score in enumerate((0.9, 0.1, 0.2, 0.3)):
        save_checkpoint(job, epoch, epoch + 1, epoch_end=True, val_score=score)
    assert names(tmp_path) == ["epoch_0", "epoch_3"]
