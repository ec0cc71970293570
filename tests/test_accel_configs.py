"""accel_configs/: every file loads with Accelerate's own loader; the CPU ones pass `accelerate test`."""

import os
import subprocess
import sys

import pytest
from accelerate.commands.config.config_args import load_config_from_file

from conftest import ROOT, free_port

CONFIGS = sorted((ROOT / "accel_configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_loads_and_every_key_is_commented(path):
    config = load_config_from_file(str(path))
    assert config.num_processes >= 1
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not line.rstrip().endswith(":"):
            assert "#" in line, f"{path.name}: key without a comment: {line!r}"


def test_expected_files_exist():
    names = {p.name for p in (ROOT / "accel_configs").iterdir()}
    assert {"cpu.yaml", "cpu_2proc.yaml", "single_gpu.yaml", "multi_gpu.yaml", "multi_node.yaml", "fsdp.yaml",
            "slurm_multi_node.sbatch"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu.yaml", "cpu_2proc.yaml"])
def test_accelerate_test_passes(name, tmp_path):
    # accelerate's own test script does not ask for the CPU; on a machine without GPUs its torchrun
    # processes need ACCELERATE_USE_CPU to form a gloo group (our script asks by itself).
    env = {**os.environ, "ACCELERATE_USE_CPU": "true"}
    cmd = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "test", "--config_file",
           str(ROOT / "accel_configs" / name)]
    if name == "cpu_2proc.yaml":  # a free port, in case another job holds the file's
        patched = tmp_path / name
        patched.write_text((ROOT / "accel_configs" / name).read_text().replace("29517", str(free_port())))
        cmd[-1] = str(patched)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    assert "Test is a success" in output
    if name == "cpu_2proc.yaml":  # "success" is also printed by two unrelated single processes
        assert "Distributed environment: DistributedType.MULTI_CPU" in output and "Num processes: 2" in output
