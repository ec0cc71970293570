"""Image files: folders, Hub datasets and save_to_disk folders as `datasets` splits of undecoded images and labels,
checked before training; ImageFiles, their source."""

from pathlib import Path

from utils.data.datasets.images import with_transform
from utils.data.decoding.bands import PixelFormat, array_format, file_decoder, probe
from utils.data.decoding.images import read_bytes
from utils.data.errors import DataError
from utils.data.sources.folders import first_media_file, folder_files
from utils.data.sources.hub import load_hub
from utils.data.sources.folds import remake
from utils.data.sources.label_files import first_csv_file, label_csv_splits, read_csv_column
from utils.data.sources.protocol import DataSource
from utils.data.datasets.label_kinds import kind_of, targets_for
from utils.data.sources.splits import (SPLIT_SEED, VAL_SPLITS, class_labels, image_and_label,
                                       long_tailed, normalise, subset, _check_range)
from utils.data.transforms.images import image_presets
from utils.data.transforms.input import progressive_notes

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def _folder_split(files, names):
    """A Dataset of file paths (stored as paths: nothing is read or copied now) labelled by class name."""
    import datasets

    index = {name: i for i, name in enumerate(names)}
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=names))
    return datasets.Dataset.from_dict({"image": [f for fs in files.values() for f in fs],
                                       "label": [index[c] for c, fs in files.items() for _ in fs]},
                                      features=features)


def _load_folders(train_dir, val_dir):
    """Train (and val) Datasets over exactly the files we listed; labels = sorted train folder names.

    Built from our own list rather than the imagefolder builder, which labels a file by its immediate
    parent folder and so cannot read classes with sub-folders.
    """
    import datasets

    train = folder_files(train_dir, "train_dir")
    names = list(train)
    splits = {"train": _folder_split(train, names)}
    if val_dir is not None:
        val = folder_files(val_dir, "val_dir")
        unknown = sorted(set(val) - set(train))
        if unknown:
            _fail(f"val_dir: classes not in train_dir: {', '.join(unknown[:10])}")
        splits["validation"] = _folder_split(val, names)  # val classes mapped to train's indices by name
    return datasets.DatasetDict(splits)


def _load_csv(data):
    """Train (and val) Datasets of the files --train_csv (--val_csv) list, labels a List(ClassLabel)."""
    import datasets

    train, val, names = label_csv_splits(data)
    features = datasets.Features(image=datasets.Image(), label=datasets.List(datasets.ClassLabel(names=names)))
    splits = {"train": train} if val is None else {"train": train, "validation": val}
    loaded = datasets.DatasetDict({split: datasets.Dataset.from_dict({"image": paths, "label": labels},
                                                                     features=features)
                                   for split, (paths, labels) in splits.items()})
    if data.group_column:  # --folds' groups: a column of the training CSV, in its rows' order
        loaded["train"] = loaded["train"].add_column(data.group_column, read_csv_column(data.train_csv,
                                                                                        data.group_column))
    return loaded


def _load(data):
    """A DatasetDict (or Dataset) for the source that `data` names."""
    import datasets

    if data.train_csv:
        return _load_csv(data)
    if data.train_dir or data.data_dir:
        if data.data_dir:
            root = Path(data.data_dir)
            if not root.is_dir():
                _fail(f"data_dir: {root} is not a readable folder")
            val = next((root / s for s in ("val", "validation", "valid") if (root / s).is_dir()), None)
            if not (root / "train").is_dir():
                _fail(f"data_dir: {root} has no train/ folder (expected {root}/train/<class>/<image>)")
            return _load_folders(root / "train", val)
        return _load_folders(data.train_dir, data.val_dir)
    if Path(data.dataset).exists():
        try:
            return datasets.load_from_disk(data.dataset)
        except FileNotFoundError as e:
            _fail(f"dataset: {data.dataset} is not a folder written by save_to_disk ({str(e).splitlines()[0]})")
    return load_hub(data.dataset, data.dataset_config)


def load_splits(data):
    """(train, val, class_names, notes): `image`/`label` datasets, checked; notes say what was derived."""
    import datasets

    loaded = _load(data)
    notes = []
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict(train=loaded)
    if data.train_split not in loaded:
        _fail(f"train_split: no split {data.train_split!r}; splits are: {', '.join(loaded)}")
    if not len(loaded[data.train_split]):
        _fail(f"train_split: split {data.train_split!r} is empty")
    train = normalise(loaded[data.train_split], data)
    if data.group_column:  # carried beside each row through the subsets, to the folds (utils/data/sources/folds.py)
        train = train.add_column("group", group_values(loaded[data.train_split], data))
    names = class_labels(train.features["label"]).names
    val_split = data.val_split or next((s for s in VAL_SPLITS if s in loaded and s != data.train_split), None)
    if data.val_split and data.val_split not in loaded:
        _fail(f"val_split: no split {data.val_split!r}; splits are: {', '.join(loaded)}")
    _check_range(train, names)
    if val_split is None and data.folds:
        val = None  # a fold of the training split is the validation
    elif val_split is None:
        train, val, note = _carve(train, data, names)
        notes.append(note)
    else:
        if not len(loaded[val_split]):
            _fail(f"val_split: the validation split {val_split!r} is empty")
        val = normalise(loaded[val_split], data, class_names=names)
        if isinstance(val.features["label"], datasets.ClassLabel) and val.features["label"].names != names:
            extra = sorted(set(val.features["label"].names) - set(names))
            if extra:
                _fail(f"val_split: classes not in train: {', '.join(extra[:10])}")
            # Same classes in another order: remap by name, not by index.
            val = val.align_labels_with_mapping({name: i for i, name in enumerate(names)}, "label")
        notes.append(f"validation split: {val_split!r}")
    if val is not None:
        _check_range(val, names)
        val = subset(val, data.max_val_samples)
    train, note = long_tailed(train, data.imbalance)
    notes += [note] if note else []
    train = subset(train, data.max_train_samples)
    return train, val, names, notes


def _carve(train, data, names):
    """(train, val, note): --val_fraction of a split without a validation split, stratified, seed SPLIT_SEED."""
    train, val, how = kind_of(train.features["label"]).carve(train, data.val_fraction, SPLIT_SEED, names)
    return train, val, (f"no validation split: carved {len(val)} images ({data.val_fraction:.0%}) from "
                        f"{data.train_split!r}, {how}, seed {SPLIT_SEED}")


def group_values(split, data):
    """--group_column's value of each row of a training split, as loaded; one line when it has no such column."""
    if data.train_dir or data.data_dir:
        _fail("group_column: folders of images have no columns; name each sample's group with --groups FILE")
    if data.group_column not in split.column_names:
        _fail(f"group_column: no column {data.group_column!r}; columns are: {', '.join(split.column_names)}")
    return split[data.group_column][:]


def first_file(data):
    """The bytes and name of the first training file, before the data is built (None where it cannot be told now:
    a Hub dataset, a folder or CSV that the build will report on); for a save_to_disk column of arrays, its
    PixelFormat."""
    if data.train_csv:
        path = first_csv_file(data.train_csv, data.data_root, data.csv_path_column)
    elif data.train_dir or data.data_dir:
        path = first_media_file(data.train_dir or Path(data.data_dir) / "train")
    elif Path(data.dataset).is_dir():  # save_to_disk: its first training row, undecoded
        try:
            import datasets

            loaded = datasets.load_from_disk(data.dataset)
            split, _ = image_and_label(loaded[data.train_split] if isinstance(loaded, datasets.DatasetDict)
                                       else loaded, data)
            if array_format(split.features["image"]) is not None:
                return array_format(split.features["image"])
            image = split.cast_column("image", datasets.Image(decode=False))[0]["image"]
        except (FileNotFoundError, KeyError, ValueError, IndexError, DataError):
            return None
        return (read_bytes(image), image.get("path") or f"{data.dataset} row 0") if image else None
    else:
        return None
    return (Path(path).read_bytes(), str(path)) if path is not None and Path(path).is_file() else None


def first_format(data):
    """What the first training file holds (a PixelFormat); None where it cannot be told now, or the file cannot be
    read: read as RGB then, and reported (or skipped with --skip_bad_images) when the run reads it."""
    first = first_file(data)
    try:
        return first if first is None or isinstance(first, PixelFormat) else probe(*first)
    except (OSError, ValueError, SyntaxError, RuntimeError):
        return None


class ImageFiles(DataSource):
    """Image files: a <class>/<image> folder (--train_dir/--val_dir, --data_dir), a Hub dataset or a
    save_to_disk folder (--dataset): ImageNet's statistics and 224 px unless a timm/hf model recommends others.
    Files keep their channels and bits (utils/data/decoding/bands.py) unless they are 8-bit RGB."""

    file_pixels = True

    def __init__(self):
        self.formats = {}  # the first file's PixelFormat by where it is: read once however often it is asked

    def pixel_format(self, data):
        where = (data.train_csv, data.data_root, data.csv_path_column, data.train_dir, data.data_dir, data.dataset,
                 data.train_split)
        if where not in self.formats:
            self.formats[where] = first_format(data)
        return self.formats[where]

    def name(self, data):
        folder = data.train_dir or data.data_dir
        return f"csv:{data.train_csv}" if data.train_csv else f"imagefolder:{folder}" if folder else data.dataset

    def datasets(self, data, inp, rank=0, world=1):
        train, val, names, notes = load_splits(data)
        train, val, self.remade, remade = remake(train, val, data)
        notes += remade
        on_device = data.decode_on_device  # bytes and draws, not pixels (utils/data/decoding/on_device.py)
        targets = targets_for(train.features["label"], len(names))  # a class index, or a multi-hot row
        train_preset, val_preset = image_presets(inp, targets)
        decode = file_decoder(inp)  # None: 8-bit RGB, decode_rgb's
        return (with_transform(train, train_preset, decoded=False, seed=data.seed, on_device=on_device,
                               targets=targets, decode=decode),
                with_transform(val, val_preset, decoded=False, on_device=on_device, targets=targets, decode=decode),
                names,
                notes + progressive_notes(inp, data.epochs))
