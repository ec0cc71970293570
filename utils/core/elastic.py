"""Restarts under torchrun --max_restarts (or accelerate launch --max_restarts): the new workers must
not meet the dead ones' addresses.

When a worker dies, torchrun stops the group and starts it again with TORCHELASTIC_RESTART_COUNT
raised, over the same rendezvous store (the agent's TCPStore). The default process group publishes
each rank's address in that store under keys that do not change between attempts, so a restarted
rank can read a dead rank's address before its successor overwrites it: gloo fails with "Connection
refused" in connectFullMesh (NCCL's unique id has the same race; pytorch/pytorch#167288). A restarted
worker therefore joins the group itself, under a key prefix of its own attempt; Accelerate then finds
the group formed and uses it. The first attempt is left to Accelerate unchanged.
"""

import os

import torch
import torch.distributed as dist


def join_restarted_group(cpu, timeout):
    """Form the default process group under the prefix `attempt_<n>` when this is restart n >= 1 of a
    torchrun group; nothing otherwise. `cpu`: gloo; else torch's default backend for the device."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if attempt == 0 or dist.is_initialized() or "MASTER_ADDR" not in os.environ:
        return False
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # else rank 0 serves it
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=rank == 0 and not agent_hosts, timeout=timeout, multi_tenant=True)
    if not cpu and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="gloo" if cpu else None, store=dist.PrefixStore(f"attempt_{attempt}", store),
                            rank=rank, world_size=world_size, timeout=timeout)
    return True
