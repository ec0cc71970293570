"""--probe linear: linear classifiers of a frozen backbone's cached features (utils/run/probe.py caches them), a
sweep of learning rates and weight decays trained together, the one with the best validation top-1 kept, as DINOv2's
linear evaluation chooses; --probe knn is scored in utils/evaluation/knn.py.

Every process trains the same heads on the same features in the same order (a generator seeded from --seed), so they
agree without a collective; the main process's chosen head is broadcast all the same."""

import math
from dataclasses import dataclass

import torch

LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)  # --probe_lrs' default: SGD on raw features
WEIGHT_DECAYS = (0.0, 1e-4, 1e-3)  # --probe_weight_decays'
MOMENTUM = 0.9


@dataclass(frozen=True)
class ProbeOptions:
    """What the options ask of a probe, read from them once (utils/config/settings.py)."""

    probe: str  # --probe: linear or knn (None: the model trains)
    knn_k: int  # --knn_k: the neighbours that vote
    knn_temperature: float  # --knn_temperature: a neighbour's vote is exp(cosine similarity / T)
    probe_lrs: tuple  # --probe_lrs, --probe_weight_decays: the linear heads' sweep, one head each pair
    probe_weight_decays: tuple


# What a probe leaves alone, refused with it rather than ignored: the model's training, its augmentation and loss, the
# checkpoints of its steps.
NOT_WITH_PROBE = {
    **dict.fromkeys(("lr", "optimizer", "momentum", "nesterov", "weight_decay", "norm_weight_decay",
                     "bias_weight_decay", "opt_eps", "opt_betas", "opt_kwargs", "lr_schedule", "lr_milestones",
                     "lr_gamma", "min_lr", "warmup_epochs", "warmup_start_factor", "lr_scale_batch", "layer_decay",
                     "global_batch_size", "grad_accum_steps", "steps_per_epoch", "max_train_steps", "clip_grad_norm",
                     "skip_nonfinite_steps", "val_every", "keep_last", "early_stop_min_delta"),
                    "sets the model's training; --probe linear sweeps --probe_lrs and --probe_weight_decays"),
    **dict.fromkeys(("auto_augment", "rand_augment", "random_erase", "mixup_alpha", "cutmix_alpha", "mix_prob",
                     "ra_reps", "sampler", "progressive_resize", "train_crop_size", "train_crop_scale",
                     "train_crop_ratio"),
                    "augments training images; a probe's features are computed with the eval transform"),
    **dict.fromkeys(("label_smoothing", "class_weights", "logit_adjust", "focal_gamma", "bce_loss", "teacher"),
                    "sets the model's loss; a probe trains nothing of the model"),
    **dict.fromkeys(("lora", "freeze_backbone", "model_ema", "drop_path", "dropout", "sync_bn", "grad_checkpointing",
                     "compile", "eval_only", "lr_find", "keep_best", "early_stop", "calibrate", "tta",
                     "checkpoint_every_steps", "save_every", "decode_on_device", "streaming"),
                    "is not available with --probe (the backbone is frozen and its features cached once)"),
}


def check_options(options, need, defaults):
    """Its own options; the combinations with the others are utils/config/checks.py's."""
    knn, linear = options.probe == "knn", options.probe == "linear"
    for key in ("knn_k", "knn_temperature"):
        need(knn or getattr(options, key) == defaults[key], key, "sets the kNN probe: add --probe knn")
    for key in ("probe_lrs", "probe_weight_decays"):
        need(linear or tuple(getattr(options, key)) == tuple(defaults[key]), key, "sets the linear probe's sweep: "
             "add --probe linear")
    need(options.knn_k >= 1, "knn_k", "must be >= 1")
    need(options.knn_temperature > 0, "knn_temperature", "must be > 0")
    need(all(lr > 0 for lr in options.probe_lrs), "probe_lrs", "must each be > 0")
    need(all(wd >= 0 for wd in options.probe_weight_decays), "probe_weight_decays", "must each be >= 0")


@dataclass(frozen=True)
class Head:
    """One linear classifier of the sweep: weight (classes, dim) and bias as nn.Linear holds them, and what chose it."""

    weight: torch.Tensor
    bias: torch.Tensor
    lr: float
    weight_decay: float
    val_top1: float


def fit_linear(train, labels, val, val_labels, classes, options, epochs, batch_size, seed, device="cpu"):
    """(the chosen Head, every head's (lr, weight decay, val top-1) in sweep order, optimizer steps): one linear head
    per (lr, weight decay) of `options` (ProbeOptions), trained together on features `train` (n, dim) with class indices
    `labels` by SGD with momentum and a cosine schedule over `epochs` of batches of `batch_size`, shuffled by a
    generator seeded from `seed`; the best top-1 on `val` wins, the first in sweep order on a tie. On `device`, the
    features moved there once."""
    sweep = [(lr, wd) for lr in options.probe_lrs for wd in options.probe_weight_decays]
    train, labels, val, val_labels = (t.to(device) for t in (train, labels, val, val_labels))
    heads = len(sweep)
    weight = torch.zeros(heads, train.shape[1], classes, device=device, requires_grad=True)  # convex: zeros start it
    bias = torch.zeros(heads, 1, classes, device=device, requires_grad=True)
    lr, decay = (torch.tensor([pair[i] for pair in sweep], device=device).view(heads, 1, 1) for i in (0, 1))
    momentum = [torch.zeros_like(weight), torch.zeros_like(bias)]
    steps = epochs * math.ceil(len(train) / batch_size)
    generator, step = torch.Generator().manual_seed(seed), 0
    for _ in range(epochs):
        for rows in torch.randperm(len(train), generator=generator).to(device).split(batch_size):
            logits = torch.baddbmm(bias, train[rows].expand(heads, -1, -1), weight)  # (heads, rows, classes)
            # Each head's mean loss, summed: every head's gradient is its own loss's.
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[rows].repeat(heads),
                                                     reduction="sum") / len(rows)
            weight.grad = bias.grad = None
            loss.backward()
            # torch.optim.SGD's update (momentum, no dampening; decay on the weight, not the bias) for every head at
            # once: with an optimizer a head needs two parameter groups of its own, and a step over 54 of them costs
            # as much Python as the heads' arithmetic. Cosine from each head's LR to 0.
            scale = 0.5 * (1 + math.cos(math.pi * step / steps))
            with torch.no_grad():
                for value, buffer, grad in ((weight, momentum[0], weight.grad + decay * weight),
                                            (bias, momentum[1], bias.grad)):
                    buffer.mul_(MOMENTUM).add_(grad)
                    value.sub_(lr * scale * buffer)
            step += 1
    with torch.no_grad():
        scores = ((torch.baddbmm(bias, val.expand(heads, -1, -1), weight).argmax(2) == val_labels).float().mean(1)
                  .tolist() if len(val) else [0.0] * heads)
    best = max(range(heads), key=lambda i: (scores[i], -i))
    chosen = Head(weight[best].detach().T.contiguous().cpu(), bias[best, 0].detach().cpu(), *sweep[best], scores[best])
    return chosen, [(lr, wd, score) for (lr, wd), score in zip(sweep, scores)], steps

def head_logits(features, weight, bias):
    """Logits of (dim, classes) `weight` and `bias` on `features`."""
    return features @ weight + bias
