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
  A worker makes only the batches the loader takes from it (utils/data/stream_loader.Turns).
- An epoch is --steps_per_epoch optimizer steps (default: the split's size from its metadata, over
  the global batch). Every process takes exactly that many batches: one whose shards run out first
  feeds padding batches (no update of its own, its all-reduce share is zero); samples past the
  count are not seen that epoch (each epoch is a new pass). So the schedule is laid out in epochs
  as with map-style data.
- The position in the stream (`datasets`' IterableDataset.state_dict at the block's start, the
  block, the samples taken, for each DataLoader worker) goes into every checkpoint through
  torchdata's StatefulDataLoader (utils/data/stream_loader.py), one file per rank; --resume
  continues from there, not from the start of the data.
- The validation split is not streamed: it is read whole (map-style, cached by `datasets`), so
  that evaluation stays exact on any number of processes (gather_for_metrics). The class names come
  from the training split's ClassLabel; with plain integer labels (webdataset's .cls), the classes
  are 0 .. the validation split's largest label, and a training label past it is a bad sample.
"""

import hashlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from utils.core.seeding import spread
from utils.data import presets
from utils.data.images import decode_rgb, deferred, load_item, load_on_device, with_transform
from utils.data.sources import VAL_SPLITS, DataError, ImageFiles, image_and_label, normalise, subset
from utils.data.stream_blocks import Blocks
from utils.data.stream_loader import Turns

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def _builder(args):
    """The dataset's builder: its splits' files and metadata, nothing of the data read yet."""
    import datasets

    source = Path(args.dataset)
    if (source / "dataset_dict.json").is_file() or (source / "dataset_info.json").is_file():
        _fail(f"dataset: {source} was written by save_to_disk, which --streaming does not read; write it as shards "
              f"(e.g. ds.to_parquet per shard) or train without --streaming")
    try:
        return datasets.load_dataset_builder(args.dataset, args.dataset_config)
    except (ConnectionError, OSError, ValueError) as e:
        _unreadable(args, e)


def _open(args, split, streaming, data_files=None):
    import datasets

    files = {split: data_files} if data_files else None
    try:
        return datasets.load_dataset(args.dataset, args.dataset_config, split=split, streaming=streaming,
                                     data_files=files)
    except (ConnectionError, OSError, ValueError) as e:
        _unreadable(args, e, split)


def _unreadable(args, error, split=None):
    """One line for a source that cannot be opened: a Hub dataset offline or gated, a folder without shards."""
    where = f" (split {split!r})" if split else ""
    hint = ("a local folder must hold data files (train-*.parquet, validation-*.parquet, .arrow or webdataset .tar, "
            "or train/ and validation/ folders of them)" if Path(args.dataset).exists() else
            "a Hub dataset is streamed from the Hub: it needs the network (and a login for a gated one); offline, "
            "write its shards to a local folder and pass that folder")
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    raise DataError(f"dataset: cannot stream {args.dataset!r}{where}: {reason}; {hint}") from None


def _files(builder, split):
    files = (builder.config.data_files or {}).get(split)
    return [str(f) for f in files] if files else []


def _count_rows(path):
    """Rows of one local data file, from its metadata (parquet), its record batches (arrow) or its
    members (webdataset tar: one sample per key); None when not known without reading it all."""
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if not Path(path).is_file():
        return None
    if suffix == ".parquet":
        return pq.ParquetFile(path).metadata.num_rows
    if suffix == ".arrow":
        with pa.memory_map(path) as source:
            try:
                return sum(batch.num_rows for batch in pa.ipc.open_stream(source))
            except pa.ArrowInvalid:
                return pa.ipc.open_file(source).count_rows()
    if suffix == ".tar":
        with tarfile.open(path) as tar:
            # webdataset's key: the member's path up to the first dot of its file name
            keys = {(folder, name.split(".")[0]) for folder, _, name in (m.name.rpartition("/") for m in tar if m.isfile())}
            return len(keys)
    return None


def split_rows(builder, split):
    """(rows of the split, files) from the dataset's metadata or its local files' own; rows None if unknown."""
    info = (builder.info.splits or {}).get(split)
    files = _files(builder, split)
    if info is not None and info.num_examples:
        return info.num_examples, files
    counts = [_count_rows(f) for f in files]
    return (sum(counts) if counts and None not in counts else None), files


class StreamRows(IterableDataset):
    """This process's share of the training stream, block-shuffled, transformed like ImageRows.

    Yields ImageRows' items. Its state_dict (asked in each DataLoader worker by torchdata's
    StatefulDataLoader) says where the last sample it yielded stands: the stream's state at the start
    of its block, the block's number and how many of its samples were taken.
    """

    def __init__(self, stream, preset, seed, block, rank, world, classes, rows, micro_batches, signature, epochs):
        self.stream, self.preset, self.seed, self.block, self.rank, self.world, self.classes = \
            stream, preset, seed, block, rank, world, classes
        # The split's size (None: unknown), the batches every process takes per epoch, what a resume must find again
        self.rows, self.micro_batches, self.signature = rows, micro_batches, signature
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._resume, self._position = None, None
        self.blocks = Blocks(block, epochs - 1)  # read in a thread, a block ahead (stream_blocks.py)
        self.turns = Turns()  # how a loader deals its batches to the workers: StreamLoader gives its own
        self.on_device = False  # --decode_on_device: bytes and draws, not pixels (utils/data/device_decode.py)

    def set_epoch(self, epoch):
        self.epoch.fill_(epoch)

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
                if self.on_device:
                    yield load_on_device(row["image"], row["label"], key, epoch, transform, size, self.seed,
                                         classes=self.classes)
                else:
                    yield load_item(row["image"], row["label"], key, epoch, transform, size, self.seed,
                                    decode_rgb, classes=self.classes)
            skip = 0


def _normalise_stream(stream, args):
    """The stream's image and label columns as `image` (undecoded) and `label`, the others dropped."""
    import datasets

    if stream.features is None:
        _fail(f"dataset: the columns of {args.dataset!r} are not known before it is read; give the split's "
              f"features in its dataset card (dataset_info) or write it as parquet shards")
    stream, _ = image_and_label(stream, args)
    return stream.cast_column("image", datasets.Image(decode=False))


def build_stream(args, rank, world, train_preset):
    """(train StreamRows, val Dataset, class names, notes): this process's share of the training stream and
    the validation split, read whole."""
    import datasets

    builder = _builder(args)
    splits = [str(s) for s in builder.config.data_files or builder.info.splits or ()]
    if splits and args.train_split not in splits:
        _fail(f"train_split: no split {args.train_split!r}; splits are: {', '.join(splits)}")
    val_split = args.val_split or next((s for s in VAL_SPLITS if s in splits and s != args.train_split), None)
    if val_split is None or splits and val_split not in splits:
        _fail(f"val_split: --streaming needs a validation split, read whole (not carved from a stream); "
              f"splits are: {', '.join(splits) or 'unknown'} (name the files validation-*.parquet or a "
              f"validation/ folder, or pass --val_split)")
    stream = _normalise_stream(_open(args, args.train_split, streaming=True), args)
    # Only the validation split's files: a plain load_dataset would convert every split, the training one too.
    val = _open(args, val_split, streaming=False, data_files=_files(builder, val_split))
    label = stream.features["label"]
    names = label.names if isinstance(label, datasets.ClassLabel) else None
    val = normalise(val, args, class_names=names)
    if names is not None and val.features["label"].names != names:
        _fail(f"val_split: the validation split's classes are not the training split's ({len(names)} classes: "
              f"{', '.join(names[:5])}...)")
    names = val.features["label"].names
    rows, files = split_rows(builder, args.train_split)
    notes = [f"streaming {args.train_split!r} ({stream.num_shards} shards, "
             f"{'%d rows' % rows if rows is not None else 'size unknown'}); validation split {val_split!r} read "
             f"whole"]
    if world > 1:
        per_rank = stream.num_shards % world == 0
        notes.append(f"{stream.num_shards // world} shards per process" if per_rank else
                     f"{stream.num_shards} shards for {world} processes: each process reads every shard and keeps "
                     f"1 sample in {world}; a multiple of {world} shards lets each read only its own")
    if args.steps_per_epoch is None and rows is None and not args.eval_only:
        _fail("steps_per_epoch: the training split's size is not in its metadata nor in local files; "
              "pass --steps_per_epoch N (optimizer steps per epoch)")
    global_batch = world * args.batch_size * args.grad_accum_steps
    steps = args.steps_per_epoch or max(1, (rows or 0) // global_batch)
    if rows is not None and steps * global_batch > rows:
        notes.append(f"steps_per_epoch {steps} x global batch {global_batch} is more than the split's {rows} samples: "
                     f"processes past the end of their shards take padding steps (no update of their own)")
    # What a resumed run must find again: the split's size, its classes, its files (by name: a copy elsewhere is
    # the same data; the labels are not read ahead).
    signature = {"train_samples": rows, "classes": len(names), "labels_sha256": hashlib.sha256(
        "\n".join(Path(f).name for f in files).encode()).hexdigest()[:16]}
    train = StreamRows(stream, train_preset, args.seed, args.shuffle_buffer, rank, world, len(names), rows,
                       steps * args.grad_accum_steps, signature, args.epochs)
    return train, val, names, notes


class Streamed(ImageFiles):
    """--streaming: image shards (Hub, local parquet/arrow/webdataset) read as a stream; the validation
    split read whole. Its size comes from the split's metadata (None: unknown), its resume signature from
    the split's files, whose labels are not read ahead."""

    def datasets(self, args, inp, rank=0, world=1):
        train_preset, val_preset = presets.image_presets(inp)
        train, val, names, notes = build_stream(args, rank, world, train_preset)
        train.on_device = args.decode_on_device
        return (train, with_transform(subset(val, args.max_val_samples), val_preset, decoded=False,
                                      on_device=args.decode_on_device), names,
                notes + presets.progressive_notes(inp, args.epochs))

    def sample_count(self, train):
        return train.rows

    def signature(self, train, classes):
        return train.signature


def check_options(args, need, source):
    """--streaming reads shards named by --dataset, in epochs of --steps_per_epoch."""
    if args.streaming:
        need(source.kind == "images" and not (args.train_dir or args.data_dir), "streaming",
             "reads a Hub dataset or local shard files named by --dataset, not the embedded data or folders of images")
        need(args.max_train_samples is None, "max_train_samples", "cannot subset a stream: set its length with "
             "--steps_per_epoch")
        need(args.ra_reps == 1, "ra_reps", "repeated augmentation needs map-style data (it deals copies of a sample "
             "to processes): not with --streaming")
        need(not args.sync_bn, "sync_bn", "not with --streaming: a process past the end of its shards takes padding "
             "steps, without SyncBatchNorm's collective, and the others would wait for it")
    need(args.steps_per_epoch is None or args.streaming, "steps_per_epoch",
         "sets the epoch of --streaming data (map-style epochs are a pass over the data)")
    need(args.steps_per_epoch is None or args.steps_per_epoch >= 1, "steps_per_epoch", "must be >= 1")
    need(args.shuffle_buffer >= 1, "shuffle_buffer", "must be >= 1")
