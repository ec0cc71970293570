"""Which data source the options name: the one place that asks (utils/data/source.py says what a source
answers). A new source is a module with its class, and a line here."""

import os

from utils.data import presets
from utils.data.digits import Digits
from utils.data.sources import ImageFiles, folder_holds_videos
from utils.data.streaming import Streamed
from utils.data.synthetic import Synthetic
from utils.data.video_sources import MovingDigits, VideoFiles

EMBEDDED = {"digits": Digits, "synthetic": Synthetic, "moving_digits": MovingDigits}  # --dataset NAME


def source_for(args):
    """The source of the run's data: list files and folders of videos are VideoFiles (the modality follows
    from the data), other folders ImageFiles; then the embedded sources by --dataset; else a Hub dataset or a
    save_to_disk folder (ImageFiles), or its shards streamed (Streamed) with --streaming."""
    if args.train_list:
        return VideoFiles()
    folder = args.train_dir or args.data_dir and os.path.join(args.data_dir, "train")
    if folder:
        return VideoFiles() if folder_holds_videos(folder) else ImageFiles()
    if args.dataset in EMBEDDED:
        return EMBEDDED[args.dataset]()
    return Streamed() if args.streaming else ImageFiles()


def is_video(args):
    return source_for(args).video


def resolve_input(args):
    """The Input (utils/data/presets.py) of the run `args` describes."""
    return presets.resolve_input(args, source_for(args))
