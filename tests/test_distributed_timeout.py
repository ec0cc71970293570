"""--dist_timeout_s bounds how long a rank waits in a collective for a rank that stopped answering.

A rank that *dies* is the launcher's business (tests/test_finetune.py::test_a_dead_rank_ends_the_job).
Here a rank is frozen with SIGSTOP instead: it stays alive, so a launcher sees nothing wrong, and only the
process-group timeout can end the other rank's wait in the gradient all-reduce (gloo on CPU). What is tested
is the script's flag reaching gloo, so the two ranks are forked as `accelerate launch` starts them
(tests/ranks.py); the frozen one is killed once the other has failed. Measured on the 2-core machine with
torchrun and --dist_timeout_s 15: gloo reported "Timed out waiting 15000ms for recv operation" ~15 s after
the freeze (then torchrun's teardown took 30 s more: SIGTERM waits while a process is stopped).
"""

import os
import re
import signal
import time

import pytest

from conftest import TINY
from ranks import run_ranks

pytestmark = pytest.mark.slow

MARGIN = 45  # seconds on top of any expected time: tracebacks and a loaded machine
# gloo words it as "Timed out waiting 15000ms for recv operation to complete" or "Application timeout caused
# pair closure", depending on where the wait was.
TIMED_OUT = re.compile(r"Error: .*(timed out|timeout)", re.IGNORECASE)


def test_a_frozen_rank_makes_the_other_fail_after_dist_timeout_s(tmp_path):
    timeout, out = 10, tmp_path / "run"
    moments = {}

    def freeze_once_training(pids):
        def poll():
            now = time.time()
            if "frozen" not in moments:
                if (out / "metrics.jsonl").exists():  # a logged step: both ranks are in the loop
                    os.kill(pids[1], signal.SIGSTOP)  # alive, holding its sockets, never answering
                    moments["frozen"] = now
            elif "rank0_ended" not in moments and _ended(pids[0]):
                moments["rank0_ended"] = now
                # what a launcher's teardown would come to (SIGTERM waits while stopped)
                os.kill(pids[1], signal.SIGKILL)
        return poll

    job = run_ranks([*TINY, "--warmup_epochs", "0", "--epochs", "1000", "--log_every", "1", "--dist_timeout_s",
                     str(timeout), "--output_dir", out], nproc=2, on_start=freeze_once_training,
                    timeout=180 + timeout + MARGIN)
    ended = time.time()
    assert "frozen" in moments, f"no training step:\n{job.report()}"
    assert not job.timed_out and job.ranks[0].returncode not in (0, None), job.report()
    line = next((line for line in job.ranks[0].stderr.splitlines() if TIMED_OUT.search(line)), None)
    assert line is not None, f"no gloo timeout reported:\n{job.report()}"
    if "ms" in line:
        assert f"waiting {timeout * 1000}ms" in line  # the flag is what gloo waited for
    assert job.ranks[1].returncode == -9  # the frozen rank, killed once the other had failed
    # Not before the timeout (1 s slack: the other rank may already have been waiting when it was frozen), and
    # not much after it.
    failed = moments["rank0_ended"] - moments["frozen"]
    timings = f"rank 0 failed {failed:.1f} s, the job ended {ended - moments['frozen']:.1f} s after the freeze"
    assert timeout - 1 <= failed < timeout + MARGIN, timings
    assert ended - moments["frozen"] < timeout + MARGIN, timings
    print(timings)


def _ended(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
