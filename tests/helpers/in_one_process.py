"""Several runs of train_classification.py in one fresh interpreter, one after the other.

    python tests/helpers/in_one_process.py OUT.json -- [options of run 1] -- [options of run 2] ...

For runs that need an environment read at import (HF_DATASETS_CACHE, HF_MODULES_CACHE, ...), which neither
the pytest process nor the forked ranks of tests/ranks.py can change any more: one interpreter start for
all of them instead of one each. Writes OUT.json: [{"code", "stdout", "stderr", "imported"}, ...], one per run
(code: 0, or the SystemExit code; imported: which of the libraries a run may not need the interpreter holds after
it), Accelerate's singletons reset between runs as tests/conftest.py does.
"""

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("evaluate", "timm", "transformers", "sklearn")  # imported only by the runs that use them
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main(argv):
    import os

    import train_classification

    given = dict(os.environ)
    from conftest import reset_accelerate_state  # (its import sets HF_HUB_OFFLINE=1: the caller's environment wins)

    os.environ.clear()
    os.environ.update(given)

    out, runs = argv[0], []
    assert argv[1] == "--", argv
    options = [[]]
    for arg in argv[2:]:
        options.append([]) if arg == "--" else options[-1].append(arg)
    for run in options:
        stdout, stderr = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                train_classification.main(run)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                reset_accelerate_state()
        runs.append({"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
                     "imported": [name for name in OPTIONAL if name in sys.modules]})
    Path(out).write_text(json.dumps(runs))


if __name__ == "__main__":
    main(sys.argv[1:])
