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

# --dataset NAME
EMBEDDED = {"digits": Digits, "synthetic": Synthetic, "moving_digits": MovingDigits, "multi_digits": MultiDigits,
            "spectral_digits": SpectralDigits}
KINDS = {**EMBEDDED, "images": ImageFiles, "video": VideoFiles}  # a source by its kind, as a trained run records it


def source_named(kind):
    """The source of a trained run's kind of data, without its data (what its file transforms are)."""
    return KINDS[kind]()


def source_for(data):
    """The source of the data DataOptions `data` name: list files and folders of videos are VideoFiles (the
    modality follows from the data), other folders ImageFiles; then the embedded sources by --dataset; a Hub dataset or
    a save_to_disk folder with a Video column is StoredVideos, one without ImageFiles, or with --streaming its
    shards streamed (Streamed)."""
    if data.train_list:
        return VideoFiles()
    if data.train_csv:  # several labels a file, images or videos
        return VideoFiles() if csv_holds_videos(data.train_csv, data.data_root, data.csv_path_column) else ImageFiles()
    folder = data.train_dir or data.data_dir and os.path.join(data.data_dir, "train")
    if folder:
        return VideoFiles() if folder_holds_videos(folder) else ImageFiles()
    if data.dataset in EMBEDDED:
        return EMBEDDED[data.dataset]()
    if not data.streaming and holds_videos(data.dataset, data.dataset_config):  # a Video column
        return StoredVideos()
    return Streamed() if data.streaming else ImageFiles()


def check_options(data, need):
    """Where the data comes from: one source, its sizes and subsets."""
    at_least(data, need, ("synthetic_train_samples", "synthetic_val_samples"), 1)
    at_least(data, need, ("max_train_samples", "max_val_samples"), 1, optional=True)
    need(0 < data.val_fraction < 1, "val_fraction", "must be in (0, 1)")
    need(data.num_workers is None or data.num_workers >= 0, "num_workers", "must be >= 0")
    need(data.num_classes >= 2, "num_classes", "must be >= 2")
    need(not (data.train_dir and data.data_dir), "data_dir", "give --train_dir [--val_dir] or --data_dir, not both")
    need(data.val_dir is None or data.train_dir, "val_dir", "needs --train_dir")
    need(not (data.train_list and (data.train_dir or data.data_dir)), "train_list",
         "give list files or folders, not both")
    need(data.val_list is None or data.train_list, "val_list", "needs --train_list")
    need(not (data.train_csv and (data.train_list or data.train_dir or data.data_dir)), "train_csv",
         "give one kind of training files: a CSV, list files or folders")
    need(data.val_csv is None or data.train_csv, "val_csv", "needs --train_csv")
    need(not data.train_csv or data.dataset == "digits", "dataset", "reads no CSV: drop it when giving --train_csv")
    for key in ("csv_path_column", "csv_labels_column"):
        need(getattr(data, key) is None or data.train_csv, key, "names a column of --train_csv/--val_csv")
    need(data.train_list is None or data.val_list, "train_list", "needs --val_list too")
    need(not data.train_list or data.dataset == "digits", "dataset",
         "reads no list file: drop it when giving --train_list")
    folders = data.train_dir or data.data_dir
    need(not folders or data.dataset in ("digits", "imagefolder"), "dataset",
         "reads no folder: drop it (or say imagefolder) when giving --train_dir/--data_dir")
    need(data.dataset != "imagefolder" or folders, "dataset", "imagefolder needs --data_dir or --train_dir")

