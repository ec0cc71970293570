"""Print the intra-op thread count train_classification.py would train with on the CPU."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from utils.core.threads import use_all_cores  # noqa: E402

print(f"threads={use_all_cores(torch.device('cpu'))}")
