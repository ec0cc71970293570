"""Promises of docs/resuming.md that no other test covered: --resume latest with nothing to resume, and a
checkpoint refused on another world size without touching the run."""

import pytest

from conftest import TINY, read_json, read_jsonl, snapshot
from ranks import run_ranks

FAST = [*TINY, "--warmup_epochs", "0", "--epochs", "1", "--log_every", "1"]


def train_rows(out):
    return [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "train_loss" in r]


@pytest.mark.parametrize("leftover", [None, "checkpoints/.partial-step_3"])
def test_resume_latest_without_a_checkpoint_starts_afresh_and_says_so(tmp_path, capsys, fresh_accelerate_state,
                                                                      leftover):
    import train_classification

    out = tmp_path / "run"
    if leftover:  # a first run killed while writing its first checkpoint: nothing complete to resume
        (out / leftover).mkdir(parents=True)
        (out / leftover / "model.safetensors").write_bytes(b"half a checkpoint")
    results = train_classification.main([*FAST, "--resume", "latest", "--output_dir", str(out)])
    printed = capsys.readouterr().out
    assert f"resume: no complete checkpoint under {out}: starting afresh" in printed
    assert "resumed from" not in printed
    assert train_rows(out) == list(range(1, 9))  # 64 samples, batch 8: steps 1..8 of a fresh run
    assert results["global_step"] == 8 and results["epochs_completed"] == 1
    assert read_json(out / "checkpoints" / "epoch_0" / "training_state.json")["global_step"] == 8
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0"]  # the leftover went at the save


@pytest.mark.slow
def test_a_checkpoint_from_1_process_is_refused_on_2_naming_the_world_size(tmp_path, fresh_accelerate_state):
    import train_classification

    out = tmp_path / "run"
    train_classification.main([*FAST, "--output_dir", str(out)])
    assert read_json(out / "checkpoints" / "epoch_0" / "training_state.json")["world_size"] == 1
    before = snapshot(tmp_path, skip=(".lock",))
    assert len(before) > 10

    job = run_ranks([*FAST, "--resume", "latest", "--output_dir", out], nproc=2)
    # Every rank refuses with the same one line and exit 2; none dies of an uncaught exception, none waits at a
    # barrier for the other (the main process decides and tells every rank).
    assert [rank.returncode for rank in job.ranks] == [2, 2] and not job.torn_down, job.report()
    for rank in job.ranks:
        lines = [line for line in rank.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in rank.stderr, rank.stderr[-3000:]
        assert lines[0].startswith("train_classification.py: error: resume: ") and "world size (1 -> 2)" in lines[0]
    assert snapshot(tmp_path, skip=(".lock",)) == before  # nothing in the run folder was written, moved or removed
