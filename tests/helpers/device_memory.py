"""Run train_classification.py as on a device that fits micro-batches of at most LIMIT samples on each rank, for the
tests of --batch_size auto on CPUs (where nothing runs out of memory).

    python tests/helpers/device_memory.py LIMITS [train_classification.py options...]
    python tests/helpers/device_memory.py LIMITS WHEN SIGNAL TARGET RANK [options...]   # and tests/helpers/signal_at.py

LIMITS: one a rank, comma-separated: a number (a try of a larger micro-batch raises torch.OutOfMemoryError, as CUDA
does), "raise" (every try raises a ValueError: a probe that breaks), "never" (a try at all is a ValueError: a run
that must not probe, such as a resumed one), "any" (tries run as they are). Ranks forked by tests/ranks.py take it
as target "helpers.device_memory:main".
"""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # helpers.signal_at
import train_classification  # noqa: E402
from utils.run import job  # noqa: E402


def limited(limit):
    """job.trial_steps, its tries failing as a device whose memory holds `limit` does."""
    original = job.trial_steps

    def trial_steps(*args, **kwargs):
        attempt, release = original(*args, **kwargs)

        def attempt_within(micro):
            if limit == "never":
                raise ValueError("a try of the probe, which this run must not make")
            if limit == "raise":
                raise ValueError("a kernel that breaks")
            if limit != "any" and micro > int(limit):
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {micro} samples' activations")
            attempt(micro)
        return attempt_within, release
    return trial_steps


def main(argv=None):
    limits, *argv = sys.argv[1:] if argv is None else argv
    job.trial_steps = limited(limits.split(",")[int(os.environ.get("RANK", "0"))])
    if argv and argv[0].split(":")[0] in ("step", "save"):
        from helpers import signal_at

        signal_at.main(argv)
    else:
        train_classification.main(argv)


if __name__ == "__main__":
    main()
