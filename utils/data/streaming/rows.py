"""--streaming: train on a dataset read as a stream of shards (Hub, or local parquet/arrow/webdataset files).

Nothing of the training split is downloaded or cached ahead: `datasets` reads it shard by shard
(`load_dataset(..., streaming=True)`). What each process reads, and how a run resumes:

- Each process reads its own shards (`datasets.distributed.split_dataset_by_node`): with a shard
  count that is a multiple of the process count, whole shards; otherwise every process reads every
  shard and keeps one example in N (said at start-up). Its DataLoader workers split its shards
  again. Accelerate does not prepare this loader: its iterable-dataset path would have every rank
  read everything (or rank 0 read for all, with dispatch_batches).
- Each epoch, the shard order is shuffled (seeded by --seed and the epoch, `datasets`' own
  shard shuffle), and samples are shuffled in blocks of --shuffle_buffer read in a row (a permutation
  seeded by seed, epoch, rank, worker and block). Not `datasets`' rolling buffer: its content is
  not in its state_dict, so a resumed run would lose up to a buffer of samples. A block is re-read
  from its start on resume, which makes resuming exact: the same samples in the same order. Each
  worker reads the next block in a thread while it decodes the current one (two blocks of rows in
  its memory: 2 x --shuffle_buffer encoded files), and, once it has read the rows of its turns or its
  pass has run out, the next epoch's first.
  A worker makes only the batches the loader takes from it (utils/data/streaming/loader.Turns).
- An epoch is --steps_per_epoch optimizer steps (default: the split's size from its metadata, over
  the global batch). Every process takes exactly that many batches: one whose shards run out first
  feeds padding batches (no update of its own, its all-reduce share is zero); samples past the
  count are not seen that epoch (each epoch is a new pass). So the schedule is laid out in epochs
  as with map-style data.
- The position in the stream (`datasets`' IterableDataset.state_dict at the block's start, the
  block, the samples taken, for each DataLoader worker) goes into every checkpoint through
  torchdata's StatefulDataLoader (utils/data/streaming/loader.py), one file per rank; --resume
  continues from there, not from the start of the data.
- The validation split is not streamed: it is read whole (map-style, cached by `datasets`), so
  that evaluation stays exact on any number of processes (gather_for_metrics). The class names come
  from the training split's ClassLabel; with plain integer labels (webdataset's .cls), the classes
  are 0 .. the validation split's largest label, and a training label past it is a bad sample.
"""

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from utils.core.seeding import spread
from utils.data.datasets.images import deferred, load_item, load_on_device
from utils.data.datasets.label_kinds import ClassIndex
from utils.data.decoding.images import decode_rgb
from utils.data.streaming.blocks import Blocks
from utils.data.streaming.loader import Turns


class StreamRows(IterableDataset):
    """This process's share of the training stream, block-shuffled, transformed like ImageRows.

    Yields ImageRows' items. Its state_dict (asked in each DataLoader worker by torchdata's
    StatefulDataLoader) says where the last sample it yielded stands: the stream's state at the start
    of its block, the block's number and how many of its samples were taken.
    """

    def __init__(self, stream, preset, seed, block, rank, world, classes, rows, micro_batches, signature, epochs,
                 targets=ClassIndex()):
        self.stream, self.preset, self.seed, self.block, self.rank, self.world, self.classes = \
            stream, preset, seed, block, rank, world, classes
        self.targets = targets  # a class index a row, or (a List(ClassLabel) column) a multi-hot row, as ImageRows
        # The split's size (None: unknown), the batches every process takes per epoch, what a resume must find again
        self.rows, self.micro_batches, self.signature = rows, micro_batches, signature
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._resume, self._position = None, None
        self.blocks = Blocks(block, epochs - 1)  # read in a thread, a block ahead (stream_blocks.py)
        self.turns = Turns()  # how a loader deals its batches to the workers: StreamLoader gives its own
        self.on_device = False  # --decode_on_device: bytes and draws, not pixels (utils/data/decoding/on_device.py)

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

    def labels(self):
        """Every row's label over the whole training split: its label column read in full (a pass over the shards),
        the same on every process (not this process's share)."""
        return [row["label"] for row in self.stream.select_columns(["label"])]

    def share(self, epoch):
        """This process's shards of the epoch's pass, their order shuffled by (seed, epoch) alike on every process.

        `datasets`' shard order for a nonzero epoch (set_epoch: default_rng(epoch), as shuffle(seed) orders them),
        our seed standing for the epoch: shuffle() with a buffer of one would copy every row into a table of its
        own (half of a row's read). 0, --seed 0's first epoch, is "unshuffled" to set_epoch: shuffle(0) then.
        """
        from datasets.distributed import split_dataset_by_node

        seed = spread(self.seed, epoch)
        order = self.stream if seed else self.stream.shuffle(seed=0, buffer_size=1, max_buffer_input_shards=1)
        share = split_dataset_by_node(order, rank=self.rank, world_size=self.world)
        share.set_epoch(seed)
        return share

    def state_dict(self):
        return self._position

    def load_state_dict(self, state):
        self._resume = state

    def __iter__(self):
        epoch = int(self.epoch)
        info = get_worker_info()
        worker = info.id if info is not None else 0
        resume, self._resume = self._resume, None
        if resume is None or resume["epoch"] != epoch:
            resume = {"epoch": epoch, "stream": None, "block": 0, "taken": 0}
        handed = resume["block"] * self.block + resume["taken"]  # this epoch's samples handed out (blocks are whole)
        yield from self.turns.deal(worker, handed, self._samples(epoch, worker, resume))

    def _samples(self, epoch, worker, resume):
        """This worker's samples of `epoch` from `resume`, shuffled in blocks, read ahead as far as its turns."""
        skip = resume["taken"]
        transform, size = self.preset(epoch)
        if self.on_device:  # once an epoch: which steps the preset has, read from it
            transform = deferred(transform, size)
        turns = self.turns.samples(worker)
        for start, block, chunk in self.blocks.read(epoch, resume["stream"], resume["block"], self.share, turns):
            order = np.random.default_rng([self.seed, epoch, self.rank, worker, block]).permutation(len(chunk))
            for taken in range(skip, len(chunk)):
                self._position = {"epoch": epoch, "stream": start, "block": block, "taken": taken + 1}
                row = chunk[order[taken]]
                key = ((self.rank * 4096 + worker) << 40) + block * self.block + int(order[taken])
                label = self.targets.index(row["label"])  # checked against the class count by load_item
                if self.on_device:
                    item = load_on_device(row["image"], label, key, epoch, transform, size, self.seed,
                                          classes=self.classes)
                else:
                    item = load_item(row["image"], label, key, epoch, transform, size, self.seed, decode_rgb,
                                     classes=self.classes)
                item["labels"] = self.targets.target(row["label"] if item["valid"] else self.targets.empty)
                yield item
            skip = 0
