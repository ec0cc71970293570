"""Which data source the options name: the one place that asks (utils/data/sources/protocol.py says what a source
answers). A new source is a module with its class, and a line here."""

import os

from utils.core.errors import at_least
from utils.data.sources.digits import Digits
from utils.data.sources.folders import folder_holds_videos
from utils.data.sources.image_files import ImageFiles
from utils.data.sources.label_files import csv_holds_videos
from utils.data.sources.moving_digits import MovingDigits
from utils.data.sources.multi_digits import MultiDigits
from utils.data.sources.spectral_digits import SpectralDigits
from utils.data.sources.stored_videos import StoredVideos, holds_videos
from utils.data.sources.streamed import Streamed
from utils.data.sources.synthetic import Synthetic
from utils.data.sources.video_files import VideoFiles
from utils.data.transforms import input as inputs

# --dataset NAME
EMBEDDED = {"digits": Digits, "synthetic": Synthetic, "moving_digits": MovingDigits, "multi_digits": MultiDigits,
            "spectral_digits": SpectralDigits}
KINDS = {**EMBEDDED, "images": ImageFiles, "video": VideoFiles}  # a source by its kind, as a trained run records it


def source_named(kind):
    """The source of a trained run's kind of data, without its data (what its file transforms are)."""
    return KINDS[kind]()


def source_for(args):
    """The source of the run's data: list files and folders of videos are VideoFiles (the modality follows
    from the data), other folders ImageFiles; then the embedded sources by --dataset; a Hub dataset or a
    save_to_disk folder with a Video column is StoredVideos, one without ImageFiles, or with --streaming its
    shards streamed (Streamed)."""
    if args.train_list:
        return VideoFiles()
    if args.train_csv:  # several labels a file, images or videos
        return VideoFiles() if csv_holds_videos(args.train_csv, args.data_root, args.csv_path_column) else ImageFiles()
    folder = args.train_dir or args.data_dir and os.path.join(args.data_dir, "train")
    if folder:
        return VideoFiles() if folder_holds_videos(folder) else ImageFiles()
    if args.dataset in EMBEDDED:
        return EMBEDDED[args.dataset]()
    if not args.streaming and holds_videos(args.dataset, args.dataset_config):  # a Video column
        return StoredVideos()
    return Streamed() if args.streaming else ImageFiles()


def resolve_input(args):
    """The Input (utils/data/transforms/input.py) of the run `args` describes, for tools and tests (a run resolves
    its own once: utils/config/options.parse)."""
    return inputs.resolve_input(args, source_for(args))


def check_options(args, need, source):
    """Where the data comes from: one source, its sizes and subsets."""
    at_least(args, need, ("synthetic_train_samples", "synthetic_val_samples"), 1)
    at_least(args, need, ("image_size", "max_train_samples", "max_val_samples"), 1, optional=True)
    need(0 < args.val_fraction < 1, "val_fraction", "must be in (0, 1)")
    need(args.num_workers is None or args.num_workers >= 0, "num_workers", "must be >= 0")
    need(args.num_classes >= 2, "num_classes", "must be >= 2")
    need(not (args.train_dir and args.data_dir), "data_dir", "give --train_dir [--val_dir] or --data_dir, not both")
    need(args.val_dir is None or args.train_dir, "val_dir", "needs --train_dir")
    need(not (args.train_list and (args.train_dir or args.data_dir)), "train_list",
         "give list files or folders, not both")
    need(args.val_list is None or args.train_list, "val_list", "needs --train_list")
    need(not (args.train_csv and (args.train_list or args.train_dir or args.data_dir)), "train_csv",
         "give one kind of training files: a CSV, list files or folders")
    need(args.val_csv is None or args.train_csv, "val_csv", "needs --train_csv")
    need(not args.train_csv or args.dataset == "digits", "dataset", "reads no CSV: drop it when giving --train_csv")
    for key in ("csv_path_column", "csv_labels_column"):
        need(getattr(args, key) is None or args.train_csv, key, "names a column of --train_csv/--val_csv")
    need(args.train_list is None or args.val_list, "train_list", "needs --val_list too")
    need(not args.train_list or args.dataset == "digits", "dataset",
         "reads no list file: drop it when giving --train_list")
    folders = args.train_dir or args.data_dir
    need(not folders or args.dataset in ("digits", "imagefolder"), "dataset",
         "reads no folder: drop it (or say imagefolder) when giving --train_dir/--data_dir")
    need(args.dataset != "imagefolder" or folders, "dataset", "imagefolder needs --data_dir or --train_dir")


def build_datasets(args, rank=0, world=1, inp=None, source=None):
    """(train, val, class_names, notes) of the source `args` names (catalog.source_for(args) when not given),
    transforms attached for the run's Input `inp` (resolved from `args` when not given); with --streaming
    the train set is this process's share of the stream (rank of world).

    The train set's augmentation is seeded per sample: call its set_epoch before each epoch.
    """
    source = source_for(args) if source is None else source
    inp = inputs.resolve_input(args, source) if inp is None else inp
    return source.datasets(args, inp, rank, world)
