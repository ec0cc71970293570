"""The optimizer, and the learning-rate schedule laid out in epochs: linear warmup, then cosine or step decay."""

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, MultiStepLR, SequentialLR


def build_optimizer(model, args):
    """SGD (Nesterov) or AdamW."""
    # No weight decay on norms and biases, as in timm and the torchvision references.
    params = [p for p in model.parameters() if p.requires_grad]  # --freeze_backbone leaves the head only
    decay = [p for p in params if p.ndim > 1]
    no_decay = [p for p in params if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=args.lr)
    return torch.optim.SGD(groups, lr=args.lr, momentum=args.momentum, nesterov=args.nesterov and args.momentum > 0)


DEFAULT_WARMUP_EPOCHS = 1.0


def warmup_epochs(args):
    """--warmup_epochs, or by default 1 epoch, shortened to a fifth of training when that is less
    (a 1-epoch run warms up for 0.2 epochs instead of failing)."""
    if args.warmup_epochs is not None:
        return args.warmup_epochs
    return min(DEFAULT_WARMUP_EPOCHS, args.epochs / 5)


def build_lr_scheduler(optimizer, args, steps_per_epoch):
    """A scheduler to step once per optimizer step.

    Lengths are given in epochs and converted with this process's `steps_per_epoch`, so at the same
    point of training (same fraction of epochs) the LR is the same for any number of processes and
    any `grad_accum_steps`: only how many steps an epoch has changes.
    """
    total_steps = args.epochs * steps_per_epoch
    # Rounded to whole steps; at least one step is left for the decay, even for a tiny run.
    warmup_steps = min(round(warmup_epochs(args) * steps_per_epoch), total_steps - 1)
    if args.lr_schedule == "cosine":
        decay = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=args.min_lr)
    else:
        milestones = [round(m * steps_per_epoch) - warmup_steps for m in args.lr_milestones]
        decay = MultiStepLR(optimizer, milestones=milestones, gamma=args.lr_gamma)
    if warmup_steps == 0:
        return decay
    # LinearLR's first value is start_factor * lr, never 0: the first step already learns something.
    warmup = LinearLR(optimizer, start_factor=args.warmup_start_factor, end_factor=1.0, total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, decay], milestones=[warmup_steps])
