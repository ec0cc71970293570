"""Video datasets stored by `datasets`: a Hub dataset (the local cache's, offline) or a save_to_disk folder whose
splits have a Video column. The column is read with decode=False, its file paths or bytes, and decoded with our
PyAV reader (utils/data/datasets/clips.py StoredFrames): `datasets` itself would decode with torchcodec, which needs
FFmpeg's shared libraries on the system. Clips, sampling and transforms are the video folders'."""

import json
from pathlib import Path

from utils.data.datasets.clips import StoredFrames
from utils.data.decoding.video import VIDEO_READERS
from utils.data.errors import DataError
from utils.data.sources.hub import hub_features, load_hub
from utils.data.sources.protocol import DataSource
from utils.data.sources.splits import LABEL_COLUMNS, VAL_SPLITS, pick_column, subset
from utils.data.sources.video_files import (KINETICS_MEAN, KINETICS_STD, VIDEO_FILES_UNUSED, _clip_datasets,
                                            decoding_notes)

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def _saved_features(folder):
    """The features each split of a save_to_disk folder declares (its JSON files: nothing loaded)."""
    folder = Path(folder)
    infos = [folder / "dataset_info.json"] if (folder / "dataset_info.json").is_file() else \
        sorted(folder.glob("*/dataset_info.json")) if (folder / "dataset_dict.json").is_file() else []
    found = []
    for info in infos:
        try:
            found.append(json.loads(info.read_text()).get("features") or {})
        except (OSError, ValueError):
            continue
    return found


def holds_videos(dataset, config=None):
    """Whether --dataset names a save_to_disk folder or a Hub dataset with a Video column (what the folder's JSON
    files or the Hub's card declare: nothing loaded where they say)."""
    if Path(dataset).exists():
        return any(feature.get("_type") == "Video" for features in _saved_features(dataset)
                   for feature in features.values() if isinstance(feature, dict))
    return any(type(feature).__name__ == "Video" for feature in hub_features(dataset, config).values())


def _video_column(ds, asked):
    videos = [name for name, feature in ds.features.items() if type(feature).__name__ == "Video"]
    if asked is not None:
        if asked not in videos:
            _fail(f"image_column: {asked!r} is not a Video column; the Video columns are: {', '.join(videos)}")
        return asked
    return videos[0]


def _split(ds, data, names=None):
    """(StoredFrames, labels, names for messages, class names) of one split."""
    import datasets

    video = _video_column(ds, data.image_column)
    label = pick_column(ds, data.label_column, LABEL_COLUMNS, "label")
    feature = ds.features[label]
    names = names or (feature.names if isinstance(feature, datasets.ClassLabel) else None)
    labels = [int(v) for v in ds[label][:]]
    names = names or [str(i) for i in range(max(labels) + 1)]
    if any(not 0 <= v < len(names) for v in labels):
        _fail(f"label_column: labels outside [0, {len(names)}) in {label!r}")
    rows = ds.cast_column(video, datasets.Video(decode=False)).select_columns([video])
    paths = rows.data.column(video).combine_chunks().field("path").to_pylist()  # the paths alone, not the bytes
    where = [path or f"{video}[{i}]" for i, path in enumerate(paths)]
    return StoredFrames(rows, video, VIDEO_READERS[data.video_decoder]), labels, where, names


class StoredVideos(DataSource):
    """--dataset NAME or FOLDER (save_to_disk), a dataset with a Video column (and a validation split): 112 px and
    Kinetics' statistics unless a timm/hf/pv model recommends others, as video files."""

    kind, video, size, stats = "video", True, 112, (KINETICS_MEAN, KINETICS_STD)
    unused = VIDEO_FILES_UNUSED

    def name(self, data):
        return f"videodataset:{data.dataset}"

    def datasets(self, data, inp, rank=0, world=1):
        import datasets

        loaded = datasets.load_from_disk(data.dataset) if Path(data.dataset).exists() else \
            load_hub(data.dataset, data.dataset_config)
        if isinstance(loaded, datasets.Dataset):
            loaded = datasets.DatasetDict(train=loaded)
        if data.train_split not in loaded:
            _fail(f"train_split: no split {data.train_split!r}; splits are: {', '.join(loaded)}")
        val_split = data.val_split or next((s for s in VAL_SPLITS if s in loaded and s != data.train_split), None)
        if val_split not in loaded:
            _fail(f"val_split: a video dataset needs a validation split (not carved); splits are: {', '.join(loaded)}")
        train_ds = subset(loaded[data.train_split], data.max_train_samples)
        val_ds = subset(loaded[val_split], data.max_val_samples)
        train_frames, train_labels, train_where, names = _split(train_ds, data)
        val_frames, val_labels, val_where, _ = _split(val_ds, data, names)
        train, val = _clip_datasets(data, inp, (train_frames, train_labels, train_where),
                                    (val_frames, val_labels, val_where))
        decoder = {"pyav": "PyAV", "torchcodec": "torchcodec"}[data.video_decoder]
        return train, val, names, [f"video dataset: {len(train_labels)} train / {len(val_labels)} val videos "
                                   f"(split {val_split!r}), decoded with {decoder}", *decoding_notes(train)]
