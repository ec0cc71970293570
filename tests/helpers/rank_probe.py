"""A stand-in rank for tests/test_ranks.py: what tests/ranks.py gives a forked rank, and how it ends.

    run_ranks([MODE, OUT_DIR], target="helpers.rank_probe:main")

MODE: ok (join the process group, all-reduce the ranks, write what this rank sees to OUT_DIR/rank_<R>.json);
fail (rank 1 exits 3 at once, the others wait in a collective); hang (every rank sleeps, with a child process
of its own, as a DataLoader worker would be).
"""

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path


def main(argv=None):
    mode, out = sys.argv[1:] if argv is None else argv
    rank = int(os.environ.get("RANK", "0"))
    if mode == "hang":
        child = subprocess.Popen(["sleep", "600"])  # in this rank's process group, as its workers are
        Path(out, f"child_{rank}").write_text(str(child.pid))
        time.sleep(600)
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    state = PartialState(cpu=True)
    if mode == "fail" and rank == 1:
        raise SystemExit(3)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total) if state.num_processes > 1 else None
    print(f"rank {rank} says hello", flush=True)
    print(f"rank {rank} to stderr", file=sys.stderr, flush=True)
    Path(out, f"rank_{rank}.json").write_text(json.dumps({
        "rank": state.process_index, "world": state.num_processes, "sum": total.item(),
        "threads": torch.get_num_threads(), "session_leader": os.getsid(0) == os.getpid(),
        "cwd": os.getcwd(), "hf_offline": os.environ.get("HF_HUB_OFFLINE"),
        "accelerate": os.environ.get("ACCELERATE_MIXED_PRECISION"), "warm": "helpers.warm" in sys.modules,
        "start_method": multiprocessing.get_start_method()}))
