"""--dist_timeout_s bounds how long a rank waits in a collective for a rank that stopped answering.

A rank that *dies* is torchrun's business (tests/test_finetune.py::test_a_dead_rank_ends_the_job).
Here a rank is frozen with SIGSTOP instead: it stays alive, so torchrun sees nothing wrong, and only the
process-group timeout can end the other rank's wait in the gradient all-reduce (gloo on CPU). Measured on
the 2-core machine: gloo reports "Timed out waiting 15000ms for recv operation" ~15 s after the freeze;
rank 0 exits with it, then torchrun sends the frozen rank SIGTERM, which it cannot act on, and 30 s later
SIGKILL: the job ends ~47 s after the freeze.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import ROOT, TINY, free_port

pytestmark = pytest.mark.slow

MARGIN = 45  # seconds on top of any expected time: start-up, tracebacks and a loaded machine
TORCHRUN_GRACE = 30  # torchrun's wait between SIGTERM and SIGKILL when it tears a job down
# gloo words it as "Timed out waiting 15000ms for recv operation to complete" or "Application timeout caused
# pair closure", depending on where the wait was.
TIMED_OUT = re.compile(r"Error: .*(timed out|timeout)", re.IGNORECASE)


class Job:
    """The real script on 2 CPU processes, its stderr read line by line as it comes, each line timed."""

    def __init__(self, out, dist_timeout_s):
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "accel_configs" / "cpu_2proc.yaml"), "--main_process_port", str(free_port()),
               str(ROOT / "train_classification.py"), *TINY, "--warmup_epochs", "0", "--epochs", "1000",
               "--log_every", "1", "--dist_timeout_s", str(dist_timeout_s), "--output_dir", str(out)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.lines = []  # (time.time(), line)
        self.ranks = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append((time.time(), line))

    def freeze_one_rank_once_training(self, out, startup=180):
        deadline = time.time() + startup
        while not (out / "metrics.jsonl").exists():  # a logged step: both ranks are in the loop
            assert self.proc.poll() is None, self.stderr()
            assert time.time() < deadline, f"no training step after {startup} s"
            time.sleep(0.2)
        self.ranks = self._ranks()
        assert len(self.ranks) == 2
        self.ranks[-1].send_signal(signal.SIGSTOP)  # alive, holding its sockets, never answering
        return time.time()

    def _ranks(self):
        try:
            return [p for p in psutil.Process(self.proc.pid).children(recursive=True)
                    if "train_classification.py" in " ".join(p.cmdline())]
        except psutil.NoSuchProcess:
            return []

    def first_timeout(self):
        return next(((t, line) for t, line in list(self.lines) if TIMED_OUT.search(line)), None)

    def stderr(self):
        return "".join(line for _, line in list(self.lines))[-4000:]

    def kill(self):
        # torchrun starts each rank in a session of its own: killing the launcher's process group leaves
        # them running (the frozen one forever). SIGKILL reaches a stopped process too.
        ranks = self.ranks + (self._ranks() if self.proc.poll() is None else [])
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for rank in ranks:
            try:
                rank.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(timeout=60)
        psutil.wait_procs(ranks, timeout=30)
        self.reader.join(timeout=10)


def test_a_frozen_rank_makes_the_other_fail_after_dist_timeout_s(tmp_path):
    timeout = 15
    job = Job(tmp_path / "run", timeout)
    try:
        frozen = job.freeze_one_rank_once_training(tmp_path / "run")
        job.proc.wait(timeout=timeout + TORCHRUN_GRACE + MARGIN)  # ends by itself
        ended = time.time()
        job.reader.join(timeout=10)
        assert job.proc.returncode != 0
        seen = job.first_timeout()
        assert seen is not None, f"no gloo timeout reported:\n{job.stderr()}"
        timed_out_at, line = seen
        if "ms" in line:
            assert f"waiting {timeout * 1000}ms" in line  # the flag is what gloo waited for
        # Not before the timeout (1 s slack: the other rank may already have been waiting when it was frozen),
        # and not much after it.
        timings = f"timeout reported {timed_out_at - frozen:.1f} s, job ended {ended - frozen:.1f} s after the freeze"
        assert timeout - 1 <= timed_out_at - frozen < timeout + MARGIN, timings
        assert ended - frozen < timeout + TORCHRUN_GRACE + MARGIN, timings
        print(timings)
    finally:
        job.kill()
