"""The optimizer, and the learning-rate schedule laid out in epochs: linear warmup, then cosine or step decay."""

import ast
import difflib

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, MultiStepLR, SequentialLR

from utils.core.errors import at_least

NORMS = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm)


def effective_lr(args, num_processes):
    """--lr, or with --lr_scale_batch N, --lr x global batch / N (the linear scaling rule)."""
    if args.lr_scale_batch is None:
        return args.lr
    return args.lr * args.batch_size * num_processes * args.grad_accum_steps / args.lr_scale_batch


def lr_notes(args, num_processes):
    """With --lr_scale_batch: the LR in force, for the start-up line and config.yaml."""
    if args.lr_scale_batch is None:
        return []
    batch = args.batch_size * num_processes * args.grad_accum_steps
    return [f"lr: {effective_lr(args, num_processes):g} in force (--lr {args.lr:g} is for a global batch of "
            f"{args.lr_scale_batch}; this run's is {batch})"]


def parameter_groups(model, args, layers=None):
    """Weight decay per kind of parameter: --weight_decay on weights, --norm_weight_decay on the
    normalisation layers' parameters, --bias_weight_decay on the other biases (both 0 by default, as
    in timm and the torchvision references). Frozen parameters (--freeze_backbone) are left out.

    With `layers` ({parameter name: layer}, --layer_decay), one group per kind and layer, each with its
    `lr_scale`, RATE^(last layer - layer): the head learns at the LR, each layer before it RATE times slower."""
    kinds = {"weights": {}, "norms": {}, "biases": {}}  # kind -> layer -> parameters
    for prefix, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                kind = "norms" if isinstance(module, NORMS) else "biases" if name == "bias" else "weights"
                layer = layers[f"{prefix}.{name}" if prefix else name] if layers else 0
                kinds[kind].setdefault(layer, []).append(p)
    decay = {"weights": args.weight_decay, "norms": args.norm_weight_decay, "biases": args.bias_weight_decay}
    if not layers:
        return [{"params": by_layer.get(0, []), "weight_decay": decay[kind]} for kind, by_layer in kinds.items()]
    last = max(layers.values())
    return [{"params": by_layer[layer], "weight_decay": decay[kind], "lr_scale": args.layer_decay ** (last - layer)}
            for layer in sorted({layer for by_layer in kinds.values() for layer in by_layer})
            for kind, by_layer in kinds.items() if layer in by_layer]


def layer_decay_note(layers, rate):
    """The start-up line of --layer_decay: how many layers, and the LR multipliers of the first and the last."""
    last = max(layers.values())
    return (f"layer_decay {rate:g}: {last + 1} layers, LR x{rate ** last:.4g} in the first (the input side) "
            f"up to x1 in the last (the head)")


TORCH_OPTIMIZERS = ("sgd", "adamw")  # torch's own; every other --optimizer is timm.optim's (create_optimizer_v2)


def optimizer_names():
    import timm.optim

    return TORCH_OPTIMIZERS + tuple(n for n in timm.optim.list_optimizers() if n not in TORCH_OPTIMIZERS)


def opt_kwargs(args):
    """--opt_eps, --opt_betas and --opt_kwargs KEY=VALUE (a Python literal, else the text) as keyword arguments."""
    kwargs = {} if args.opt_eps is None else {"eps": args.opt_eps}
    if args.opt_betas is not None:
        kwargs["betas"] = tuple(args.opt_betas)
    for item in args.opt_kwargs or ():
        key, _, value = item.partition("=")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    return kwargs


def _with_lr(groups, lr):
    """Each group's own LR where it has an lr_scale (--layer_decay); the schedule then scales each group's alike."""
    return [{**{k: v for k, v in g.items() if k != "lr_scale"}, "lr": lr * g["lr_scale"]}
            if isinstance(g, dict) and "lr_scale" in g else g for g in groups]


def _optimizer(groups, args, lr):
    groups = _with_lr(groups, lr)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=lr, **opt_kwargs(args))
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=args.momentum, nesterov=args.nesterov and args.momentum > 0,
                               **opt_kwargs(args))
    from timm.optim import create_optimizer_v2

    # Our groups as they are (timm's own bias/norm filter applies to a model, not to groups); `momentum` reaches
    # the optimizers that take one.
    return create_optimizer_v2(groups, opt=args.optimizer, lr=lr, momentum=args.momentum, **opt_kwargs(args))


def build_optimizer(model, args, num_processes=1, layers=None):
    """SGD (Nesterov) or AdamW, torch's, or an optimizer of timm.optim by name, over parameter_groups, at
    effective_lr (scaled per layer with `layers`, --layer_decay: see parameter_groups)."""
    return _optimizer(parameter_groups(model, args, layers), args, effective_lr(args, num_processes))


def _check_optimizer(args, need):
    """The name (did-you-mean), the KEY=VALUE form, and the optimizer built once on a stand-in parameter, so that a
    keyword it does not take or a value it refuses is one line now rather than a traceback after start-up."""
    names = optimizer_names() if args.optimizer not in TORCH_OPTIMIZERS else TORCH_OPTIMIZERS
    close = difflib.get_close_matches(args.optimizer, names, n=3)
    need(args.optimizer in names, "optimizer", "neither sgd, adamw nor a timm.optim name" +
         (f" (did you mean {', '.join(close)}?)" if close else ""))
    bad = [item for item in args.opt_kwargs or () if not item.partition("=")[0] or "=" not in item]
    need(not bad, "opt_kwargs", f"{bad[0] if bad else ''!r}: give KEY=VALUE")
    try:
        _optimizer([torch.nn.Parameter(torch.zeros(2, 2))], args, args.lr)
    except (TypeError, ValueError, RuntimeError) as e:
        need(False, "optimizer", f"{args.optimizer} with --opt_eps/--opt_betas/--opt_kwargs "
             f"{opt_kwargs(args)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


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


def check_options(args, need):
    """The optimizer and the LR schedule, laid out in epochs."""
    at_least(args, need, ("epochs", "batch_size", "grad_accum_steps"), 1)
    need(args.lr_scale_batch is None or args.lr_scale_batch >= 1, "lr_scale_batch", "must be >= 1")
    at_least(args, need, ("weight_decay", "norm_weight_decay", "bias_weight_decay", "min_lr"), 0)
    need(args.max_train_steps is None or args.max_train_steps >= 0, "max_train_steps", "must be >= 0")
    need(args.lr > 0, "lr", "must be > 0")
    need(args.layer_decay is None or 0 < args.layer_decay <= 1, "layer_decay", "must be in (0, 1]")
    # One cosine floor for every layer would lift the slow layers' LR towards it: the floor of each would have to
    # scale with its layer, which torch's schedulers do not do.
    need(args.layer_decay is None or args.min_lr == 0, "layer_decay", "takes --min_lr 0 only (the cosine floor "
         "would be the same for every layer, raising the LR of the first ones)")
    need(args.layer_decay is None or not args.freeze_backbone, "layer_decay", "has nothing to decay with "
         "--freeze_backbone (only the head trains)")
    _check_optimizer(args, need)
    need(0 <= args.momentum < 1, "momentum", "must be in [0, 1)")
    need(0 <= args.label_smoothing < 1, "label_smoothing", "must be in [0, 1)")
    need(args.clip_grad_norm is None or args.clip_grad_norm > 0, "clip_grad_norm", "must be > 0")
    need(0 < args.warmup_start_factor <= 1, "warmup_start_factor", "must be in (0, 1] (0 would waste the first step)")
    need(args.warmup_epochs is None or 0 <= args.warmup_epochs < args.epochs, "warmup_epochs",
         f"must be in [0, epochs={args.epochs})")
    warmup = warmup_epochs(args)
    need(args.min_lr <= args.lr, "min_lr", f"must not exceed lr={args.lr}")
    need(args.lr_gamma > 0, "lr_gamma", "must be > 0")
    if args.lr_schedule == "step":
        need(args.lr_milestones is not None, "lr_milestones", "required with lr_schedule step")
        ms = args.lr_milestones
        need(all(warmup < m < args.epochs for m in ms), "lr_milestones",
             f"each must lie after warmup ({warmup}) and before the end of training ({args.epochs})")
        need(all(a < b for a, b in zip(ms, ms[1:])), "lr_milestones", "must be strictly increasing")
    need(0 < args.model_ema_decay < 1, "model_ema_decay", "must be in (0, 1)")
    need(args.model_ema_steps >= 1, "model_ema_steps", "must be >= 1")
