"""The training, validation and multi-view test loaders of map-style data, sharded by Accelerate; the streamed
training loader is utils/data/streaming/loader.py. Both give the loop one interface."""

import torch
from torch.utils.data import DataLoader

from utils.core.preemption import worker_init_fn
from utils.data.loading.sampling import EpochSampler


def build_dataloaders(accelerator, train_ds, val_ds, batch_size, num_workers, ra_reps=1, seed=0, decode=None,
                      weights=None, draws=None):
    """Plain DataLoaders, prepared: Accelerate shards them and seeds the shuffle with (seed, epoch); with `decode`
    (--decode_on_device: a utils/data/decoding/on_device.DeviceDecoder) every batch goes through it on its way out.

    No DistributedSampler here: `prepare` already shards, and would shard it a second time. Call
    `train_loader.batches(epoch)` for each epoch's: the permutation depends on (seed, epoch) alone.
    With ra_reps > 1, or each sample's `weights` (--sampler balanced: `draws` of them an epoch, default the
    split's size), the train order comes from EpochSampler, built for that sharding (utils/data/loading/sampling.py).
    """
    common = loader_options(accelerator, batch_size, num_workers)
    # One process leaves the epoch's last batch ragged (several pad it to full size); a ragged batch
    # of a single image would make BatchNorm fail in training, so that one image waits an epoch.
    lone_last = accelerator.num_processes == 1 and (draws or len(train_ds)) % batch_size == 1
    # Own generator: creating an epoch's iterator then draws nothing from the global RNG (which
    # a checkpoint restores), so a resumed run's random streams line up with an uninterrupted one.
    if ra_reps > 1 or weights is not None:  # with ra_reps > 1, whole batches of each rank's own share
        sampler = EpochSampler(len(train_ds), accelerator.num_processes, batch_size, seed, ra_reps, weights, draws)
        train = DataLoader(train_ds, sampler=sampler, drop_last=lone_last and ra_reps == 1,
                           generator=torch.Generator(), **common)
    else:
        train = DataLoader(train_ds, shuffle=True, drop_last=lone_last, generator=torch.Generator(), **common)
    # The val loader too: its first iterator would otherwise draw from the global RNG, at the first
    # validation of each process (persistent workers), which a resumed run meets at another point.
    val = DataLoader(val_ds, shuffle=False, generator=torch.Generator(), **common)
    train, val = accelerator.prepare(train, val)
    return MapLoader(accelerator, train, decode), val if decode is None else Decoded(val, decode)


def loader_options(accelerator, batch_size, num_workers):
    """What every DataLoader of a run is built with. Workers leave SIGTERM/SIGINT to their rank, which checkpoints
    (utils/core/preemption.py); they are kept from epoch to epoch (stop_workers ends them)."""
    return dict(batch_size=batch_size, num_workers=num_workers, worker_init_fn=worker_init_fn(),
                pin_memory=accelerator.device.type == "cuda", persistent_workers=num_workers > 0)


def build_val_loader(accelerator, val_ds, common, decode=None):
    """The validation loader (`common`: loader_options), prepared: sharded and padded, the padding dropped when
    gathered. Its own generator: its first iterator would otherwise draw from the global RNG, at the first
    validation of each process (persistent workers), which a resumed run meets at another point."""
    val = accelerator.prepare(DataLoader(val_ds, shuffle=False, generator=torch.Generator(), **common))
    return val if decode is None else Decoded(val, decode)


class MapLoader:
    """The training loader of a map-style dataset (a DataLoader prepared by Accelerate), with what every
    training loader has (a StreamLoader too), so that the loop never asks which one it holds: len() micro-
    batches an epoch, `batches(epoch, skipped)`, and `save_position` / `load_position` of a checkpoint."""

    def __init__(self, accelerator, loader, decode=None):
        self.accelerator, self.loader, self.decode = accelerator, loader, decode

    def __len__(self):
        return len(self.loader)

    def batches(self, epoch, skipped=0):
        """The training batches of `epoch` after the first `skipped` (a resumed run)."""
        # Accelerate's seedable sampler draws the permutation from (seed, epoch): the same on every
        # rank, different every epoch, and independent of which epochs ran before in this process.
        self.loader.set_epoch(epoch)  # our EpochSampler's epoch too: the resumed loader below shares that sampler
        self.loader.dataset.set_epoch(epoch)  # the augmentation seed; Accelerate's set_epoch reaches the sampler only
        loader = self.loader
        if skipped:
            # Skips indices, not loaded batches. The new loader counts its own epochs from 0 and would
            # draw epoch 0's permutation: give it this epoch.
            loader = self.accelerator.skip_first_batches(loader, skipped)
            loader.set_epoch(epoch)
        return loader if self.decode is None else map(self.decode, loader)

    def close(self):
        """Its kept workers stopped now, and Accelerate told that no epoch of it is under way (one left mid-way, by
        --max_train_steps or the LR range test, would stay its record of the loader the loop is in). (A resumed
        epoch's loader, skip_first_batches', ends its own with the epoch.)"""
        stop_workers(self.loader)
        getattr(self.loader, "end", lambda: None)()

    def save_position(self, folder, rank):
        """Nothing of its own: the checkpoint's step count and the sampler's (seed, epoch) say where it stood."""

    def load_position(self, folder, rank):
        """Nothing to load: `batches(epoch, skipped)` skips to the checkpoint's step."""


def build_test_loader(accelerator, test_ds, views_per_batch, num_workers):
    """The multi-view test's loader, prepared (sharded, padded) like the val loader: each batch holds
    views_per_batch // crops clips of `crops` views, so a forward pass sees about views_per_batch views."""
    crops = test_ds.shape[0]
    loader = DataLoader(test_ds, batch_size=max(1, views_per_batch // crops), shuffle=False, num_workers=num_workers,
                        worker_init_fn=worker_init_fn(), pin_memory=accelerator.device.type == "cuda",
                        generator=torch.Generator())
    return accelerator.prepare(loader)


def stop_workers(loader):
    """Stop a loader's kept workers (persistent_workers) now and join them: what the garbage collection of its
    iterator does, whenever that comes. A run ends with none of its workers alive (an in-process run too: else a
    later collection, in whatever code runs then, waits to join them). torch's shutdown of an iterator,
    `_shutdown_workers`, is private (PyTorch Lightning calls it at teardown too); a loader of ours has its close()."""
    if hasattr(loader, "close"):  # MapLoader, StreamLoader, Decoded
        loader.close()
        return
    loader = getattr(loader, "base_dataloader", loader)  # Accelerate's prepared loaders wrap a DataLoader
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        getattr(iterator, "_shutdown_workers", lambda: None)()
        loader._iterator = None


class Decoded:
    """A prepared loader whose batches go through a DeviceDecoder (the validation loader): iterated, measured and
    asked for its dataset as the loader itself."""

    def __init__(self, loader, decode):
        self.loader, self.decode = loader, decode

    def __iter__(self):
        return map(self.decode, self.loader)

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def close(self):
        stop_workers(self.loader)
