"""The training split as the options remake it, before a run uses it: samples left out (--exclude FILE), labels flipped
at random (--flip_labels F: the noise of an experiment in finding them), and k-fold cross-validation (--folds K --fold
I: fold I of the training split is the validation, the rest is trained on).

Map-style image sources (the embedded digits, folders, CSV files, Hub and save_to_disk datasets) hand their splits to
`remake`. Every sample is named one way throughout, in --exclude's file, flipped_labels.csv, the out-of-fold
predictions and label_issues.csv (`sample_names`): its file's path where each sample has its own, else its index in the
training split (as --imbalance and --max_train_samples leave it: both are seeded, so the index is the same in every
run). Folds come from scikit-learn's StratifiedKFold (StratifiedGroupKFold with groups, by label set for multi-label
data when every set has a sample for each fold, else KFold/GroupKFold), seeded by --fold_seed alone: the same folds
for every --seed of training and any number of processes."""

import contextlib
import csv
import os
from dataclasses import dataclass, field

import numpy as np

from utils.data.datasets.label_kinds import kind_of
from utils.data.errors import DataError
from utils.data.sources.splits import class_labels

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)

FLIP_SEED = 20261205  # the flipped samples and their new labels: the same in every run, whatever its seeds
LEAKED = "leaked.csv"  # an audit.py folder's list of the validation samples with a copy in training


@dataclass
class Remade:
    """What the options did to the training split; the run records it (run.json, flipped_labels.csv) and names its
    validation samples by `held_out` (fold I's names in the training split)."""

    folds: int = None
    fold: int = None
    fold_seed: int = 0
    how: str = ""  # how the folds were stratified
    held_out: list = None  # the validation's sample names (a fold of the training split); None: the split's own
    held_index: list = None  # and their places in the training split (after --exclude), in the validation's order
    excluded: int = 0
    flipped: list = field(default_factory=list)  # (name, label, given label) of each flipped sample

    def record(self):
        """What run.json keeps of it."""
        kept = {"folds": self.folds, "fold": self.fold, "fold_seed": self.fold_seed, "stratified": self.how} \
            if self.folds else {}
        return {**kept, **({"excluded": self.excluded} if self.excluded else {}),
                **({"flipped_labels": len(self.flipped)} if self.flipped else {})}


def sample_names(ds):
    """How each row of a split is named: its file's path when every row has a path of its own, else its index."""
    import datasets

    if not isinstance(ds.features["image"], datasets.Image):
        return [str(i) for i in range(len(ds))]
    rows = ds.select_columns(["image"]).cast_column("image", datasets.Image(decode=False)).with_format("arrow")
    paths = []
    for batch in rows.iter(batch_size=4096):  # the paths only: the bytes are not kept
        paths += batch.column("image").combine_chunks().field("path").to_pylist()
    if all(paths) and len(set(paths)) == len(paths):
        return paths
    return [str(i) for i in range(len(ds))]


def unwrapped_split(dataset):
    """The dataset of a split the source built, without its EpochSeeded wrapper (a training split's): ImageRows,
    VideoClips."""
    from utils.core.seeding import EpochSeeded

    return dataset.dataset if isinstance(dataset, EpochSeeded) else dataset


def split_names(dataset):
    """How the samples of a split the source built are named, as `sample_names` names them: by path where each has its
    own (image files, videos), else by index in the split."""
    inner = unwrapped_split(dataset)
    if hasattr(inner, "rows"):  # ImageRows
        return sample_names(inner.rows)
    names = getattr(inner, "names", None)  # VideoClips: its files
    return [str(name) for name in names] if names else [str(i) for i in range(len(inner))]


def leaked_positions(folder, val):
    """The places in the validation split `val` of the samples an audit's leaked.csv names (--audit); a name that
    matches none is one line."""
    path = os.path.join(folder, LEAKED)
    _, rows, at = read_names(path, "audit")
    names = split_names(val)
    place = {name: i for i, name in enumerate(names)}
    unknown = sorted({row[at] for row in rows if len(row) > at} - set(place))
    if unknown:
        _fail(f"audit: {len(unknown)} of the samples {path} names are not in the validation split, e.g. "
              f"{unknown[0]!r}; audit this data (these options) again")
    return frozenset(place[row[at]] for row in rows if len(row) > at)


def read_names(path, option, column="sample"):
    """The `column` (default: the first) of a CSV file naming samples; with a header."""
    try:
        with open(path, newline="") as f:
            rows = [row for row in csv.reader(f) if any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        _fail(f"{option}: cannot read {path} ({getattr(e, 'strerror', None) or e})")
    if not rows:
        _fail(f"{option}: {path} is empty (expected a header, then a sample's path or index a line)")
    header = [cell.strip() for cell in rows[0]]
    at = header.index(column) if column in header else 0
    return header, [[cell.strip() for cell in row] for row in rows[1:]], at


def check_options(data, need):
    """--folds and what goes with it; --exclude's file; --flip_labels' fraction."""
    need(data.folds is None or data.folds >= 2, "folds", "must be >= 2 (K folds: each one the validation of a run)")
    need(data.fold is None or data.folds, "fold", "needs --folds K")
    need(not data.folds or data.fold is not None, "folds", "needs --fold I (0..K-1): the held-out fold of this run")
    need(data.fold is None or not data.folds or 0 <= data.fold < data.folds, "fold",
         f"must be in 0..{(data.folds or 1) - 1} (--folds {data.folds})")
    for key in ("fold_seed", "group_column", "groups"):
        need(data.folds or getattr(data, key) in (None, 0), key, "needs --folds")
    need(not (data.group_column and data.groups), "groups", "give --group_column or --groups, not both")
    need(not (data.folds and data.max_val_samples), "max_val_samples", "with --folds the held-out fold is the "
         "validation, whole: drop it")
    need(data.flip_labels is None or 0 < data.flip_labels < 1, "flip_labels", "must be in (0, 1)")
    for key in ("exclude", "groups"):
        path = getattr(data, key)
        need(path is None or os.path.isfile(path), key, f"no file {path}")
    need(data.audit is None or os.path.isfile(os.path.join(data.audit, LEAKED)), "audit",
         f"no {LEAKED} in it (give a folder audit.py wrote)")
    need(not (data.audit and data.folds), "audit", "names the split's own validation samples; with --folds a fold of "
         "the training split is the validation: drop one")


def exclude(train, names, path):
    """(train, names) without the samples --exclude's file names; a name that matches none is one line."""
    _, rows, at = read_names(path, "exclude")
    dropped = {row[at] for row in rows if len(row) > at}
    unknown = sorted(dropped - set(names))
    if unknown:
        _fail(f"exclude: {len(unknown)} of the {len(dropped)} samples {path} names are not in the training split, "
              f"e.g. {unknown[0]!r} (samples are named by path, or by index in the split for data without files)")
    kept = [i for i, name in enumerate(names) if name not in dropped]
    return train.select(kept), [names[i] for i in kept], len(names) - len(kept)


def flip(train, names, fraction):
    """(train, flipped): round(fraction x n) training labels, picked at random, each made another class at random
    (FLIP_SEED); flipped: (name, label, given label) of each."""
    kind_of(train.features["label"]).refuse("flip_labels")
    labels = np.asarray(train["label"][:], dtype=np.int64)
    classes = len(class_labels(train.features["label"]).names)
    rng = np.random.default_rng(FLIP_SEED)
    picked = np.sort(rng.choice(len(labels), size=round(fraction * len(labels)), replace=False))
    given = labels.copy()
    given[picked] = (labels[picked] + rng.integers(1, classes, size=len(picked))) % classes
    feature = train.features["label"]
    with quiet():  # (a split selected from another is written out whole first, with a progress bar)
        train = train.remove_columns("label").add_column("label", given.tolist(), feature=feature)
    return train, [(names[i], int(labels[i]), int(given[i])) for i in picked]


@contextlib.contextmanager
def quiet():
    """`datasets` without its progress bars."""
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if shown:
            datasets.enable_progress_bars()


def fold_numbers(labels, groups, folds, seed, stratify, how):
    """(each sample's fold, how they were stratified): scikit-learn's splitters, seeded by `seed`, stratified by
    `stratify` (the kind of labels' strata; None: at random), which `how` says."""
    from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold

    if groups is not None:
        if len(set(groups)) < folds:
            _fail(f"folds: {len(set(groups))} groups cannot fill {folds} folds; lower --folds")
        splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=seed) if stratify is not None else \
            GroupKFold(folds, shuffle=True, random_state=seed)
        how += ", groups kept whole"
    else:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed) if stratify is not None else \
            KFold(folds, shuffle=True, random_state=seed)
    numbers = np.full(len(labels), -1, dtype=np.int64)
    for number, (_, held) in enumerate(splitter.split(np.zeros(len(labels)), stratify, groups)):
        numbers[held] = number
    return numbers, how


def groups_of(names, data, column_groups):
    """Each sample's group: --group_column's values (`column_groups`, carried by the source), or --groups FILE's
    (sample, group) rows; None without either. Empty or missing values are one line."""
    if data.groups:
        header, rows, at = read_names(data.groups, "groups")
        given = {row[at]: row[1 - at] if len(row) > 1 else "" for row in rows}
        missing = [name for name in names if not given.get(name)]
        if missing:
            _fail(f"groups: {len(missing)} training samples have no group in {data.groups}, e.g. {missing[0]!r} "
                  f"(a header, then 'sample,group' a line)")
        return [given[name] for name in names]
    if column_groups is None:
        return None
    empty = [name for name, group in zip(names, column_groups) if group is None or str(group).strip() == ""]
    if empty:
        _fail(f"group_column: {len(empty)} training samples have an empty {data.group_column!r}, e.g. {empty[0]!r}")
    return [str(group) for group in column_groups]


def remake(train, val, data):
    """(train, val, remade, notes): the training split with --flip_labels' labels (drawn over the whole split), without
    --exclude's samples, and with --folds its fold --fold as the validation (the split's own validation, `val`, left
    aside). A `group` column of `train` (--group_column's, carried by the source) names each sample's group, and is
    dropped."""
    if not (data.exclude or data.flip_labels or data.folds):
        return train, val, None, []
    names, remade, notes, column_groups = sample_names(train), Remade(), [], None
    if "group" in train.column_names:
        column_groups = dict(zip(names, train["group"][:]))
        train = train.remove_columns("group")
    if data.flip_labels:  # before --exclude: which labels are flipped, and to what, is a function of the whole split
        train, remade.flipped = flip(train, names, data.flip_labels)
        notes.append(f"flip_labels: {len(remade.flipped)} of the {len(names)} training labels flipped at random "
                     f"(flipped_labels.csv: those trained on)")
    if data.exclude:
        train, names, remade.excluded = exclude(train, names, data.exclude)
        kept = set(names)
        left = [row for row in remade.flipped if row[0] in kept]
        notes.append(f"exclude: {remade.excluded} samples left out of training ({data.exclude})"
                     + (f", {len(remade.flipped) - len(left)} of them flipped" if remade.flipped else ""))
        remade.flipped = left
    if not data.folds:
        return train, val, remade, notes
    labels = train["label"][:]
    feature = train.features["label"]
    stratify, how = kind_of(feature).strata(labels, data.folds, class_labels(feature).names)
    groups = groups_of(names, data, None if column_groups is None else [column_groups[n] for n in names])
    numbers, how = fold_numbers(labels, groups, data.folds, data.fold_seed, stratify, how)
    held, kept = np.flatnonzero(numbers == data.fold), np.flatnonzero(numbers != data.fold)
    remade.folds, remade.fold, remade.fold_seed, remade.how = data.folds, data.fold, data.fold_seed, how
    remade.held_out, remade.held_index = [names[i] for i in held], held.tolist()
    notes.append(f"fold {data.fold} of {data.folds} (stratified {how}, fold seed {data.fold_seed}) is the validation: "
                 f"{len(held)} of the training split's {len(names)} samples"
                 + (f"; its own validation split ({len(val)} samples) is left aside" if val is not None else ""))
    return train.select(kept), train.select(held), remade, notes
