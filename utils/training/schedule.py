"""The optimizer, and the learning-rate schedule laid out in epochs: linear warmup, then cosine or step decay."""

import ast
import difflib
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, MultiStepLR, SequentialLR

from utils.models.timm_library import import_timm

NORMS = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm)


@dataclass(frozen=True)
class OptimizerOptions:
    """What the options ask of the optimizer, read from them once (utils/config/settings.py) and handed down; every
    field is its option's value."""

    name: str  # --optimizer: sgd, adamw or a timm.optim name
    lr: float  # for the global batch lr_scale_batch, when that is set
    lr_scale_batch: int
    batch_size: int  # a process's micro-batch, and
    grad_accum_steps: int  # the micro-batches of an optimizer step: with the process count, the global batch
    momentum: float
    nesterov: bool
    weight_decay: float
    norm_weight_decay: float
    bias_weight_decay: float
    layer_decay: float
    eps: float  # --opt_eps, --opt_betas, --opt_kwargs KEY=VALUE items
    betas: tuple
    kwargs: tuple


@dataclass(frozen=True)
class ScheduleOptions:
    """What the options ask of the LR schedule, in epochs (utils/config/settings.py)."""

    epochs: int
    warmup_epochs: float  # None: the default (warmup_epochs())
    warmup_start_factor: float
    kind: str  # --lr_schedule: cosine or step
    min_lr: float
    milestones: tuple  # --lr_milestones and --lr_gamma: step's
    gamma: float


def effective_lr(options, num_processes):
    """--lr, or with --lr_scale_batch N, --lr x global batch / N (the linear scaling rule); `options`:
    OptimizerOptions."""
    if options.lr_scale_batch is None:
        return options.lr
    return options.lr * options.batch_size * num_processes * options.grad_accum_steps / options.lr_scale_batch


def lr_notes(options, num_processes):
    """With --lr_scale_batch: the LR in force, for the start-up line and config.yaml."""
    if options.lr_scale_batch is None:
        return []
    batch = options.batch_size * num_processes * options.grad_accum_steps
    return [f"lr: {effective_lr(options, num_processes):g} in force (--lr {options.lr:g} is for a global batch of "
            f"{options.lr_scale_batch}; this run's is {batch})"]


def parameter_groups(model, options, layers=None):
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
    decay = {"weights": options.weight_decay, "norms": options.norm_weight_decay, "biases": options.bias_weight_decay}
    if not layers:
        return [{"params": by_layer.get(0, []), "weight_decay": decay[kind]} for kind, by_layer in kinds.items()]
    last = max(layers.values())
    return [{"params": by_layer[layer], "weight_decay": decay[kind], "lr_scale": options.layer_decay ** (last - layer)}
            for layer in sorted({layer for by_layer in kinds.values() for layer in by_layer})
            for kind, by_layer in kinds.items() if layer in by_layer]


def layer_decay_note(layers, rate):
    """The start-up line of --layer_decay: how many layers, and the LR multipliers of the first and the last."""
    last = max(layers.values())
    return (f"layer_decay {rate:g}: {last + 1} layers, LR x{rate ** last:.4g} in the first (the input side) "
            f"up to x1 in the last (the head)")


TORCH_OPTIMIZERS = ("sgd", "adamw")  # torch's own; every other --optimizer is timm.optim's (create_optimizer_v2)


def optimizer_names():
    names = import_timm("timm.optim").list_optimizers()
    return TORCH_OPTIMIZERS + tuple(n for n in names if n not in TORCH_OPTIMIZERS)


def opt_kwargs(options):
    """--opt_eps, --opt_betas and --opt_kwargs KEY=VALUE (a Python literal, else the text) as keyword arguments."""
    kwargs = {} if options.eps is None else {"eps": options.eps}
    if options.betas is not None:
        kwargs["betas"] = tuple(options.betas)
    for item in options.kwargs or ():
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


def _optimizer(groups, options, lr):
    groups = _with_lr(groups, lr)
    if options.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, **opt_kwargs(options))
    if options.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=options.momentum,
                               nesterov=options.nesterov and options.momentum > 0, **opt_kwargs(options))
    # Our groups as they are (timm's own bias/norm filter applies to a model, not to groups); `momentum` reaches
    # the optimizers that take one.
    return import_timm("timm.optim").create_optimizer_v2(groups, opt=options.name, lr=lr, momentum=options.momentum,
                                                         **opt_kwargs(options))


def build_optimizer(model, options, num_processes=1, layers=None):
    """SGD (Nesterov) or AdamW, torch's, or an optimizer of timm.optim by name (OptimizerOptions `options`), over
    parameter_groups, at effective_lr (scaled per layer with `layers`, --layer_decay: see parameter_groups)."""
    return _optimizer(parameter_groups(model, options, layers), options, effective_lr(options, num_processes))


def _check_optimizer(options, need):
    """The name (did-you-mean), the KEY=VALUE form, and the optimizer built once on a stand-in parameter, so that a
    keyword it does not take or a value it refuses is one line now rather than a traceback after start-up."""
    names = optimizer_names() if options.name not in TORCH_OPTIMIZERS else TORCH_OPTIMIZERS
    close = difflib.get_close_matches(options.name, names, n=3)
    need(options.name in names, "optimizer", "neither sgd, adamw nor a timm.optim name" +
         (f" (did you mean {', '.join(close)}?)" if close else ""))
    bad = [item for item in options.kwargs or () if not item.partition("=")[0] or "=" not in item]
    need(not bad, "opt_kwargs", f"{bad[0] if bad else ''!r}: give KEY=VALUE")
    try:
        _optimizer([torch.nn.Parameter(torch.zeros(2, 2))], options, 0.1 if options.lr == "auto" else options.lr)
    except (TypeError, ValueError, RuntimeError) as e:
        need(False, "optimizer", f"{options.name} with --opt_eps/--opt_betas/--opt_kwargs "
             f"{opt_kwargs(options)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


DEFAULT_WARMUP_EPOCHS = 1.0


def warmup_epochs(schedule):
    """--warmup_epochs, or by default 1 epoch, shortened to a fifth of training when that is less
    (a 1-epoch run warms up for 0.2 epochs instead of failing); `schedule`: ScheduleOptions."""
    if schedule.warmup_epochs is not None:
        return schedule.warmup_epochs
    return min(DEFAULT_WARMUP_EPOCHS, schedule.epochs / 5)


def build_lr_scheduler(optimizer, schedule, steps_per_epoch):
    """A scheduler to step once per optimizer step.

    Lengths are given in epochs and converted with this process's `steps_per_epoch`, so at the same
    point of training (same fraction of epochs) the LR is the same for any number of processes and
    any `grad_accum_steps`: only how many steps an epoch has changes (`schedule`: ScheduleOptions).
    """
    total_steps = schedule.epochs * steps_per_epoch
    # Rounded to whole steps; at least one step is left for the decay, even for a tiny run.
    warmup_steps = min(round(warmup_epochs(schedule) * steps_per_epoch), total_steps - 1)
    if schedule.kind == "cosine":
        decay = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=schedule.min_lr)
    else:
        milestones = [round(m * steps_per_epoch) - warmup_steps for m in schedule.milestones]
        decay = MultiStepLR(optimizer, milestones=milestones, gamma=schedule.gamma)
    if warmup_steps == 0:
        return decay
    # LinearLR's first value is start_factor * lr, never 0: the first step already learns something.
    warmup = LinearLR(optimizer, start_factor=schedule.warmup_start_factor, end_factor=1.0,
                      total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, decay], milestones=[warmup_steps])


def check_options(optimizer, schedule, need):
    """The optimizer (OptimizerOptions) and the LR schedule laid out in epochs (ScheduleOptions)."""
    for key, value in (("epochs", schedule.epochs), ("batch_size", optimizer.batch_size),
                       ("grad_accum_steps", optimizer.grad_accum_steps)):
        need(value == "auto" or value >= 1, key, "must be >= 1")
    need(optimizer.lr_scale_batch is None or optimizer.lr_scale_batch >= 1, "lr_scale_batch", "must be >= 1")
    for key, value in (("weight_decay", optimizer.weight_decay), ("norm_weight_decay", optimizer.norm_weight_decay),
                       ("bias_weight_decay", optimizer.bias_weight_decay), ("min_lr", schedule.min_lr)):
        need(value >= 0, key, "must be >= 0")
    need(optimizer.lr == "auto" or optimizer.lr > 0, "lr", "must be > 0")
    need(optimizer.layer_decay is None or 0 < optimizer.layer_decay <= 1, "layer_decay", "must be in (0, 1]")
    # One cosine floor for every layer would lift the slow layers' LR towards it: the floor of each would have to
    # scale with its layer, which torch's schedulers do not do.
    need(optimizer.layer_decay is None or schedule.min_lr == 0, "layer_decay", "takes --min_lr 0 only (the cosine "
         "floor would be the same for every layer, raising the LR of the first ones)")
    _check_optimizer(optimizer, need)
    need(0 <= optimizer.momentum < 1, "momentum", "must be in [0, 1)")
    need(0 < schedule.warmup_start_factor <= 1, "warmup_start_factor", "must be in (0, 1] (0 would waste the first "
         "step)")
    need(schedule.warmup_epochs is None or 0 <= schedule.warmup_epochs < schedule.epochs, "warmup_epochs",
         f"must be in [0, epochs={schedule.epochs})")
    warmup = warmup_epochs(schedule)
    need(optimizer.lr == "auto" or schedule.min_lr <= optimizer.lr, "min_lr", f"must not exceed lr={optimizer.lr}")
    need(schedule.gamma > 0, "lr_gamma", "must be > 0")
    if schedule.kind == "step":
        need(schedule.milestones is not None, "lr_milestones", "required with lr_schedule step")
        ms = schedule.milestones
        need(all(warmup < m < schedule.epochs for m in ms), "lr_milestones",
             f"each must lie after warmup ({warmup}) and before the end of training ({schedule.epochs})")
        need(all(a < b for a, b in zip(ms, ms[1:])), "lr_milestones", "must be strictly increasing")
