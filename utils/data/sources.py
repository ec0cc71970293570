"""Where images come from: Hub datasets, image folders, save_to_disk folders, checked before training; the
ImageFiles source over them (utils/data/source.py)."""

import functools
import os
from pathlib import Path

import numpy as np

from utils.core.errors import UserError
from utils.data import presets
from utils.data.images import with_transform
from utils.data.source import DataSource
from utils.data.video import VIDEO_SUFFIXES

SPLIT_SEED = 0  # carving and subsets use a fixed seed, so every --seed is scored on the same images
IMAGE_COLUMNS = ("image", "img", "images", "picture", "pixel_values", "jpg", "jpeg", "png", "webp")  # webdataset: by suffix
LABEL_COLUMNS = ("label", "labels", "fine_label", "coarse_label", "class", "target", "category", "cls")
VAL_SPLITS = ("validation", "val", "valid", "test")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


class DataError(UserError, ValueError):
    """Data that cannot be trained on as asked; the message is one line saying what to do."""


_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


@functools.lru_cache(maxsize=None)  # asked by every option default that depends on the modality
def folder_holds_videos(folder):
    """Whether a <class>/<file> folder holds video files (its first media file, in walk order, says)."""
    for _, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            suffix = os.path.splitext(name)[1].lower()
            if not name.startswith(".") and suffix in IMAGE_SUFFIXES | VIDEO_SUFFIXES:
                return suffix in VIDEO_SUFFIXES
    return False


def folder_files(folder, role, suffixes=IMAGE_SUFFIXES, kind="images"):
    """{class name: [image files]} of a folder with one sub-folder per class, in sorted class order.

    A class folder may nest its images in sub-folders: the class is the top folder. Hidden files and
    folders (.ipynb_checkpoints, macOS ._ files) are skipped.
    """
    folder = Path(folder)
    if not folder.is_dir():
        _fail(f"{role}: {folder} is not a readable folder")
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        _fail(f"{role}: {folder} has no class sub-folders (expected {folder}/<class>/<{kind[:-1]}>)")
    files = {}
    for name in classes:
        found = []
        # Absolute paths: what workers open and bad_images.txt lists. Symlinked sub-folders are not
        # followed (as rglob did not).
        for parent, dirs, names in os.walk(os.path.abspath(folder / name)):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            found += [os.path.join(parent, f) for f in names
                      if not f.startswith(".") and os.path.splitext(f)[1].lower() in suffixes]
        if not found:
            _fail(f"{role}: class folder {folder / name} holds no {kind} ({', '.join(sorted(suffixes))})")
        files[name] = sorted(found)
    return files


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


@functools.lru_cache(maxsize=None)  # one lookup a run, shared by the catalog (images or videos?) and the loader
def _hub(name, config, load):
    """`load_dataset` (load) or `load_dataset_builder` (not load) of a Hub name, read from the local cache when
    offline; the exception that stopped it, returned (and kept: an unreachable Hub is waited for once)."""
    import datasets

    try:
        return datasets.load_dataset(name, config) if load else datasets.load_dataset_builder(name, config)
    except (ConnectionError, OSError, ValueError) as e:  # OSError also covers "no such repo"
        return e


def hub_features(name, config):
    """The features a Hub dataset declares (its card online, the cache's record offline: nothing downloaded),
    else those of the dataset loaded (from the cache, and kept for the loader); {} when it cannot be reached."""
    builder = _hub(name, config, False)
    if isinstance(builder, Exception):
        return {}
    if builder.info.features is not None:
        return builder.info.features
    if getattr(builder, "BASE_FEATURE", None) is not None:  # videofolder, imagefolder...: typed by its files
        return {builder.BASE_FEATURE.__name__.lower(): builder.BASE_FEATURE()}
    loaded = _hub(name, config, True)
    return {} if isinstance(loaded, Exception) else next(iter(loaded.values())).features


def load_hub(name, config):
    import datasets

    for load in (False, True):  # the builder first: a name that cannot be reached fails there, once
        got = _hub(name, config, load)
        if isinstance(got, (ConnectionError, OSError)):  # offline and not cached, or no such repo
            cache = os.environ.get("HF_DATASETS_CACHE") or datasets.config.HF_DATASETS_CACHE
            _fail(f"dataset: could not reach {name!r} on the Hub and it is not in the local cache ({cache}): "
                  f"download it once where there is network (python -c \"import datasets; "
                  f"datasets.load_dataset('{name}')\") and copy that cache here, or point HF_DATASETS_CACHE at a "
                  f"cache that holds it and set HF_HUB_OFFLINE=1 [{type(got).__name__}]")
        if isinstance(got, ValueError):  # e.g. a config name that does not exist
            _fail(f"dataset: {name!r}: {str(got).splitlines()[0]}")
    return got


def _load(args):
    """A DatasetDict (or Dataset) for the source that `args` names."""
    import datasets

    if args.train_dir or args.data_dir:
        if args.data_dir:
            root = Path(args.data_dir)
            if not root.is_dir():
                _fail(f"data_dir: {root} is not a readable folder")
            val = next((root / s for s in ("val", "validation", "valid") if (root / s).is_dir()), None)
            if not (root / "train").is_dir():
                _fail(f"data_dir: {root} has no train/ folder (expected {root}/train/<class>/<image>)")
            return _load_folders(root / "train", val)
        return _load_folders(args.train_dir, args.val_dir)
    if Path(args.dataset).exists():
        try:
            return datasets.load_from_disk(args.dataset)
        except FileNotFoundError as e:
            _fail(f"dataset: {args.dataset} is not a folder written by save_to_disk ({str(e).splitlines()[0]})")
    return load_hub(args.dataset, args.dataset_config)


def pick_column(ds, asked, candidates, role):
    columns = ds.column_names
    if asked is not None:
        if asked not in columns:
            _fail(f"{role}_column: no column {asked!r}; columns are: {', '.join(columns)}")
        return asked
    found = next((c for c in candidates if c in columns), None)
    if found is None:
        _fail(f"{role}_column: no {role} column found among: {', '.join(columns)}; name it with --{role}_column")
    return found


def image_and_label(ds, args):
    """(ds with only its image and label columns, named `image` and `label`; the label's original name). A
    Dataset or a streamed IterableDataset alike."""
    import datasets

    image_col = pick_column(ds, args.image_column, IMAGE_COLUMNS, "image")
    label_col = pick_column(ds, args.label_column, LABEL_COLUMNS, "label")
    ds = ds.select_columns([image_col, label_col])
    if image_col != "image":
        ds = ds.rename_column(image_col, "image")
    if label_col != "label":
        ds = ds.rename_column(label_col, "label")
    if not isinstance(ds.features["image"], datasets.Image):
        _fail(f"image_column: column {image_col!r} holds {type(ds.features['image']).__name__}, not images")
    return ds, label_col


def normalise(ds, args, class_names=None):
    """Rename the image and label columns to `image` and `label`, drop the others, labels as ClassLabel."""
    import datasets

    ds, label_col = image_and_label(ds, args)
    if isinstance(ds.features["label"], datasets.ClassLabel):
        return ds
    labels = ds["label"][:]  # [:] reads the column whole, not row by row
    if labels and not all(isinstance(v, (int, np.integer)) for v in labels[:100]):
        _fail(f"label_column: column {label_col!r} holds {type(labels[0]).__name__} values, expected class indices")
    if class_names is None:  # integer labels without names: classes 0..max
        class_names = [str(i) for i in range(max(labels) + 1 if labels else 0)]
    _check_range(ds, class_names)
    return ds.cast_column("label", datasets.ClassLabel(names=class_names))


def _check_range(ds, class_names):
    labels = np.asarray(ds["label"][:])
    bad = labels[(labels < 0) | (labels >= len(class_names))]
    if bad.size:
        _fail(f"label_column: {bad.size} labels outside [0, {len(class_names)}), e.g. {int(bad[0])}; "
              f"fix the data or pick another split")


def subset(ds, n):
    """A seeded random subset of n rows (all of them when n is None or larger)."""
    if n is None or n >= len(ds):
        return ds
    rows = np.random.default_rng(SPLIT_SEED).choice(len(ds), size=n, replace=False)
    return ds.select(np.sort(rows))


def load_splits(args):
    """(train, val, class_names, notes): `image`/`label` datasets, checked; notes say what was derived."""
    import datasets

    loaded = _load(args)
    notes = []
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict(train=loaded)
    if args.train_split not in loaded:
        _fail(f"train_split: no split {args.train_split!r}; splits are: {', '.join(loaded)}")
    if not len(loaded[args.train_split]):
        _fail(f"train_split: split {args.train_split!r} is empty")
    train = normalise(loaded[args.train_split], args)
    names = train.features["label"].names
    val_split = args.val_split or next((s for s in VAL_SPLITS if s in loaded and s != args.train_split), None)
    if args.val_split and args.val_split not in loaded:
        _fail(f"val_split: no split {args.val_split!r}; splits are: {', '.join(loaded)}")
    _check_range(train, names)
    if val_split is None:
        try:
            carved = train.train_test_split(test_size=args.val_fraction, stratify_by_column="label", seed=SPLIT_SEED)
        except ValueError as e:  # a stratified carve needs an image of each class on both sides
            _fail(f"val_fraction: cannot carve a stratified {args.val_fraction:.0%} of {len(train)} images in "
                  f"{len(train.features['label'].names)} classes ({str(e).splitlines()[0]}); raise --val_fraction, "
                  f"or give a validation split (--val_dir)")
        train, val = carved["train"], carved["test"]
        notes.append(f"no validation split: carved {len(val)} images ({args.val_fraction:.0%}) from "
                     f"{args.train_split!r}, stratified, seed {SPLIT_SEED}")
    else:
        if not len(loaded[val_split]):
            _fail(f"val_split: the validation split {val_split!r} is empty")
        val = normalise(loaded[val_split], args, class_names=names)
        if isinstance(val.features["label"], datasets.ClassLabel) and val.features["label"].names != names:
            extra = sorted(set(val.features["label"].names) - set(names))
            if extra:
                _fail(f"val_split: classes not in train: {', '.join(extra[:10])}")
            # Same classes in another order: remap by name, not by index.
            val = val.align_labels_with_mapping({name: i for i, name in enumerate(names)}, "label")
        notes.append(f"validation split: {val_split!r}")
    _check_range(val, names)
    train, val = subset(train, args.max_train_samples), subset(val, args.max_val_samples)
    return train, val, names, notes


class ImageFiles(DataSource):
    """Image files: a <class>/<image> folder (--train_dir/--val_dir, --data_dir), a Hub dataset or a
    save_to_disk folder (--dataset): ImageNet's statistics and 224 px unless a timm/hf model recommends others."""

    def name(self, args):
        folder = args.train_dir or args.data_dir
        return f"imagefolder:{folder}" if folder else args.dataset

    def datasets(self, args, inp, rank=0, world=1):
        train_preset, val_preset = presets.image_presets(inp)
        train, val, names, notes = load_splits(args)
        on_device = args.decode_on_device  # bytes and draws, not pixels (utils/data/device_decode.py)
        return (with_transform(train, train_preset, decoded=False, seed=args.seed, on_device=on_device),
                with_transform(val, val_preset, decoded=False, on_device=on_device), names,
                notes + presets.progressive_notes(inp, args.epochs))
