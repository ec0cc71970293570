"""Beyond one process group's first life: torchrun's elastic restarts, and several "nodes" over loopback."""

import re
import subprocess
import sys

import pytest

from conftest import (ROOT, TINY, assert_same_weights, environment, free_port, read_json, read_jsonl, resume_job,
                      resumed_from)

pytestmark = pytest.mark.slow


def test_torchrun_restarts_a_killed_worker_and_the_run_ends_bitwise_equal(images, reference, tmp_path):
    """torchrun --max_restarts 1 over a c10d rendezvous; rank 1 SIGKILLs itself after step 4 (before
    that step's checkpoint). torchrun stops rank 0, starts both again, and the same command's
    --resume latest continues from step_3: the weights end bitwise-equal to the run never killed."""
    out = tmp_path / "run"
    argv = resume_job(images, out, 2, "--checkpoint_every_steps", "1", "--resume", "latest")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--max_restarts", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
           str(ROOT / "tests" / "helpers" / "signal_at.py"), "step:4", "KILL", "self", "1", *map(str, argv)]
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=300,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exitcode: -9" in proc.stderr  # the kill happened, and torchrun restarted the group
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_3"
    assert_same_weights(out, reference[2])


def test_two_nodes_over_loopback_train_as_one_job(images, reference, tmp_path):
    """Two `accelerate launch` commands with accel_configs/multi_node.yaml, each a "node" of one process,
    told apart by the machine-specific keys only (plus --mixed_precision no: the reference is fp32 and
    bf16 autocast would only slow these CPU processes; and one thread each, as the reference's two
    processes have on this 2-core machine: float sums differ with the thread count). They form one job of world size 2
    that trains bitwise as the single-node 2-process run does (the same global ranks, hence the same disjoint shards:
    tests/test_sampling.py), validates every sample once, and only the main process writes."""
    out, port = tmp_path / "run", free_port()
    argv = resume_job(images, out, 1, "--dump_rank_metrics")
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "accelerate.commands.launch",
         "--config_file", str(ROOT / "accel_configs" / "multi_node.yaml"),
         "--num_machines", "2", "--num_processes", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
         "--main_process_port", str(port), "--mixed_precision", "no", "--num_cpu_threads_per_process", "1",
         str(ROOT / "train_classification.py"),
         *map(str, argv)], cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_stdout, stderr) in zip(nodes, outputs):
        assert node.returncode == 0, stderr[-3000:]
    results = read_json(out / "results.json")
    assert results["world_size"] == 2
    assert_same_weights(out, reference[2])
    last = out / "eval" / "epoch_2"
    ranks = [read_json(last / f"rank_{r}.json") for r in (0, 1)]
    assert sorted(p.name for p in last.iterdir()) == ["global.json", "rank_0.json", "rank_1.json"]
    assert sum(r["samples"] for r in ranks) == read_json(last / "global.json")["samples"] == \
        read_json(reference[1] / "results.json")["val_samples"] == 7
    # One writer, the main process: every row of metrics.jsonl once, as in the single-node run. (The
    # console is Accelerate's: accelerator.print speaks once per node, so both nodes' logs show progress.)
    rows = [(r.get("step"), sorted(r)) for r in read_jsonl(out / "metrics.jsonl")]
    assert rows == [(r.get("step"), sorted(r)) for r in read_jsonl(reference[2] / "metrics.jsonl")]
    assert "done: val top-1" in outputs[0][0] and "done: val top-1" in outputs[1][0]


def test_the_slurm_script_trains_on_two_nodes_and_requeues_itself_on_sigterm(tmp_path):
    """accel_configs/slurm_multi_node.sbatch, unchanged, under a fake SLURM (tests/helpers/fake_slurm:
    srun runs the per-node command once per node here, scontrol names this machine and records
    requeues). SIGTERM to the batch script alone, as --signal=B:TERM@120 sends it, reaches every
    training process through srun: a checkpoint, then `scontrol requeue`; the requeued job (the same
    script again) continues from that checkpoint with the world size of 2 nodes."""
    import os
    import signal
    import time

    out, log = tmp_path / "run", tmp_path / "slurm.log"
    env = environment({"PATH": f"{ROOT / 'tests' / 'helpers' / 'fake_slurm'}:{os.environ['PATH']}",
                       "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_JOB_ID": "4242",
                       "GPUS_PER_NODE": "1", "MAIN_PORT": str(free_port()), "FAKE_SLURM_LOG": str(log),
                       "OMP_NUM_THREADS": "1"})  # two "nodes" share 2 cores
    # fp32: the config's bf16 autocast is slow on CPU (a training flag, passed through as any other)
    cmd = ["bash", str(ROOT / "accel_configs" / "slurm_multi_node.sbatch"), *TINY, "--epochs", "4",
           "--warmup_epochs", "1", "--checkpoint_every_steps", "1", "--mixed_precision", "no", "--output_dir", str(out)]
    job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + 240
    while not (out / "checkpoints" / "step_2").is_dir():
        assert job.poll() is None and time.monotonic() < deadline, "no checkpoint step_2"
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)  # the batch shell only
    stopped = job.communicate(timeout=240)[0]
    assert job.returncode != 0 and not (out / "results.json").exists(), stopped[-3000:]
    stopped_at = set(re.findall(r"interrupted by SIGTERM at step (\d+): checkpoint saved", stopped))
    assert len(stopped_at) == 1, stopped[-3000:]
    assert log.read_text() == "requeue 4242\n"
    finished = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                              start_new_session=True)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    # Each node's log says it (accelerator.print speaks once per node): the checkpoint the SIGTERM saved, at
    # the step both nodes stopped at (step_N, or epoch_0 when the stop fell on the epoch's last step).
    # (The nodes share one pipe here: their lines may run into each other.)
    resumed = set(re.findall(r"resumed from (\S+): epoch \d+, step (\d+)", finished.stdout))
    assert len(resumed) == 1, stopped[-2000:] + "\n".join(line for line in finished.stdout.splitlines()
                                                          if "resum" in line)
    assert resumed.pop()[1] == stopped_at.pop()
    results = read_json(out / "results.json")
    assert results["world_size"] == 2 and results["epochs_completed"] == 4
