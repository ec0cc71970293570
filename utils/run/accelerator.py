"""The Accelerator a run's options ask for (its process group's timeout, compilation, mixed precision, accumulation,
the sampler's seeds), what FSDP, when a launcher config asks for it, can do here, and the device errors a run cannot
go on after (out of memory, too many NaN losses)."""

import os
import sys
from datetime import timedelta

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import DistributedType, InitProcessGroupKwargs, TorchDynamoPlugin

from utils.core.elastic import join_restarted_group
from utils.core.seeding import spread
from utils.reporting import trackers
from utils.training.batch_size import is_out_of_memory, out_of_memory_line
from utils.training.objective import NonFiniteLoss


def build_accelerator(settings):
    """The Accelerator of the run Settings `settings` describe (its launch, dashboards, accumulation and seed)."""
    launch = settings.launch
    # A rank that dies leaves the others blocked in a collective; the process-group timeout bounds
    # that wait (torchrun also tears a job down when one of its local processes exits).
    timeout = InitProcessGroupKwargs(timeout=timedelta(seconds=launch.dist_timeout_s))
    # --compile: Accelerate compiles the prepared model (after DDP wrapping, as it should be); without
    # it, an accelerate config's dynamo settings still apply.
    compiling = ({"dynamo_plugin": TorchDynamoPlugin(backend="inductor", mode=launch.compile_mode)}
                 if launch.compile else {})
    cpu = not torch.accelerator.is_available()
    join_restarted_group(cpu, timeout.timeout)  # torchrun --max_restarts: see utils/core/elastic.py
    return Accelerator(
        **compiling,
        kwargs_handlers=[timeout],
        log_with=trackers.TRACKERS[settings.trackers.report_to] or None,
        project_dir="runs",  # TensorBoard insists on a folder now; trackers.start points it at the run's
        # Without this, Accelerate (1.15) treats N processes started by torchrun on a machine with
        # no GPU as N unrelated single-process runs: no process group, no sharding, one set of
        # files written N times. On such a machine we ask for CPU explicitly: gloo, real sharding.
        cpu=cpu,
        mixed_precision=launch.mixed_precision,
        gradient_accumulation_steps=settings.optimizer.grad_accum_steps,
        # By default a prepared scheduler steps once per *process* at every call, assuming a schedule
        # counted in single-process batches. Ours is laid out in epochs of this process's steps.
        step_scheduler_with_optimizer=False,
        # The sampler seeds each epoch with data_seed + epoch: spread the seeds apart so that seed s, epoch e+1 is
        # not the permutation of seed s+1, epoch e. non_blocking: host-to-GPU copies of pinned batches overlap compute.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=spread(settings.data.seed),
                                                  non_blocking=True),
    )


def check_fsdp(settings, accelerator):
    """A launcher config that asks for FSDP: say when Accelerate did not give it; what it cannot do (a problem)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return None
    if accelerator.distributed_type != DistributedType.FSDP:  # Accelerate 1.15 shards on accelerators only
        accelerator.print(f"fsdp: not on {accelerator.device.type} (Accelerate runs FSDP on GPUs and other "
                          f"accelerators); these processes train as plain data parallel")
        return None
    if accelerator.state.fsdp_plugin.fsdp_version != 2:  # the export and buffer sharing rely on FSDP2's state dicts
        return "fsdp: the script runs FSDP2 (fsdp_version: 2, as in accel_configs/fsdp.yaml); set it in your config"
    if settings.optimizer.lr == "auto" or settings.range_test.lr_find:
        return "--lr auto, --lr_find: not available with FSDP yet; run the range test with a DDP config and give --lr"
    if settings.optimizer.batch_size == "auto":
        return ("--batch_size auto: not available with FSDP (its tries would hold the whole model on each device): "
                "give a number with --global_batch_size, or use a DDP config")
    if settings.model.lora:
        return "--lora: not available with FSDP yet (its frozen weights are untried in shards); use a DDP config"
    if settings.model.ema:
        return "--model_ema: not available with FSDP (the averaged copy is not sharded); drop it or use a DDP config"
    return None


def cannot_go_on(error, settings, accelerator, prog):
    """A run that cannot go on stops with one line, exit 1: more NaN/inf losses than --skip_nonfinite_steps allows (said
    once), or the device out of memory (said by the process it happened on, with what to pass); other errors go on."""
    if isinstance(error, NonFiniteLoss):
        accelerator.print(f"{prog}: error: {error}", file=sys.stderr)
    elif is_out_of_memory(error):
        micro, accumulation = settings.optimizer.batch_size, settings.optimizer.grad_accum_steps
        global_batch = settings.batch_size.global_batch_size or micro * accumulation * accelerator.num_processes
        print(f"{prog}: error: " + out_of_memory_line(error, micro, global_batch,
                                                      accelerator.device), file=sys.stderr, flush=True)
    else:
        raise error
    raise SystemExit(1) from None
