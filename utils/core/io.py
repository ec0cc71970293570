"""Files written whole: a reader never sees half a file, even if the writer dies mid-write."""

import json
import os
import tempfile
from pathlib import Path


def write_text_atomic(path, text):
    """Write to a temporary file in the same folder, then rename it into place (atomic on POSIX)."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path, data):
    """write_text_atomic for bytes (e.g. a rendered PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def usual_permissions(path):
    """The file `path`, or every file under the folder `path`, given the permissions of any other file a run writes:
    0666 less the umask. safetensors (0.8) writes its files 0600, through a private temporary file: the weights that
    accelerate, timm and transformers save with it could not be read by the colleagues a run folder is shared with."""
    path, mode = Path(path), 0o666 & ~_umask()
    for file in path.rglob("*") if path.is_dir() else [path]:
        if file.is_file():
            os.chmod(file, mode)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def first_free(base):
    """`base`, or `base-2`, `base-3`, ...: the first such path that does not exist yet."""
    return next(p for p in (Path(f"{base}{suffix}") for suffix in [""] + [f"-{i}" for i in range(2, 1000)])
                if not p.exists())


def write_json_atomic(path, obj):
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


def append_jsonl(path, obj):
    """One JSON object per line; a line is one write() call, so a crash cuts at most the last line."""
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
