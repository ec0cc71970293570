"""Whether a model's probabilities can be trusted: the expected calibration error (ECE) of its top-class confidence,
from the validation pass's gathered per-sample results (no pass of its own).

The usual definition (Naeini et al. 2015; Guo et al. 2017, "On Calibration of Modern Neural Networks"): the samples
fall into BINS equal-width bins of their top-class probability, (0, 1/B], (1/B, 2/B], ...; in each bin the gap between
its accuracy and its mean confidence, weighed by the bin's share of the samples:

    ECE = sum over bins b of |b| / N * |accuracy(b) - confidence(b)|

15 bins, as Guo et al. and torchmetrics' default use. --calibrate fits Guo et al.'s temperature scaling: one T > 0,
logits / T, chosen to minimise the validation NLL (argmax, hence accuracy, unchanged); its figures after are
cross-fitted, each half of the split scored with the T fitted on the other half."""

import torch
import torch.nn.functional as F

from utils.evaluation.scoring import kept_positions, kept_rows, scored_batches

BINS = 15


def calibration_bins(confidence, correct, bins=BINS):
    """Per bin (equal width over (0, 1]): its sample count, mean confidence and accuracy (None for an empty bin)."""
    confidence, correct = confidence.double(), correct.double()
    # bin b holds (b / B, (b + 1) / B]; a confidence of exactly 0 (impossible for a softmax maximum) joins bin 0
    which = (confidence * bins).ceil().long().clamp(1, bins) - 1
    counts = torch.bincount(which, minlength=bins)
    conf_sums = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, confidence)
    hit_sums = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, correct)
    return [{"count": int(n), "confidence": float(c / n) if n else None, "accuracy": float(h / n) if n else None}
            for n, c, h in zip(counts.tolist(), conf_sums, hit_sums)]


def expected_calibration_error(bins):
    """ECE of calibration_bins' bins: their accuracy-confidence gaps weighed by their share of the samples."""
    total = sum(b["count"] for b in bins)
    return sum(b["count"] / total * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"]) if total else 0.0


def fit_temperature(logits, labels):
    """The T > 0 that minimises the mean NLL of softmax(logits / T): LBFGS on log T, in float64."""
    logits = logits.double()
    log_t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_t.detach().exp())


def nll_and_ece(logits, labels, temperature=1.0):
    """(mean NLL, ECE) of softmax(logits / temperature)."""
    p = (logits.double() / temperature).softmax(dim=1)
    confidence, predicted = p.max(dim=1)
    nll = float(F.cross_entropy(logits.double() / temperature, labels))
    return nll, expected_calibration_error(calibration_bins(confidence, predicted == labels))


@torch.no_grad()
def validation_logits(job, model):
    """Every validation sample's logits, label and index in the validation split, gathered from every process (each
    sample once)."""
    job.share_buffers(only=model)
    model.eval()

    def score(batch):
        return job.task.outputs(model, job.inputs(batch["pixel_values"])).float(), batch["labels"]

    batches = list(scored_batches(job.accelerator, job.val_loader, score, job.bad_images))
    logits, labels, _ = kept_rows(batches)
    return logits, labels, kept_positions(batches)


def cross_fitted(logits, labels, positions):
    """(the temperatures fitted on each half, the NLL and ECE of every sample scaled by the temperature fitted on the
    other half): figures of samples the temperature was not fitted on. The halves are the samples at even and at odd
    places of the split, so a split sorted by class (folders) gives each half its share of every class."""
    halves = [positions % 2 == parity for parity in (0, 1)]
    if not all(half.any() for half in halves):  # a single sample: nothing to hold out
        return None, (None, None)
    fitted = [fit_temperature(logits[half], labels[half]) for half in halves]
    other = torch.where(halves[0], fitted[1], fitted[0]).double()[:, None]  # each sample's held-out temperature
    return fitted, nll_and_ece(logits, labels, other)


def calibrate(job, figures):
    """--calibrate: the temperature of the weights model/ holds (the EMA's with --model_ema), fitted on the validation
    split's logits (a pass of its own), kept in model/; the NLL and ECE before and after go into `figures`, the after
    cross-fitted (each half of the split scaled by the temperature fitted on the other half: held out, not scored on
    what it was fitted to). The same figures on every process: each fits the same gathered logits. Returns T."""
    logits, labels, positions = validation_logits(job, job.ema.module if job.ema is not None else job.model)
    with torch.enable_grad():
        temperature = fit_temperature(logits, labels)
        halves, (nll_t, ece_t) = cross_fitted(logits, labels, positions)
    nll, ece = nll_and_ece(logits, labels)
    figures.update(temperature=temperature, temperature_halves=halves, val_nll_uncalibrated=nll,
                   val_nll_calibrated=nll_t, val_ece_uncalibrated=ece, val_ece_calibrated=ece_t)
    held_out = (f"held out (each half of the split scaled by the T fitted on the other: {halves[0]:.4f}, "
                f"{halves[1]:.4f}): NLL {nll:.4f} -> {nll_t:.4f}, ECE {ece:.4f} -> {ece_t:.4f}" if halves else
                "one sample: no held-out figures")
    job.accelerator.print(f"calibration: temperature {temperature:.4f} fitted on the {len(labels)} validation samples "
                          f"(kept in model/); {held_out}")
    return temperature
