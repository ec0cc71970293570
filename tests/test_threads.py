"""`accelerate launch` on a CPU-only machine pins OMP_NUM_THREADS=1; we use the cores unless told otherwise."""

import pytest
from conftest import launch

from utils.core.threads import cores_per_process


def probe(env=None, launcher_args=()):
    proc = launch([], env=env, script="tests/helpers/threads_probe.py", launcher_args=launcher_args, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.strip().splitlines()[-1].split("=")[1])


@pytest.mark.slow
def test_default_launch_uses_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if cores_per_process() < 2:
        pytest.skip("a single core: nothing to win")
    assert probe() == cores_per_process() >= 2


@pytest.mark.slow
def test_explicit_thread_settings_are_respected(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert probe(env={"OMP_NUM_THREADS": "1"}) == 1
    assert probe(launcher_args=["--num_cpu_threads_per_process", "1"]) == 1
