"""CSV label files (--train_csv, --val_csv): one row per image or video, a path column and a labels column holding
its class names, separated by spaces (Kaggle Planet's `image_name,tags`) or by `|` (ChestX-ray14's `Finding
Labels`): several labels a file, read as multi-label data. A row with no labels is a valid all-negative sample.

Python's csv module reads the file (quoting, commas in names); what is ours is the layout's rules and the one-line
errors naming the file and row, which no maintained library gives for this layout."""

import csv
import os
from pathlib import Path

from utils.data.errors import DataError

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)

PATH_COLUMNS = ("path", "image", "image_name", "Image Index", "filename", "file", "video")  # else the first column
LABELS_COLUMNS = ("labels", "tags", "Finding Labels", "label", "classes")  # else the second column


def _column(header, asked, candidates, role, where, position):
    if asked is not None:
        if asked not in header:
            _fail(f"{where}: no column {asked!r} (--csv_{role}_column); columns are: {', '.join(header)}")
        return asked
    found = next((c for c in candidates if c in header), None)
    if found is None and len(header) < 2:
        _fail(f"{where}: expected a header with a path column and a labels column, got {', '.join(header) or 'none'}")
    return found or header[position]


def read_label_csv(csv_file, data_root=None, path_column=None, labels_column=None, classes=None):
    """(absolute paths, each row's class names) of a label CSV. Paths are relative to `data_root` (default: the
    CSV's folder). Labels are split on `|` when any row of the file holds one (names may then hold spaces), else
    on spaces. With `classes` (the training classes), a name outside them fails, naming the file and row."""
    csv_file = Path(csv_file)
    try:
        with open(csv_file, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        _fail(f"{csv_file}: cannot read the label file ({getattr(e, 'strerror', None) or e})")
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if len(rows) < 2:
        _fail(f"{csv_file}: holds no rows (expected a header line, then one line per file: path,labels)")
    header, rows = [cell.strip() for cell in rows[0]], rows[1:]
    path_col = header.index(_column(header, path_column, PATH_COLUMNS, "path", csv_file, 0))
    labels_col = header.index(_column(header, labels_column, LABELS_COLUMNS, "labels", csv_file, 1))
    bar = any("|" in row[labels_col] for row in rows if len(row) > labels_col)
    root = Path(data_root) if data_root is not None else csv_file.parent
    known = None if classes is None else set(classes)
    paths, labels = [], []
    for number, row in enumerate(rows, start=2):
        where = f"{csv_file}:{number}"
        if len(row) != len(header):
            _fail(f"{where}: {len(row)} fields where the header has {len(header)}")
        cell = row[labels_col]
        names = [n.strip() for n in cell.split("|")] if bar else cell.split()
        names = sorted(set(filter(None, names)), key=names.index)
        unknown = [n for n in names if known is not None and n not in known]
        if unknown:
            _fail(f"{where}: class {unknown[0]!r} is not one of the {len(known)} classes of the training file")
        path = root / row[path_col].strip()
        if not path.exists():
            _fail(f"{where}: {path} does not exist (paths are relative to --data_root, default: the CSV's folder)")
        paths.append(os.path.abspath(path))
        labels.append(names)
    return paths, labels


def class_order(train_labels, names_file=None):
    """The class names: --class_names' lines when given (every training name among them), else the sorted names
    of the training file."""
    found = sorted({n for row in train_labels for n in row})
    if names_file is None:
        if not found:
            _fail("train_csv: no row has a label; a multi-label file needs at least one class name")
        return found
    try:
        names = [line.strip() for line in Path(names_file).read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"class_names: cannot read {names_file} ({getattr(e, 'strerror', None) or e})")
    missing = [n for n in found if n not in names]
    if missing:
        _fail(f"class_names: {names_file} does not name {missing[0]!r}, which the training file uses")
    return names


def label_csv_splits(data):
    """(train (paths, lists of class indices), val (the same) or None, class names) of --train_csv / --val_csv."""
    train_paths, train_names = read_label_csv(data.train_csv, data.data_root, data.csv_path_column,
                                              data.csv_labels_column)
    classes = class_order(train_names, data.class_names)
    index = {name: i for i, name in enumerate(classes)}
    train = train_paths, [[index[n] for n in row] for row in train_names]
    if data.val_csv is None:
        return train, None, classes
    val_paths, val_names = read_label_csv(data.val_csv, data.data_root, data.csv_path_column, data.csv_labels_column,
                                          classes=classes)
    return train, (val_paths, [[index[n] for n in row] for row in val_names]), classes


def read_csv_column(csv_file, column):
    """The values of a label CSV's `column`, one a row, in the order read_label_csv reads its rows."""
    with open(csv_file, newline="") as f:
        rows = [row for row in csv.reader(f) if any(cell.strip() for cell in row)]
    header = [cell.strip() for cell in rows[0]]
    if column not in header:
        _fail(f"group_column: {csv_file} has no column {column!r}; its columns are: {', '.join(header)}")
    return [row[header.index(column)].strip() for row in rows[1:]]


def first_csv_file(csv_file, data_root=None, path_column=None):
    """The path of a label CSV's first file, read from its first rows only (None where they cannot be read: read
    again, and reported, when the data is built): the catalog's and the input's question, before the data is built."""
    try:
        with open(csv_file, newline="") as f:
            reader = csv.reader(f)
            header = [cell.strip() for cell in next(reader, [])]
            first = next((row for row in reader if any(cell.strip() for cell in row)), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not header or first is None or len(first) != len(header):
        return None
    try:
        column = header.index(_column(header, path_column, PATH_COLUMNS, "path", csv_file, 0))
    except DataError:
        return None
    return (Path(data_root) if data_root is not None else Path(csv_file).parent) / first[column].strip()


def csv_holds_videos(csv_file, data_root=None, path_column=None):
    """Whether a label CSV lists videos (its first file a video file or a folder of frames)."""
    from utils.data.decoding.video import VIDEO_SUFFIXES

    path = first_csv_file(csv_file, data_root, path_column)
    return path is not None and (path.suffix.lower() in VIDEO_SUFFIXES or path.is_dir())
