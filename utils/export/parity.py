"""An export checked against the model it came from, sample by sample over the whole validation split: both score
every sample of each process's shard, the results gathered exactly (utils/evaluation/scoring.py: the padding that
evens the shards dropped), so the figures are the same on any number of processes. Then their speed side by side on
this machine, at batch 1 and at a batch of 32, on validation pixels."""

import time

import numpy as np
import torch

from utils.evaluation.scoring import kept_rows, scored_batches

TIMED_BATCHES = (1, 32)


def compared(accelerator, loader, graph, runner, task, bad_files):
    """(the gathered (PyTorch probabilities, export probabilities, labels) of every valid validation sample, up to 32
    of this process's own pixels to time with). `graph`: the eval graph in eager PyTorch; `runner`: the export's."""
    kept = []

    @torch.no_grad()
    def score(batch):
        pixels = batch["pixel_values"]
        if len(kept) < TIMED_BATCHES[-1]:
            kept.extend(pixels[batch["valid"]].cpu()[:TIMED_BATCHES[-1] - len(kept)])
        eager = task.exported_probabilities(graph(pixels))
        exported = task.exported_probabilities(torch.from_numpy(runner(pixels.cpu().numpy())).to(pixels.device))
        return eager, exported, batch["labels"]

    eager, exported, labels, _ = kept_rows(list(scored_batches(accelerator, loader, score, bad_files)))
    return (eager, exported, labels), kept


def figures(task, eager, exported, labels, thresholds):
    """The parity figures: each model's score, the share of samples whose answers agree, the largest probability
    difference, and the samples that disagree (their positions among the valid samples, at most 20)."""
    agree = task.agree(eager, exported, thresholds)
    differ = (eager.double() - exported.double()).abs()
    return {"samples": len(labels), "scored": task.scored, "pytorch": task.score(eager, labels),
            "export": task.score(exported, labels), "agreement": float(agree.double().mean()) if len(agree) else 1.0,
            "disagreeing": int((~agree).sum()), "first_disagreeing": (~agree).nonzero().flatten()[:20].tolist(),
            "max_probability_difference": float(differ.max()) if len(differ) else 0.0}


def images_per_second(call, pixels, seconds):
    """How many images `call` answers a second, given batches of `pixels`, over at least `seconds` (and 3 calls),
    after one call to warm up."""
    call(pixels)
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        call(pixels)
        calls += 1
    return len(pixels) * calls / (time.perf_counter() - start)


def speeds(graph, runner, samples, seconds):
    """{batch: {"pytorch": images/s, "export": images/s}} at batch 1 and 32 (the samples repeated to fill it), each
    pair measured one after the other on the same pixels: eager PyTorch (inference mode) and the export."""
    if not samples:
        return {}
    stacked = torch.stack(samples)
    found = {}
    for batch in TIMED_BATCHES:
        pixels = stacked[torch.arange(batch) % len(stacked)]
        as_numpy = np.ascontiguousarray(pixels.numpy())

        def eager(x=pixels):
            with torch.inference_mode():
                graph(x)

        found[str(batch)] = {"pytorch": round(images_per_second(eager, pixels, seconds), 2),
                             "export": round(images_per_second(runner, as_numpy, seconds), 2)}
    return found
