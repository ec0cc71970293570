"""--lora: low-rank adapters (LoRA) on a model's layers through peft (LoraConfig, inject_adapter_in_model), the model
left as the script built it otherwise; only the adapters and the classifier train. And the model with its adapters
merged into the weights (`merged`): an ordinary model of its library, with its library's parameter names, which is
what every weights file a run leaves for its users holds (model.safetensors, model_ema.safetensors, model/, best/).

A checkpoint holds what trains (the adapters, the classifier, the buffers) and not the frozen weights, which a resumed
run builds again from the same options (--pretrained, --init_from): `without_frozen` takes them out of what is saved,
`frozen_fingerprint` (recorded in the checkpoint) tells the resumed run whether it built the same ones.

peft is imported only when --lora is given (it is in requirements-models.txt)."""

import copy
from dataclasses import dataclass

import torch

from utils.core.io import write_bytes_atomic
from utils.models.errors import ModelError
from utils.models.weights import tensors_sha256


@dataclass(frozen=True)
class LoraOptions:
    rank: int  # --lora; 0: no adapters
    alpha: float  # --lora_alpha; None: the rank (a scale of 1)
    dropout: float  # --lora_dropout
    targets: tuple  # --lora_targets: layer names (a name, or the end of one after a dot); None: the library's


def add_lora(model, options, library, classifier_params, log=print):
    """Adapters of `options` (LoraOptions) on `model`'s target layers (`library`'s default targets unless named);
    every parameter frozen but the adapters' and `classifier_params` (the head, trained whole). Returns `model`."""
    try:
        import peft
        from peft.tuners.tuners_utils import check_target_module_exists
    except ImportError:
        raise ModelError("lora: needs peft, which is not installed: pip install -r requirements-models.txt (or pip "
                         "install peft)") from None
    targets = list(options.targets) if options.targets else library.lora_targets(model)
    if not targets:
        raise ModelError(f"lora: {library.name} {type(model).__name__} has no default layers to adapt here (attention "
                         f"layers of timm, transformers and torchvision ViTs); name them with --lora_targets (Linear "
                         f"or Conv layers, e.g. --lora_targets layer4.0.conv1 layer4.0.conv2)")
    config = peft.LoraConfig(r=options.rank, lora_alpha=options.alpha or options.rank, lora_dropout=options.dropout,
                             target_modules=targets, bias="none")
    head = {name for name, module in model.named_modules()
            if any(p is q for p in module.parameters(recurse=False) for q in classifier_params)}
    if hit := sorted(name for name in head if check_target_module_exists(config, name)):
        raise ModelError(f"lora: {hit[0]} is the classifier, trained whole; leave it out of --lora_targets")
    frozen = list(model.parameters())
    try:
        peft.inject_adapter_in_model(config, model)
    except (ValueError, TypeError) as e:
        raise ModelError(f"lora: {str(e).splitlines()[0][:300]}; name other layers with --lora_targets") from None
    attention = [name for name, module in model.named_modules()
                 if isinstance(module, peft.tuners.lora.LoraLayer) and isinstance(module.get_base_layer(),
                                                                                  torch.nn.MultiheadAttention)]
    if attention:  # peft adapts it by swapping its weights around each call: not merged back into a plain model
        raise ModelError(f"lora: {attention[0]} is torch's MultiheadAttention, whose adapters are not merged back "
                         f"into plain weights here; adapt the Linear layers around it (a torchvision ViT's mlp.0, "
                         f"mlp.3)")
    trainable = {id(p) for p in classifier_params}
    for p in frozen:
        p.requires_grad_(id(p) in trainable)
    adapted = [name for name, module in model.named_modules() if isinstance(module, peft.tuners.lora.LoraLayer)]
    counts = [sum(p.numel() for p in model.parameters() if p.requires_grad), sum(p.numel() for p in model.parameters())]
    log(f"lora: rank {options.rank}, alpha {config.lora_alpha:g} on {len(adapted)} layers ({_examples(adapted)}); "
        f"trainable parameters {counts[0]:,} of {counts[1]:,} ({100 * counts[0] / counts[1]:.2f} %: adapters and "
        f"classifier)")
    return model


def merged(model):
    """`model` with its adapters merged into the weights they adapt and taken out (a copy; `model` itself when it has
    none): the plain model, whose logits equal the adapted model's up to float rounding."""
    if not any(type(m).__module__.startswith("peft.") for m in model.modules()):
        return model
    from peft.tuners.tuners_utils import BaseTunerLayer

    plain = copy.deepcopy(model)
    layers = [(name, module) for name, module in plain.named_modules() if isinstance(module, BaseTunerLayer)]
    for _, module in layers:  # outer layers first: an attention layer merges its own adapted output projection
        if not module.merged:
            module.merge()
    for name, module in sorted(layers, key=lambda layer: -layer[0].count(".")):  # then unwrapped, inner ones first
        parent, _, child = name.rpartition(".")
        setattr(plain.get_submodule(parent), child, module.get_base_layer())
    return plain


def frozen_names(model):
    """The names of `model`'s parameters that do not train, as its state dict names them."""
    return {name for name, p in model.named_parameters() if not p.requires_grad}


def without_frozen(models, states, _folder=None):
    """Accelerate's save_state pre-hook: the frozen parameters taken out of each model's state to save (which
    Accelerate takes from the module inside DDP's wrapper)."""
    for model, state in zip(models, states):
        inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        for name in frozen_names(inner):
            state.pop(name)


def leave_frozen_out(model, accelerator):
    """Make `accelerator`'s checkpoints leave out `model`'s frozen weights; their fingerprint, for the checkpoints."""
    accelerator.register_save_state_pre_hook(without_frozen)
    return frozen_fingerprint(model)


def frozen_fingerprint(model):
    """The SHA-256 of `model`'s frozen parameters (names and bytes), in name order."""
    return tensors_sha256((n, p) for n, p in model.named_parameters() if not p.requires_grad)


FROZEN_FILE = "frozen.safetensors"  # in the run folder: what its checkpoints leave out (predict.py --checkpoint)


def write_frozen(model, path, fingerprint):
    """`model`'s frozen parameters to `path` (safetensors, whole, their `fingerprint` in its metadata), unless it holds
    them already (a resumed run's: only its header is read); another run's left in the same folder is replaced."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save

    try:
        with safe_open(str(path), framework="pt") as kept:
            if (kept.metadata() or {}).get("sha256") == fingerprint:
                return
    except (OSError, SafetensorError):  # absent, or not a safetensors file: written anew
        pass
    frozen = frozen_names(model)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k in frozen}
    write_bytes_atomic(path, save(state, metadata={"sha256": fingerprint}))


def _examples(names):
    shown = ", ".join(names[:2])
    return shown + (f", ... {names[-1]}" if len(names) > 2 else "")
