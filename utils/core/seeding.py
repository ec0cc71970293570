"""Randomness that is a function of (seed, epoch, sample index) alone: what makes resumed runs see the same data."""

import contextlib
import hashlib

import torch
from torch.utils.data import Dataset


class EpochSeeded(Dataset):
    """A dataset whose random augmentation is a function of (seed, epoch, sample index) alone.

    Not of the worker that loads a sample, the number of workers or processes, or where the epoch
    started: a run resumed mid-epoch, or on other hardware, sees exactly the same augmented images.
    The epoch lives in shared memory, so persistent worker processes see `set_epoch` too. The wrapped
    dataset takes keys past its end too: key k is copy k // len of sample k % len (what the repeated
    augmentation sampler draws, utils/data/loading/sampling.py), augmented with draws of its own.
    """

    def __init__(self, dataset, epoch):
        self.dataset, self.epoch = dataset, epoch

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __getitems__(self, indices):  # one batched read from `datasets`, as the DataLoader would do
        return self.dataset.__getitems__(indices) if hasattr(self.dataset, "__getitems__") \
            else [self.dataset[i] for i in indices]


SEED_SPREAD = 1_000_003  # a prime; offsets below it (an epoch, a synthetic sample) never make two seeds meet


def spread(seed, offset=0):
    """One integer per (seed, offset): seed s at offset e + 1 is not seed s + 1 at offset e (as seed + offset
    would be), so consecutive seeds give unrelated epochs, samples and shard orders. Every seed the data
    side derives from --seed goes through here."""
    return seed * SEED_SPREAD + offset


def sample_rng(seed, epoch, index):
    """torch's global RNG seeded for one sample (v2 transforms draw from it), the caller's restored."""
    return _seeded((spread(seed, epoch) * 2_147_483_647 + index) % 2**63)


def batch_rng(seed, epoch, batch, rank):
    """torch's global RNG seeded for one batch of one rank (MixUp/CutMix and erasing on the device draw
    from it on the host), the caller's restored: ranks differ, a resumed run draws the same again."""
    digest = hashlib.blake2b(f"batch:{seed}:{epoch}:{batch}:{rank}".encode(), digest_size=8).digest()
    return _seeded(int.from_bytes(digest, "little") >> 1)


@contextlib.contextmanager
def _seeded(key):
    # By hand rather than torch.random.fork_rng + manual_seed: ~2 us instead of ~90 us a sample.
    saved = torch.default_generator.get_state()
    torch.default_generator.manual_seed(key)
    try:
        yield
    finally:
        torch.default_generator.set_state(saved)
