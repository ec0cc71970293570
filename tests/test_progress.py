"""Progress output: plain lines off a terminal, a tqdm bar on one; the figures in them are the metrics.jsonl ones."""

import io
import re

import pytest
import torch

from conftest import read_jsonl
from utils.progress import StepLogger


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run_epoch(tmp_path, log_every=2):
    from accelerate import Accelerator

    logger = StepLogger(Accelerator(cpu=True), tmp_path / "metrics.jsonl", log_every=log_every, steps_per_epoch=4,
                        total_steps=8)
    logger.start_epoch(0, first_step=0)
    for step, (loss, size) in enumerate([(1.0, 8), (3.0, 4), (2.0, 8), (0.5, 8)], start=1):
        logger.micro_batch(torch.tensor(loss), size, data_time=0.0)
        logger.optimizer_step(step, lr=0.1 * step)
    logger.end_epoch(4)
    return read_jsonl(tmp_path / "metrics.jsonl")


def test_plain_lines_off_a_terminal(tmp_path, capsys, fresh_accelerate_state):
    rows = run_epoch(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert [r["step"] for r in rows] == [2, 4, 4]
    # sample-weighted means over each window, and over the whole epoch
    assert rows[0]["train_loss"] == pytest.approx((1.0 * 8 + 3.0 * 4) / 12)
    assert rows[1]["train_loss"] == pytest.approx((2.0 * 8 + 0.5 * 8) / 16)
    assert rows[2]["epoch_train_loss"] == pytest.approx((8 + 12 + 16 + 4) / 28)
    assert rows[0]["img_per_s_per_device"] == rows[0]["img_per_s"] > 0  # one process
    assert rows[0]["data_time_frac"] == 0.0 and rows[2]["epoch_data_time_frac"] == 0.0
    assert re.fullmatch(r"epoch 0\.50 step 2 loss 1\.6667 lr 0\.20000 img/s [\d.]+ \([\d.]+/device\) data 0% "
                        r"eta epoch \d:\d\d:\d\d run \d:\d\d:\d\d", lines[0])
    assert re.fullmatch(r"epoch 0 train: loss 1\.4286, [\d.]+ img/s \([\d.]+/device\), data 0%, [\d.]+ s", lines[2])


def test_a_bar_on_a_terminal_with_the_same_figures(tmp_path, capsys, monkeypatch, fresh_accelerate_state):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("COLUMNS", "250")  # tqdm's width off a real terminal
    rows = run_epoch(tmp_path)
    out = capsys.readouterr().out
    bar = terminal.getvalue()
    assert "epoch 0: " in bar and "4/4" in bar and "loss 1.2500" in bar and "run ETA" in bar and "img/s" in bar
    assert "step 2" not in out  # the bar replaces the periodic lines ...
    assert out.startswith("epoch 0 train: loss 1.4286")  # ... but not the epoch's own line
    assert [r["step"] for r in rows] == [2, 4, 4]
