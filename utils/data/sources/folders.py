"""Folders of files, one sub-folder per class (<class>/<image> or <class>/<video>), walked once, hidden entries
skipped."""

import functools
import os
from pathlib import Path

from utils.data.decoding.images import IMAGE_SUFFIXES
from utils.data.decoding.video import VIDEO_SUFFIXES
from utils.data.errors import DataError

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


def first_media_file(folder):
    """The first image or video file of a <class>/<file> folder, in walk order (sorted, hidden entries skipped); None
    where it holds none."""
    for parent, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES:
                return os.path.join(parent, name)
    return None


@functools.cache  # asked by every option default that depends on the modality
def folder_holds_videos(folder):
    """Whether a <class>/<file> folder holds video files (its first media file, in walk order, says)."""
    first = first_media_file(folder)
    return first is not None and os.path.splitext(first)[1].lower() in VIDEO_SUFFIXES


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
