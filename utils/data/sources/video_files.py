"""Where videos come from: <class>/<video> folders and list files, checked before training; VideoFiles, their source,
which builds the clip datasets over them (utils/data/datasets/clips.py) with the presets attached."""

import os
from pathlib import Path

import numpy as np

from utils.core.errors import at_least
from utils.core.seeding import EpochSeeded
from utils.data.datasets.clips import PathFrames, VideoClips
from utils.data.datasets.label_kinds import ClassIndex, MultiHot
from utils.data.decoding.video import VIDEO_READERS, VIDEO_SUFFIXES, torchcodec_video_problem
from utils.data.errors import DataError
from utils.data.sources.folders import folder_files
from utils.data.sources.label_files import label_csv_splits
from utils.data.sources.protocol import (IMAGE_CROPS, POLICIES, STREAM_ONLY, SYNTHETIC_ONLY, DataSource, no_imbalance,
                                         no_remaking, rgb_only)
from utils.data.sources.splits import SPLIT_SEED
from utils.data.transforms.video import video_eval, video_test, video_train

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def parse_list(list_file, data_root=None):
    """(paths, labels) of a list file: one video per line, `path label` (mmaction2, PySlowFast) or
    `path num_frames label` (GluonCV), separated by spaces or commas, the format told by the column
    count. Paths are relative to `data_root` (default: the list file's folder); a path may be a video
    file or a folder of frame images. Any bad line fails with the file and line number."""
    list_file = Path(list_file)
    try:
        lines = list_file.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"{list_file}: cannot read the list file ({getattr(e, 'strerror', None) or e})")
    root = Path(data_root) if data_root is not None else list_file.parent
    paths, labels, columns = [], [], None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.replace(",", " ").split()
        where = f"{list_file}:{number}"
        if len(fields) not in (2, 3):
            _fail(f"{where}: expected 'path label' or 'path num_frames label', got {len(fields)} fields: "
                  f"{line.strip()!r}")
        if columns is None:
            columns = len(fields)
        elif len(fields) != columns:
            _fail(f"{where}: {len(fields)} fields where the lines above have {columns}: {line.strip()!r}")
        if not all(f.lstrip("-").isdigit() for f in fields[1:]):
            _fail(f"{where}: label (and frame count) must be integers, got {' '.join(fields[1:])!r}")
        label = int(fields[-1])
        if label < 0:
            _fail(f"{where}: negative label {label}")
        path = root / fields[0]
        if not path.exists():
            _fail(f"{where}: {path} does not exist (paths are relative to --data_root, default: the list's folder)")
        paths.append(os.path.abspath(path))
        labels.append(label)
    if not paths:
        _fail(f"{list_file}: the list holds no videos")
    return paths, labels


def class_names_for(labels, names_file=None):
    """Names of classes 0..max(labels): the lines of --class_names, else the indices as strings."""
    if names_file is None:
        return [str(i) for i in range(max(labels) + 1)]
    try:
        names = [line.strip() for line in Path(names_file).read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"class_names: cannot read {names_file} ({getattr(e, 'strerror', None) or e})")
    if max(labels) >= len(names):
        _fail(f"class_names: {names_file} names {len(names)} classes but a list has label {max(labels)}")
    return names


def _from_csv(data):
    train, val, names = label_csv_splits(data)
    if val is None:
        _fail("val_csv: a CSV of validation videos is needed with a --train_csv of videos")
    return train, val, names


def _from_lists(data):
    train_paths, train_labels = parse_list(data.train_list, data.data_root)
    if data.val_list is None:
        _fail("val_list: a list file of validation videos is needed with --train_list")
    val_paths, val_labels = parse_list(data.val_list, data.data_root)
    names = class_names_for(train_labels + val_labels, data.class_names)
    return (train_paths, train_labels), (val_paths, val_labels), names


def _from_folders(data):
    if data.data_dir:
        root = Path(data.data_dir)
        val = next((root / s for s in ("val", "validation", "valid") if (root / s).is_dir()), None)
        if val is None:
            _fail(f"data_dir: {root} has no val/ folder (expected {root}/val/<class>/<video>)")
        train_dir, val_dir = root / "train", val
    else:
        if data.val_dir is None:
            _fail("val_dir: a folder of validation videos is needed with a --train_dir of videos")
        train_dir, val_dir = data.train_dir, data.val_dir
    train = folder_files(train_dir, "train_dir", VIDEO_SUFFIXES, "videos")
    val = folder_files(val_dir, "val_dir", VIDEO_SUFFIXES, "videos")
    names = list(train)
    unknown = sorted(set(val) - set(train))
    if unknown:
        _fail(f"val_dir: classes not in train_dir: {', '.join(unknown[:10])}")
    index = {name: i for i, name in enumerate(names)}

    def split(files):
        return [f for fs in files.values() for f in fs], [index[c] for c, fs in files.items() for _ in fs]

    return split(train), split(val), names


def _subset(paths, labels, n):
    """A seeded random subset of n videos, in their listed order (all of them when n is None or larger)."""
    if n is None or n >= len(paths):
        return paths, labels
    rows = np.sort(np.random.default_rng(SPLIT_SEED).choice(len(paths), size=n, replace=False))
    return [paths[i] for i in rows], [labels[i] for i in rows]


VIDEO_FILES_UNUSED = {**SYNTHETIC_ONLY, **STREAM_ONLY, **IMAGE_CROPS, **POLICIES, **no_imbalance("video files"),
                      **rgb_only("video"), **no_remaking("video")}  # what video files do not read
# Kinetics-400's, which torchvision's video weights were trained with.
KINETICS_MEAN, KINETICS_STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)


def _clip_datasets(data, inp, train, val, train_preset=None, targets=ClassIndex()):
    """(train, val) VideoClips over ((frames, labels, file names), ...) of each split; train in EpochSeeded, its
    transform `train_preset` (default: video_train's random resize, crop and flip)."""
    common = dict(clip_len=inp.clip_len, interval=inp.frame_interval, segments=inp.num_segments,
                  shape=(3, inp.frames, inp.image_size, inp.image_size))
    (train_src, train_labels, train_names), (val_src, val_labels, val_names) = train, val
    common["on_device"] = data.decode_on_device  # files decoded by the main process (utils/data/decoding/on_device.py)
    common["targets"] = targets  # a class index a video, or a multi-hot row (a label CSV)
    train = VideoClips(train_src, train_labels, transform=train_preset or video_train(inp), seed=data.seed,
                       names=train_names, **common)
    val = VideoClips(val_src, val_labels, transform=video_eval(inp), names=val_names, **common)
    return EpochSeeded(train, train.epoch), val


def decoding_notes(train):
    """The start-up line of --decode_on_device for video, said when the datasets leave their files to the device."""
    if train.dataset.deferred is None:
        return []
    return ["decode_on_device: the workers read each video file's index and draw its clip; the main process decodes "
            "the frames with torchcodec on its device (NVDEC on CUDA); folders of frames are decoded in the workers"]


class VideoFiles(DataSource):
    """Video files or frame folders: <class>/<video> folders (--train_dir/--val_dir, --data_dir) or list files
    (--train_list/--val_list); 112 px and Kinetics' statistics unless a timm/hf model recommends others."""

    kind, video, size, stats = "video", True, 112, (KINETICS_MEAN, KINETICS_STD)
    unused = VIDEO_FILES_UNUSED

    def name(self, data):
        if data.train_csv:
            return f"videocsv:{data.train_csv}"
        return f"videolist:{data.train_list}" if data.train_list else f"videofolder:{data.train_dir or data.data_dir}"

    def datasets(self, data, inp, rank=0, world=1):
        (train_names, train_labels), (val_names, val_labels), names = \
            _from_csv(data) if data.train_csv else _from_lists(data) if data.train_list else _from_folders(data)
        train_names, train_labels = _subset(train_names, train_labels, data.max_train_samples)
        val_names, val_labels = _subset(val_names, val_labels, data.max_val_samples)
        reader = VIDEO_READERS[data.video_decoder]
        train, val = _clip_datasets(data, inp, (PathFrames(train_names, reader), train_labels, train_names),
                                    (PathFrames(val_names, reader), val_labels, val_names),
                                    targets=MultiHot(len(names)) if data.train_csv else ClassIndex())  # a CSV: lists
        return train, val, names, decoding_notes(train)


def test_views(data, inp, val):
    """The multi-view test set over `val`'s videos: --test_clips clips of each, --test_crops crops of each
    clip; an item is one clip's crops, (crops, C, T, H, W)."""
    crops = data.test_crops or 1
    return VideoClips(val.frames, val.labels, clip_len=val.clip_len, interval=val.interval, segments=val.segments,
                      transform=video_test(inp, crops), shape=(crops, *val.shape),
                      clips=data.test_clips or 1, names=val.names, targets=val.targets)


def check_options(data, need, source):
    """The multi-view test and the video decoder (image data refuses them: its `unused`)."""
    at_least(data, need, ("test_clips", "test_crops"), 1, optional=True)
    need(not (source.video and data.decode_on_device) or data.video_decoder == "torchcodec", "decode_on_device",
         "decodes videos with torchcodec (NVDEC on CUDA): add --video_decoder torchcodec")
    if data.video_decoder == "torchcodec":
        problem = torchcodec_video_problem()
        need(problem is None, "video_decoder", problem)
