"""train_classification.py with no file written past BYTES, as a disk that fills up stops a write.

    python tests/helpers/file_size_limit.py BYTES [train_classification.py options...]

The process's RLIMIT_FSIZE is set to BYTES and SIGXFSZ ignored: a write that would take a file past it fails (EFBIG)
where a full disk fails it (ENOSPC), in torch's, safetensors' and Python's writers alike. Tests use it in forked ranks
(target "helpers.file_size_limit:main", the same arguments): each rank gets the limit.
"""

import resource
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train_classification  # noqa: E402


def main(argv=None):
    limit, *argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    train_classification.main(argv)


if __name__ == "__main__":
    main()
