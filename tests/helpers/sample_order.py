"""Record each rank's training sample order, through the loader code train_classification.py uses.

    accelerate launch ... tests/helpers/sample_order.py OUT_DIR SEED N_SAMPLES BATCH EPOCH [EPOCH ...]

Writes OUT_DIR/rank_<R>.json: {"<epoch>": [sample indices in the order this rank saw them]}.
"""

import json
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from train_classification import build_accelerator  # noqa: E402
from utils.config import parse_args  # noqa: E402
from utils.data import build_dataloaders  # noqa: E402


class IndexDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"pixel_values": torch.zeros(1), "labels": i}


def main():
    out, seed, n, batch, *epochs = sys.argv[1:]
    args = parse_args(["--seed", seed, "--batch_size", batch])
    accelerator = build_accelerator(args)
    train_loader, _ = build_dataloaders(accelerator, IndexDataset(int(n)), IndexDataset(3), int(batch), 0)
    orders = {}
    for epoch in map(int, epochs):
        train_loader.set_epoch(epoch)  # exactly what train_one_epoch does
        orders[epoch] = [i for b in train_loader for i in b["labels"].tolist()]
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank_{accelerator.process_index}.json").write_text(json.dumps(orders))


if __name__ == "__main__":
    main()
