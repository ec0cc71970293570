"""What the forkserver of tests/ranks.py imports and warms once, so that every forked rank starts warm.

Only imports and work without torch compute: a forkserver that ran torch's OpenMP thread pool would hand
its children a pool whose threads do not exist in them (they hang at their first parallel region).
timm (conftest.SMALL_MODEL's library) as the script imports it, without wandb: wandb's media folder, made at its
import, would be one folder for every rank, removed by the first rank to exit (a rank that reports to wandb imports
it itself).
"""

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402,F401
import torchvision  # noqa: E402,F401
from helpers import fsdp_on_cpu, node_local, sample_order, signal_at  # noqa: E402,F401
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import evaluate  # noqa: E402,F401  (what --metrics loads its modules with)
import train_classification  # noqa: E402,F401  (accelerate, datasets and every utils module)
from utils.models.timm_library import import_timm  # noqa: E402

import_timm("timm.models")

_figure = Figure(figsize=(2, 2), layout="constrained")  # matplotlib's fonts, read at the first text drawn
_figure.subplots().set(title="warm", xlabel="x")
FigureCanvasAgg(_figure).draw()
