"""--streaming's source: a Hub dataset or local parquet/arrow/webdataset shards opened as a stream (this process's
share of the training split: utils/data/streaming/), the validation split read whole; what streaming can read."""

import hashlib
from pathlib import Path

from utils.data.datasets.images import with_transform
from utils.data.errors import DataError
from utils.data.sources.hub import Unreachable
from utils.data.sources.image_files import ImageFiles
from utils.data.sources.protocol import SYNTHETIC_ONLY, VIDEO_ONLY, no_imbalance, no_remaking, rgb_only
from utils.data.datasets.label_kinds import targets_for
from utils.data.sources.splits import VAL_SPLITS, class_labels, image_and_label, normalise, subset
from utils.data.loading.loaders import build_val_loader, loader_options
from utils.data.streaming.loader import StreamLoader
from utils.data.streaming.rows import StreamRows
from utils.data.transforms.images import image_presets
from utils.data.transforms.input import progressive_notes
from utils.models.hub import why_not_fetched

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def _builder(data):
    """The dataset's builder: its splits' files and metadata, nothing of the data read yet."""
    import datasets

    source = Path(data.dataset)
    if (source / "dataset_dict.json").is_file() or (source / "dataset_info.json").is_file():
        _fail(f"dataset: {source} was written by save_to_disk, which --streaming does not read; write it as shards "
              f"(e.g. ds.to_parquet per shard) or train without --streaming")
    if not source.exists() and (why := why_not_fetched()) is not None:  # a Hub name: at once, not after retries
        _unreadable(data, Unreachable(why))
    try:
        return datasets.load_dataset_builder(data.dataset, data.dataset_config)
    except (ConnectionError, OSError, ValueError) as e:
        _unreadable(data, e)


def _open(data, split, streaming, data_files=None):
    import datasets

    files = {split: data_files} if data_files else None
    try:
        return datasets.load_dataset(data.dataset, data.dataset_config, split=split, streaming=streaming,
                                     data_files=files)
    except (ConnectionError, OSError, ValueError) as e:
        _unreadable(data, e, split)


def _unreadable(data, error, split=None):
    """One line for a source that cannot be opened: a Hub dataset offline or gated, a folder without shards."""
    where = f" (split {split!r})" if split else ""
    hint = ("a local folder must hold data files (train-*.parquet, validation-*.parquet, .arrow or webdataset .tar, "
            "or train/ and validation/ folders of them)" if Path(data.dataset).exists() else
            "a Hub dataset is streamed from the Hub: it needs the network (and a login for a gated one); offline, "
            "write its shards to a local folder and pass that folder")
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    raise DataError(f"dataset: cannot stream {data.dataset!r}{where}: {reason}; {hint}") from None


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
            keys = {(folder, name.split(".")[0])
                    for folder, _, name in (m.name.rpartition("/") for m in tar if m.isfile())}
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


def _normalise_stream(stream, data):
    """The stream's image and label columns as `image` (undecoded) and `label`, the others dropped."""
    import datasets

    if stream.features is None:
        _fail(f"dataset: the columns of {data.dataset!r} are not known before it is read; give the split's "
              f"features in its dataset card (dataset_info) or write it as parquet shards")
    stream, _ = image_and_label(stream, data)
    return stream.cast_column("image", datasets.Image(decode=False))


def build_stream(data, rank, world, inp):
    """(train StreamRows, val Dataset, class names, notes): this process's share of the training stream (its
    transform the image train preset of Input `inp` for its kind of labels) and the validation split, read whole."""
    import datasets

    builder = _builder(data)
    splits = [str(s) for s in builder.config.data_files or builder.info.splits or ()]
    if splits and data.train_split not in splits:
        _fail(f"train_split: no split {data.train_split!r}; splits are: {', '.join(splits)}")
    val_split = data.val_split or next((s for s in VAL_SPLITS if s in splits and s != data.train_split), None)
    if val_split is None or splits and val_split not in splits:
        _fail(f"val_split: --streaming needs a validation split, read whole (not carved from a stream); "
              f"splits are: {', '.join(splits) or 'unknown'} (name the files validation-*.parquet or a "
              f"validation/ folder, or pass --val_split)")
    stream = _normalise_stream(_open(data, data.train_split, streaming=True), data)
    # Only the validation split's files: a plain load_dataset would convert every split, the training one too.
    val = _open(data, val_split, streaming=False, data_files=_files(builder, val_split))
    kind = stream.features["label"]  # a List(ClassLabel): several labels a row
    label = class_labels(kind)
    names = label.names if isinstance(label, datasets.ClassLabel) else None
    val = normalise(val, data, class_names=names)
    if names is not None and class_labels(val.features["label"]).names != names:
        _fail(f"val_split: the validation split's classes are not the training split's ({len(names)} classes: "
              f"{', '.join(names[:5])}...)")
    names = class_labels(val.features["label"]).names
    rows, files = split_rows(builder, data.train_split)
    notes = [f"streaming {data.train_split!r} ({stream.num_shards} shards, "
             f"{f'{rows:d} rows' if rows is not None else 'size unknown'}); validation split {val_split!r} read "
             f"whole"]
    if world > 1:
        per_rank = stream.num_shards % world == 0
        notes.append(f"{stream.num_shards // world} shards per process" if per_rank else
                     f"{stream.num_shards} shards for {world} processes: each process reads every shard and keeps "
                     f"1 sample in {world}; a multiple of {world} shards lets each read only its own")
    if data.steps_per_epoch is None and rows is None and not data.eval_only:
        _fail("steps_per_epoch: the training split's size is not in its metadata nor in local files; "
              "pass --steps_per_epoch N (optimizer steps per epoch)")
    global_batch = world * data.batch_size * data.grad_accum_steps
    steps = data.steps_per_epoch or max(1, (rows or 0) // global_batch)
    if rows is not None and steps * global_batch > rows:
        notes.append(f"steps_per_epoch {steps} x global batch {global_batch} is more than the split's {rows} samples: "
                     f"processes past the end of their shards take padding steps (no update of their own)")
    # What a resumed run must find again: the split's size, its classes, its files (by name: a copy elsewhere is
    # the same data; the labels are not read ahead).
    signature = {"train_samples": rows, "classes": len(names), "labels_sha256": hashlib.sha256(
        "\n".join(Path(f).name for f in files).encode()).hexdigest()[:16]}
    targets = targets_for(kind, len(names))
    train = StreamRows(stream, image_presets(inp, targets)[0], data.seed, data.shuffle_buffer, rank, world,
                       len(names), rows, steps * data.grad_accum_steps, signature, data.epochs, targets)
    return train, val, names, notes


class Streamed(ImageFiles):
    """--streaming: image shards (Hub, local parquet/arrow/webdataset) read as a stream; the validation
    split read whole. Its size comes from the split's metadata (None: unknown), its resume signature from
    the split's files, whose labels are not read ahead."""

    labels_ahead = False  # a pass over its shards: read only for an option that needs the class counts
    unused = {**VIDEO_ONLY, **SYNTHETIC_ONLY, **rgb_only("a stream, decoded as RGB"),
              "max_train_samples": "cannot subset a stream: set its length with --steps_per_epoch",
              **no_imbalance("a stream"), **no_remaking("a stream")}

    def datasets(self, data, inp, rank=0, world=1):
        train, val, names, notes = build_stream(data, rank, world, inp)
        _, val_preset = image_presets(inp, train.targets)
        train.on_device = data.decode_on_device
        return (train, with_transform(subset(val, data.max_val_samples), val_preset, decoded=False,
                                      on_device=data.decode_on_device, targets=train.targets), names,
                notes + progressive_notes(inp, data.epochs))

    def loaders(self, accelerator, train, val, batch_size, num_workers, ra_reps=1, seed=0, decode=None,
                weights=None, draws=None):
        """The stream's own training loader (not prepared: Accelerate's iterable-dataset path would have every rank
        read everything), the validation split's as any."""
        common = loader_options(accelerator, batch_size, num_workers)
        loader = StreamLoader(train, batch_size, num_workers, train.micro_batches, accelerator.device,
                              common["worker_init_fn"], decode)
        return loader, build_val_loader(accelerator, val, common, decode)

    def sample_count(self, train):
        return train.rows

    def targets(self, train):
        return train.targets

    def labels(self, train):
        return train.labels()

    def signature(self, train, classes):
        return train.signature


def check_options(data, need):
    """--streaming reads shards named by --dataset, in epochs of --steps_per_epoch."""
    if data.streaming:  # (a source that streams nothing refuses --streaming itself: its `unused`)
        need(data.ra_reps == 1, "ra_reps", "repeated augmentation needs map-style data (it deals copies of a sample "
             "to processes): not with --streaming")
    need(data.steps_per_epoch is None or data.steps_per_epoch >= 1, "steps_per_epoch", "must be >= 1")
    need(data.shuffle_buffer >= 1, "shuffle_buffer", "must be >= 1")
