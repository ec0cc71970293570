"""Progress output: plain lines off a terminal, a tqdm bar on one; the figures in them are the metrics.jsonl ones."""

import io

import pytest
import torch
from conftest import read_jsonl

from utils.reporting import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when the test moves it: every rate and ETA becomes exact."""
    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    return now


def resumed_epoch(tmp_path, clock):
    """Epoch 1 of 4 steps resumed after its first step (global step 5); 8 steps in all; a line every 2."""
    from accelerate import Accelerator

    logger = progress.StepLogger(Accelerator(cpu=True), tmp_path / "metrics.jsonl", log_every=2,
                                 steps_per_epoch=4, total_steps=8)
    logger.start_epoch(1, first_step=1)
    # (seconds since the epoch began, loss, batch size, seconds spent waiting for the batch)
    for step, (t, loss, size, wait) in enumerate([(2, 1.0, 8, 0.5), (3, 3.0, 4, 0.25), (4, 2.0, 8, 0.25)], start=6):
        clock[0] = 100.0 + t
        logger.micro_batch(torch.tensor(loss), size, data_time=wait)
        logger.optimizer_step(step, lr=0.1 * step)
    logger.end_epoch(8)
    return read_jsonl(tmp_path / "metrics.jsonl")


def test_plain_lines_off_a_terminal(tmp_path, capsys, clock, fresh_accelerate_state):
    rows = resumed_epoch(tmp_path, clock)
    lines = capsys.readouterr().out.splitlines()
    assert [r["step"] for r in rows] == [6, 8, 8]
    # step 6: 8 images in 2 s, 0.5 s of it waiting; 1 step/2 s, 2 steps left in epoch and run -> 4 s
    assert (rows[0]["epoch"], rows[0]["train_loss"], rows[0]["img_per_s"], rows[0]["data_time_frac"]) == \
        (1.5, 1.0, 4.0, 0.25)
    assert lines[0] == ("epoch 1.50 step 6 loss 1.0000 lr 0.60000 img/s 4.0 (4.0/device) data 25% "
                        "eta epoch 0:00:04 run 0:00:04")
    # steps 7-8: a window of 12 images in 2 s, sample-weighted loss; nothing left
    assert rows[1]["train_loss"] == pytest.approx((3.0 * 4 + 2.0 * 8) / 12)
    assert (rows[1]["img_per_s"], rows[1]["img_per_s_per_device"], rows[1]["data_time_frac"]) == (6.0, 6.0, 0.25)
    assert lines[1].endswith("eta epoch 0:00:00 run 0:00:00")
    # the epoch's line: the resumed part of it (20 images in 4 s, 1 s waiting)
    assert rows[2] == {"step": 8, "epoch": 2.0, "epoch_train_loss": pytest.approx(36 / 20), "epoch_img_per_s": 5.0,
                       "epoch_img_per_s_per_device": 5.0, "epoch_data_time_frac": 0.25, "epoch_time_s": 4.0}
    assert lines[2] == "epoch 1 train: loss 1.8000, 5.0 img/s (5.0/device), data 25%, 4.0 s"


def test_a_bar_on_a_terminal_with_the_same_figures(tmp_path, monkeypatch, clock, fresh_accelerate_state):
    err, out = Terminal(), Terminal()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setenv("COLUMNS", "250")  # tqdm's width off a real terminal
    rows = resumed_epoch(tmp_path, clock)
    bar = err.getvalue()
    assert "epoch 1: " in bar and "4/4" in bar
    assert "loss 1.0000 lr 6.00e-01 4 img/s (4/device) data 25% run ETA 0:00:04" in bar
    assert "step 6" not in out.getvalue()  # the bar replaces the periodic lines ...
    assert out.getvalue().startswith("epoch 1 train: loss 1.8000")  # ... but not the epoch's own line
    assert [r["step"] for r in rows] == [6, 8, 8]


def test_no_bar_when_stdout_goes_to_a_file(tmp_path, capsys, monkeypatch, clock, fresh_accelerate_state):
    monkeypatch.setattr("sys.stderr", Terminal())  # `python train_classification.py > log.txt` on a terminal
    resumed_epoch(tmp_path, clock)
    assert capsys.readouterr().out.splitlines()[0].startswith("epoch 1.50 step 6 loss 1.0000")
