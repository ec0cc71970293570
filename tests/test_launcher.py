"""What a person sees under the README's launcher, `accelerate launch`, at the release the requirements install.

Accelerate 1.16 changed its one-process launcher: it pipes its script's stderr and copies it to its own (to keep the
tail for its error), and on a failure of the script it raises its own CalledProcessError with that tail, as every
release before it raised one without. So:
- the progress bar: the script's stderr is no terminal any more; it is drawn when the pipe's reader, our parent, copies
  it to a terminal (utils/reporting/progress.watched), as before on a terminal;
- a refusal: the script's one line, exit 2, under `python`; `accelerate launch -q` passes the line alone and exits 1
  (the launcher's code for any failure); without -q the launcher adds its traceback, and exits 1;
- accel_configs/default.yaml (this machine's default said out loud) launches without Accelerate's notice of defaults.
Each runs the launcher for real, on a terminal where the terminal is what is tested (tests/helpers/terminal.py).
"""

import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, TINY, environment

from helpers.terminal import on_a_terminal

pytestmark = pytest.mark.slow

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]
DEFAULT = ["--config_file", str(ROOT / "accel_configs" / "default.yaml")]
SCRIPT = str(ROOT / "train_classification.py")
REFUSAL = "train_classification.py: error: batch_size: must be >= 1, got 0"


def test_a_progress_bar_on_a_terminal_under_accelerate_launch(tmp_path):
    out = tmp_path / "run"
    shown, code = on_a_terminal([*LAUNCH, *DEFAULT, SCRIPT, *TINY, "--epochs", "1", "--log_every", "1",
                                 "--output_dir", str(out)], env=environment(), cwd=ROOT, timeout=240)
    assert code == 0, shown[-3000:]
    bar = [part for part in shown.split("\r") if part.startswith("epoch 0: ")]  # tqdm redraws its line
    assert bar and any("8/8" in part for part in bar), shown[-3000:]  # 64 images, batch 8: the epoch's 8 steps
    assert "step 1 loss" not in shown  # the bar replaces the periodic lines ...
    assert "epoch 0 train: loss" in shown and (out / "results.json").is_file()  # ... not the epoch's own line


def test_a_launchers_stderr_sent_to_a_file_gets_no_bar(tmp_path):
    """`accelerate launch ... 2> err.log` on a terminal: the script's stderr is still the launcher's pipe, but what the
    launcher copies it to is a file: the plain lines (on the terminal), no bar redrawn into err.log."""
    out, err = tmp_path / "run", tmp_path / "err.log"
    command = " ".join(map(shlex.quote, [*LAUNCH, *DEFAULT, SCRIPT, *TINY, "--epochs", "1", "--log_every", "4",
                                         "--output_dir", str(out)]))
    shown, code = on_a_terminal(["sh", "-c", f"exec {command} 2> {shlex.quote(str(err))}"], env=environment(), cwd=ROOT,
                                timeout=240)
    assert code == 0, shown[-3000:] + err.read_text()[-3000:]
    assert "epoch 0.50 step 4 loss" in shown and "epoch 0: " not in err.read_text() + shown


def test_off_a_terminal_the_plain_lines_and_no_bar(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([*LAUNCH, *DEFAULT, SCRIPT, *TINY, "--epochs", "1", "--log_every", "4",
                           "--output_dir", str(out)], cwd=ROOT, env=environment(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epoch 0.50 step 4 loss" in proc.stdout and "epoch 0: " not in proc.stderr


@pytest.mark.parametrize("launcher, code, lines", [
    ([sys.executable], 2, [REFUSAL]),  # the script's own exit code and line
    ([*LAUNCH, "-q", *DEFAULT], 1, [REFUSAL]),  # the line alone; exit 1, the launcher's for any failure
    ([*LAUNCH, *DEFAULT], 1, None),  # the line first, then the launcher's traceback
], ids=["python", "accelerate launch -q", "accelerate launch"])
def test_a_refusal_is_its_one_line_and_writes_nothing(launcher, code, lines, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([*launcher, SCRIPT, "--batch_size", "0", "--output_dir", str(out)], cwd=ROOT,
                          env=environment(), capture_output=True, text=True, timeout=120)
    said = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr[-3000:]
    if lines is not None:
        assert said == lines  # no notice of defaults either: accel_configs/default.yaml says them
    else:
        assert said[0] == REFUSAL and "CalledProcessError" in said[-1] and "exit status 2" in said[-1]
    assert not out.exists()
