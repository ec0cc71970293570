"""Run train_classification.py with each rank in a folder of its own, as ranks on nodes with local disks.

    accelerate launch ... tests/helpers/node_local.py RANK0_DIR RANK1_DIR [train_classification.py options...]
    run_ranks([RANK0_DIR, RANK1_DIR, *options], target="helpers.node_local:main")     # tests/ranks.py

A relative --output_dir then names a different folder on each rank.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train_classification  # noqa: E402

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    folders, argv = argv[:2], argv[2:]
    os.chdir(folders[int(os.environ.get("RANK", "0"))])
    train_classification.main(argv)


if __name__ == "__main__":
    main()
