"""The eval graph of a trained run, what every export holds: uint8 pixels (or a run of --bands: their raw values) in,
the run's normalisation and model, its outputs out (a single-label run's logits, divided by its --calibrate
temperature; a multi-label run's sigmoid probabilities)."""

import torch

from utils.evaluation.knn import KnnHead
from utils.run.trained import RunError, Tempered


def input_shape(inp):
    """One input of the eval graph: (C, H, W), or (C, T, H, W) for a video run's clips."""
    if inp.video:
        return (inp.channels, inp.frames, inp.image_size, inp.image_size)
    return (inp.channels, inp.val_crop_size, inp.val_crop_size)


class EvalGraph(torch.nn.Module):
    """uint8 (N, C, H, W) pixels, or (N, C, T, H, W) clips -> what the run's `task` exports (a single-label run's
    logits, a multi-label run's probabilities, each class's own; default: logits): the run's normalisation (the
    arithmetic of utils/data/transforms/batch.py) and the model, as one graph to export. A run on files of their own
    channels and bits takes their raw values, the run's bands, as float32 (what utils/data/decoding/bands.py reads),
    divided by its pixel_max in the graph."""

    def __init__(self, model, inp, task=None):
        super().__init__()
        self.model, self.pixel_max = model, inp.pixel_max
        self.output = task.exported_output if task is not None else None
        mean, std = inp.mean_std or ((0.0,) * 3, (1.0,) * 3)
        shape = (1, -1) + (1,) * (3 if inp.video else 2)
        self.register_buffer("mean", torch.tensor(mean).view(shape))
        self.register_buffer("std", torch.tensor(std).view(shape))

    def forward(self, pixels):
        scaled = pixels.float() / 255 if self.pixel_max is None else pixels / self.pixel_max
        logits = self.model(scaled.sub(self.mean).div(self.std))
        return logits if self.output is None else self.output(logits)


def example_pixels(inp, count, seed):
    """`count` random inputs of the eval graph: uint8 pixels, or raw values up to the run's pixel_max."""
    generator = torch.Generator().manual_seed(seed)
    if inp.pixel_max is None:
        return torch.randint(0, 256, (count, *input_shape(inp)), dtype=torch.uint8, generator=generator)
    return (torch.rand((count, *input_shape(inp)), generator=generator) * inp.pixel_max).round()


def refuse_knn(model):
    """A RunError for a --probe knn run's model: its vote over a memory bank is not a graph."""
    if any(isinstance(module, KnnHead) for module in model.modules()):
        raise RunError("a --probe knn run votes over its memory bank, not a graph an export holds; export a --probe "
                       "linear run")


def temperature_of(model):
    """The --calibrate temperature load_run put in `model` (1.0: none)."""
    return model.temperature if isinstance(model, Tempered) else 1.0
