"""Record each rank's training sample order, through the loader code train_classification.py uses.

    accelerate launch ... tests/helpers/sample_order.py OUT_DIR SEED N_SAMPLES BATCH [ra=N] [skip=K] [balanced=P]
        EPOCH [EPOCH ...]
    run_ranks([OUT_DIR, SEED, ...], target="helpers.sample_order:main")     # forked ranks, tests/ranks.py

Writes OUT_DIR/rank_<R>.json: {"<epoch>": [sample keys in the order this rank saw them]}; with ra=N,
the repeated augmentation sampler's (keys past N_SAMPLES are copies); with balanced=P, --sampler balanced's with
--sampler_power P over the classes of `long_tail` (two thirds of the samples in class 0, the last 3 in class 2, the
rest class 1: weights from utils/training/balance.py); with skip=K, also
"<epoch>:resumed": what a run resumed after K batches of the epoch sees, through skip_first_batches
as train_one_epoch uses it.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from utils.config.options import parse  # noqa: E402
from utils.core.seeding import spread  # noqa: E402
from utils.data.loading.loaders import build_dataloaders  # noqa: E402
from utils.run.accelerator import build_accelerator  # noqa: E402
from utils.evaluation.tasks import task_for  # noqa: E402
from utils.training.balance import sample_weights  # noqa: E402


def long_tail(n):
    """The class of each of n samples: 0 for the first two thirds, 2 for the last 3, 1 between."""
    return [0 if i < n * 2 // 3 else 2 if i >= n - 3 else 1 for i in range(n)]


class IndexDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"pixel_values": torch.zeros(1), "labels": i}

    def set_epoch(self, epoch):
        """No augmentation to seed."""


def main(argv=None):
    out, seed, n, batch, *rest = sys.argv[1:] if argv is None else argv
    options = dict(a.split("=") for a in rest if "=" in a)
    epochs = [int(a) for a in rest if "=" not in a]
    settings = parse(["--seed", seed, "--batch_size", batch])
    accelerator = build_accelerator(settings)
    weights = None
    if "balanced" in options:
        labels = long_tail(int(n))
        weights = sample_weights(task_for(False, len(np.bincount(labels))), labels, np.bincount(labels),
                                 float(options["balanced"]))
    train_loader, _ = build_dataloaders(accelerator, IndexDataset(int(n)), IndexDataset(3), int(batch), 0,
                                        ra_reps=int(options.get("ra", 1)), seed=spread(settings.data.seed),
                                        weights=weights)
    orders = {}
    for epoch in epochs:
        orders[epoch] = [i for b in train_loader.batches(epoch) for i in b["labels"].tolist()]  # as training reads
        if "skip" in options:
            resumed = train_loader.batches(epoch, int(options["skip"]))
            orders[f"{epoch}:resumed"] = [i for b in resumed for i in b["labels"].tolist()]
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank_{accelerator.process_index}.json").write_text(json.dumps(orders))


if __name__ == "__main__":
    main()
