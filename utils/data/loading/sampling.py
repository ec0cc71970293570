"""The training order of map-style data beyond a plain shuffle: class-balanced draws (--sampler balanced) and
repeated augmentation (--ra_reps), one draw an epoch for every rank, laid out for Accelerate's sharding of batches."""

import math

import torch
from torch.utils.data import Sampler

from utils.core.seeding import spread


class EpochSampler(Sampler):
    """The training order of map-style data when it is not a plain shuffle: class-balanced draws (`weights`,
    --sampler balanced), repeated augmentation (`reps`, --ra_reps), or both. Each epoch's order is one draw from
    (seed, epoch) for the whole run, the same on every rank, which Accelerate then shards: 1, 2 or 8 processes
    train on the same samples in the same order, and a resumed epoch (skip_first_batches) is the same draw.

    1. `draws` samples (default: the split's size), or ceil(draws / reps) with repetition: without `weights` the
       first of a permutation of the n samples; with them, drawn with replacement with probability proportional
       to each sample's weight (torch.multinomial, the epoch's generator);
    2. with reps > 1, laid out as repeated augmentation (DeiT's and torchvision's RASampler, for Accelerate's
       sharding): each drawn sample repeated `reps` times in a row, cut (or cycled) to W * ceil(draws / W) items,
       dealt round-robin (item p to rank p % W, so a sample's copies go to different processes), each rank's
       share padded to whole batches from its own start, then interleaved batch by batch (rank 0's first batch,
       rank 1's first, ...): no batch straddles two ranks and Accelerate pads nothing. With reps 1 the draw is the
       order, which Accelerate cuts into batches and deals round-robin as it does a shuffle.
    It yields keys, not indices: the c-th time sample i comes up in an epoch it is key i + c * n, so EpochSeeded
    gives every copy (a repeat or a balanced re-draw) augmentation draws of its own. Call set_epoch before each
    epoch (the prepared loader's set_epoch does).
    """

    def __init__(self, num_samples, num_processes, batch_size, seed, reps=1, weights=None, draws=None):
        self.n, self.reps, self.world, self.batch_size, self.seed = num_samples, reps, num_processes, batch_size, seed
        self.weights = None if weights is None else torch.as_tensor(weights, dtype=torch.float64)
        self.draws = draws or num_samples
        self.epoch = 0
        self.per_rank = math.ceil(self.draws / num_processes)
        self.steps = math.ceil(self.per_rank / batch_size)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.steps * self.batch_size * self.world if self.reps > 1 else self.draws

    def __iter__(self):
        g = torch.Generator().manual_seed(spread(self.seed, self.epoch))
        wanted = math.ceil(self.draws / self.reps)
        if self.weights is None:
            drawn = torch.randperm(self.n, generator=g)[:wanted]
        else:
            drawn = torch.multinomial(self.weights, wanted, replacement=True, generator=g)
        if self.reps == 1:
            return iter(keys(drawn, self.n).tolist())
        repeated = drawn.repeat_interleave(self.reps)
        index = repeated[torch.arange(self.per_rank * self.world) % len(repeated)]
        shares = keys(index, self.n).view(self.per_rank, self.world).t()  # (W, per_rank): item p to rank p % W
        padded = shares[:, torch.arange(self.steps * self.batch_size) % self.per_rank]
        order = padded.view(self.world, self.steps, self.batch_size).transpose(0, 1)  # (steps, W, batch)
        return iter(order.reshape(-1).tolist())


def keys(index, n):
    """Sample indices as keys: the c-th occurrence of sample i in `index` is i + c * n."""
    order = torch.argsort(index, stable=True)
    ranked = index[order]
    position = torch.arange(len(index))
    first = torch.ones(len(index), dtype=torch.bool)
    first[1:] = ranked[1:] != ranked[:-1]
    group_start = torch.cummax(torch.where(first, position, 0), dim=0).values
    occurrence = torch.empty_like(index)
    occurrence[order] = position - group_start
    return index + occurrence * n


def epoch_draws(data, accelerator):
    """The samples of a --sampler balanced epoch that --steps_per_epoch sets (None: the split's size). (A stream's
    epoch is its source's.)"""
    if data.steps_per_epoch is None or data.streaming:
        return None
    return data.steps_per_epoch * data.grad_accum_steps * data.batch_size * accelerator.num_processes


def check_options(data, need):
    """Repeated augmentation."""
    need(data.ra_reps >= 1, "ra_reps", "must be >= 1")
