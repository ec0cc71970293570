"""tests/ranks.py, the forked ranks most multi-process tests run in: what a rank gets, and that nothing outlives
a job, whether it ends, fails or hangs."""

import json
import multiprocessing
import time

import psutil
import pytest

from conftest import ROOT
from ranks import GRACE_S, run_ranks

pytestmark = pytest.mark.slow  # the first forked rank of a session starts the forkserver: ~10 s


def alive_in_group(pgid):
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if __import__("os").getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def test_two_forked_ranks_are_what_a_two_process_launch_starts(tmp_path):
    pids = []
    job = run_ranks(["ok", tmp_path], nproc=2, target="helpers.rank_probe:main", on_start=pids.extend)
    assert job.returncode == 0 and [r.returncode for r in job.ranks] == [0, 0], job.report()
    assert job.ranks[1].stdout == "rank 1 says hello\n" and job.ranks[0].stderr == "rank 0 to stderr\n"
    seen = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
    for rank, s in enumerate(seen):  # one gloo group of 2 over loopback, each rank in a session of its own
        assert (s["rank"], s["world"], s["sum"], s["session_leader"]) == (rank, 2, 3.0, True)
        # accelerate launch's variables, the threads its OMP_NUM_THREADS=1 gives, the repository, offline, warm
        assert (s["threads"], s["cwd"], s["hf_offline"], s["accelerate"], s["warm"]) == (1, str(ROOT), "1", "no", True)
        # its DataLoader workers start as a launched rank's do (fork on Linux before Python 3.14), not from a
        # forkserver of its own (a cold interpreter: ~10 s before the first batch)
        assert s["start_method"] == multiprocessing.context._default_context._default_context._name
    assert not any(alive_in_group(pid) for pid in pids)


def test_a_failing_rank_tears_the_others_down_and_nothing_is_left(tmp_path):
    pids = []
    start = time.monotonic()
    job = run_ranks(["fail", tmp_path], nproc=2, target="helpers.rank_probe:main", on_start=pids.extend, timeout=120)
    assert time.monotonic() - start < 60 + GRACE_S
    assert job.ranks[1].returncode == 3 and job.returncode != 0 and not job.timed_out, job.report()
    assert job.ranks[0].returncode != 0  # stopped: by the teardown's SIGTERM, or by gloo seeing its peer gone
    assert not any(alive_in_group(pid) for pid in pids)


def test_a_job_past_its_timeout_is_killed_with_every_process_of_its_ranks(tmp_path):
    pids = []
    job = run_ranks(["hang", tmp_path], nproc=2, target="helpers.rank_probe:main", on_start=pids.extend, timeout=3)
    assert job.timed_out and job.returncode == 124 and job.torn_down == [0, 1]
    assert job.seconds < 3 + GRACE_S + 10
    children = [int((tmp_path / f"child_{r}").read_text()) for r in (0, 1)]
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in children + pids)
    assert not any(alive_in_group(pid) for pid in pids)
