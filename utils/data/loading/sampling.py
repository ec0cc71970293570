"""Repeated augmentation (--ra_reps), laid out for Accelerate's sharding of batches."""

import math

import torch
from torch.utils.data import Sampler

from utils.core.seeding import spread


class RepeatedAugmentationSampler(Sampler):
    """Each epoch, every sample drawn appears `reps` times, differently augmented, its copies on
    different processes (as far as there are processes), and the epoch keeps its length: the
    repeated augmentation of DeiT and torchvision's recipes (their RASampler).

    Their sampler serves one rank; Accelerate instead shards a single order for all ranks, handing
    rank r the batches r, r + W, r + 2W, ... of it. So this sampler builds what each rank must see and
    interleaves it batch by batch:
    1. a permutation of the n samples from (seed, epoch), the same on every rank;
    2. its first ceil(n / reps) samples, each repeated `reps` times in a row, cut (or cycled) to
       W * ceil(n / W) items, so each rank's share is what it would be without repetition;
    3. dealt round-robin, item p to rank p % W: consecutive copies of a sample go to different ranks;
    4. each rank's share padded to whole batches from its own start, then laid out as rank 0's first
       batch, rank 1's first batch, ...: no batch straddles two ranks and Accelerate pads nothing.
    It yields keys, not indices: copy c of sample i is i + c * n, so EpochSeeded gives every copy
    its own random draws. Call set_epoch before each epoch (the prepared loader's set_epoch does).
    """

    def __init__(self, num_samples, reps, num_processes, batch_size, seed):
        self.n, self.reps, self.world, self.batch_size, self.seed = num_samples, reps, num_processes, batch_size, seed
        self.epoch = 0
        self.per_rank = math.ceil(num_samples / num_processes)
        self.steps = math.ceil(self.per_rank / batch_size)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.steps * self.batch_size * self.world

    def __iter__(self):
        g = torch.Generator().manual_seed(spread(self.seed, self.epoch))
        drawn = torch.randperm(self.n, generator=g)[:math.ceil(self.n / self.reps)]
        repeated = drawn.repeat_interleave(self.reps)
        total = self.per_rank * self.world
        position = torch.arange(total)
        index = repeated[position % len(repeated)]
        # Which copy each item is: its place within its run of reps, plus reps per cycle of the list.
        copy = position % len(repeated) % self.reps + self.reps * (position // len(repeated))
        keys = index + copy * self.n
        shares = keys.view(self.per_rank, self.world).t()  # (W, per_rank): item p goes to rank p % W
        padded = shares[:, torch.arange(self.steps * self.batch_size) % self.per_rank]
        order = padded.view(self.world, self.steps, self.batch_size).transpose(0, 1)  # (steps, W, batch)
        return iter(order.reshape(-1).tolist())


def check_options(args, need, source):
    """Repeated augmentation."""
    need(args.ra_reps >= 1, "ra_reps", "must be >= 1")
