"""How fast ranks start, and whether they start at all, by the way tests/ranks.py could start them.

    python tests/helpers/rank_start_methods.py            # every way, each in a fresh interpreter (~5 min here)
    python tests/helpers/rank_start_methods.py fork trained

Each way runs the TINY 1-epoch job twice on 1 process and twice on 2 and prints the wall seconds of each:
`launch` (accelerate launch), `forkserver` (the preloaded forkserver tests/ranks.py uses), `fork` (a fork of
this process); `trained`: this process trains in-process first, as pytest has when a forked-ranks test
follows an in-process one. A run that hangs is killed at its 120 s timeout (exit 124). tests/README.md
has the figures.
"""

import os
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

TESTS = Path(__file__).resolve().parent.parent
WAYS = [["launch"], ["forkserver"], ["forkserver", "trained"], ["fork"], ["fork", "trained"]]


def measure(way, trained, out):
    os.environ["TEST_RANKS_START_METHOD"] = "fork" if way == "fork" else "forkserver"  # read when ranks imports
    sys.path[:0] = [str(TESTS), str(TESTS.parent)]
    from conftest import TINY, run_main, run_ok
    import ranks

    if trained:  # OpenMP's thread pool is alive in this process from here on
        run_main([*TINY, "--epochs", "1", "--output_dir", out / "before"])
    argv = [*TINY, "--epochs", "1", "--warmup_epochs", "0"]
    for nproc in (1, 2):
        for i in (1, 2):
            folder, start = out / f"{nproc}_{i}", time.monotonic()
            if way == "launch":
                code = run_ok([*argv, "--output_dir", folder], nproc=nproc).returncode
            else:
                code = ranks.run_ranks([*argv, "--output_dir", str(folder)], nproc=nproc, timeout=120).returncode
            print(f"{way}{' after training in-process' if trained else ''}, {nproc} process(es), run {i}: "
                  f"{time.monotonic() - start:.1f} s, exit {code}", flush=True)


def main(argv):
    if argv:
        with TemporaryDirectory() as tmp:
            measure(argv[0], "trained" in argv[1:], Path(tmp))
        return
    for way in WAYS:  # each in an interpreter of its own: a start method is chosen once per process
        subprocess.run([sys.executable, __file__, *way], check=False)


if __name__ == "__main__":
    main(sys.argv[1:])
