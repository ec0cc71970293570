"""The batch a recipe was tuned for, whatever the hardware, and the largest micro-batch of it that fits the device.

--global_batch_size N: each of P processes takes N / P samples an optimizer step, in micro-batches of --batch_size M,
so --grad_accum_steps is N / P / M, and micro-batch x accumulation x processes is N exactly: the LR, warmup and
schedule of a recipe hold on 1, 2 or 8 processes. A share or a micro-batch that does not divide is refused, never
rounded (a global batch silently smaller would change the recipe).

--batch_size auto: the divisors of the share, largest first, each tried before training with a forward, backward and
optimizer step of the run's model (utils/run/batch_size.py). A try ends with one gather of every process's outcome,
so a process that fits less pulls the others down with it and no process waits on a collective that another skipped:
Accelerate's find_executable_batch_size retries on each process alone (they disagree, and the global batch changes),
Lightning's BatchSizeFinder does not run under DDP. An out-of-memory error (the device's own; on a CPU nothing raises
it, and the first divisor is taken) means "does not fit"; any other error ends the run with one line on every process.
"""

from dataclasses import dataclass

import torch
from accelerate.utils import gather_object

from utils.core.errors import ConfigError

FITS, OUT_OF_MEMORY, FAILED = 2, 1, 0  # a try's outcome on one process; the lowest of all processes decides
MEMORY_MARGIN = 0.10  # of the device's memory left free by the micro-batch chosen (allocator caches, fragmentation)


DEFAULT_ACCUMULATION = 1  # --grad_accum_steps left at it: with --global_batch_size, the plan picks the accumulation


@dataclass(frozen=True)
class BatchSizeOptions:
    """--global_batch_size: the recipe's global batch, whatever the hardware (the micro-batch and accumulation in
    force: the OptimizerOptions', once the BatchPlan is taken)."""

    global_batch_size: int  # None: micro-batch x accumulation x processes


@dataclass(frozen=True)
class BatchPlan:
    """How a global batch is taken: `micro` samples a forward pass, `accumulation` of them a process's optimizer
    step, on `processes` processes; `tried`: (micro-batch, outcome) of each try of --batch_size auto."""

    global_batch: int
    processes: int
    micro: int
    accumulation: int
    tried: tuple = ()

    @property
    def found(self):
        return bool(self.tried)

    def line(self):
        """The start-up line."""
        how = ("batch_size auto: tried " + ", ".join(f"{micro} ({outcome})" for micro, outcome in self.tried) + "; "
               if self.found else "global batch: ")
        return (f"{how}micro-batch {self.micro} x {self.accumulation} accumulation step(s) x {self.processes} "
                f"process(es) = global batch {self.global_batch}")

    def record(self):
        """What run.json and results.json say of it."""
        return {"global_batch_size": self.global_batch, "processes": self.processes, "batch_size": self.micro,
                "grad_accum_steps": self.accumulation, "found": self.found,
                "tried": [[micro, outcome] for micro, outcome in self.tried]}


def share_of(global_batch, processes):
    """Each process's share of the global batch: N / processes, refused when it does not divide."""
    if global_batch % processes:
        raise ConfigError(f"global_batch_size: {global_batch} is not a multiple of the {processes} processes; pick a "
                          f"multiple of {processes}, or launch a process count that divides it")
    return global_batch // processes


def divisors(share):
    """The micro-batches a share can be taken in, largest first."""
    return [m for m in range(share, 0, -1) if share % m == 0]


def plan_for(global_batch, processes, micro, accumulation=None):
    """The BatchPlan of --global_batch_size with --batch_size `micro` (given, or found); `accumulation`: a
    --grad_accum_steps given beside them (None: left to follow), refused when it says otherwise."""
    share = share_of(global_batch, processes)
    if share % micro:
        raise ConfigError(f"batch_size: {micro} does not divide each process's share of the global batch "
                          f"({global_batch} / {processes} process(es) = {share}); pick one of "
                          f"{', '.join(map(str, divisors(share)))}, or --batch_size auto")
    if accumulation is not None and accumulation != share // micro:
        raise ConfigError(f"grad_accum_steps: follows from --global_batch_size ({share} a process / micro-batch "
                          f"{micro} = {share // micro}), not {accumulation}: drop it")
    return BatchPlan(global_batch, processes, micro, share // micro)


def is_out_of_memory(error):
    """Whether `error` is the device's out-of-memory (CUDA's OutOfMemoryError; MPS and XPU raise RuntimeErrors)."""
    return isinstance(error, torch.OutOfMemoryError) or (isinstance(error, RuntimeError)
                                                          and "out of memory" in str(error).lower())


def out_of_memory_line(error, micro, global_batch, device):
    """The line of a run that ran out of the device's memory at micro-batch `micro` of `global_batch`: what to pass
    instead."""
    first = (str(error).splitlines() or [""])[0][:200]
    return (f"out of memory on {device} with a micro-batch of {micro} ({type(error).__name__}: {first}); pass "
            f"--global_batch_size {global_batch} --batch_size auto to train the same global batch in the largest "
            f"micro-batches that fit")


def find_micro_batch(accelerator, global_batch, attempt):
    """The BatchPlan of the largest micro-batch that fits on every process: `attempt(micro)` runs one training step
    at that size, returns when it fits, raises the device's out-of-memory error when it does not (anything else it
    raises ends the run: a ConfigError with its first line, on every process)."""
    processes = accelerator.num_processes
    tried = []
    for micro in divisors(share_of(global_batch, processes)):
        outcome, problem = FITS, ""
        try:
            attempt(micro)
        except Exception as e:  # noqa: BLE001 - any error: the others must hear of it before anyone raises
            outcome = OUT_OF_MEMORY if is_out_of_memory(e) else FAILED
            problem = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        outcomes = accelerator.gather(torch.tensor([outcome], device=accelerator.device)).tolist()
        if min(outcomes) == FAILED:
            problems = gather_object([problem])
            rank = outcomes.index(FAILED)
            raise ConfigError(f"batch_size auto: process {rank} failed trying a micro-batch of {micro}: "
                              f"{problems[rank]}")
        if min(outcomes) == FITS:
            tried.append((micro, "fits"))
            return BatchPlan(global_batch, processes, micro, global_batch // processes // micro, tuple(tried))
        short = [str(rank) for rank, o in enumerate(outcomes) if o == OUT_OF_MEMORY]
        tried.append((micro, "out of memory" + (f" on process {', '.join(short)}" if processes > 1 else "")))
    raise ConfigError(f"batch_size auto: not even a micro-batch of 1 fits the device ({tried[-1][1]}); a smaller "
                      f"model or input, --mixed_precision bf16, --grad_checkpointing, or a larger device")
