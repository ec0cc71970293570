"""Build any torchvision classification model by name, with a helpful error for unknown names."""

import difflib
from pathlib import Path

import torch
import torchvision


def classification_models():
    """Names that torchvision.models.get_model accepts for image classification."""
    return torchvision.models.list_models(module=torchvision.models)


def check_model_name(name):
    """Raise ValueError naming close matches when `name` is not a torchvision classification model."""
    names = classification_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see torchvision.models.list_models()"
        raise ValueError(f"{name!r} is not a torchvision classification model{hint}")


def build_model(name, num_classes):
    """A randomly initialised model whose classifier has `num_classes` outputs."""
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


class ModelError(ValueError):
    """Weights that cannot be loaded as asked; the message is one line saying what to do."""


def head(model):
    """The classifier: the last Linear layer of a torchvision classification model."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise ModelError(f"freeze_backbone: {type(model).__name__} has no Linear classifier to train alone")
    return linears[-1]


def load_matching(model, state, source):
    """Load `state` into `model`; tensors whose shape differs (a classifier for other classes) are left
    re-initialised and returned; any other missing or unexpected key is an error."""
    own = model.state_dict()
    reinit = sorted(k for k in state if k in own and state[k].shape != own[k].shape)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ModelError(f"{source}: keys do not match {type(model).__name__}: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]} ({len(missing)} and {len(unexpected)} in all)")
    model.load_state_dict({k: v for k, v in state.items() if k not in reinit}, strict=False)
    return reinit


def read_state_dict(path):
    """A state dict from a .safetensors file, a torch file (loaded with weights_only: no arbitrary
    objects are unpickled), or a run/checkpoint folder holding model.safetensors."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    if not path.is_file():
        raise ModelError(f"init_from: {path} does not exist (give a .safetensors/.pth file or a folder with "
                         f"model.safetensors)")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle errors, or objects weights_only refuses to build
        raise ModelError(f"init_from: {path} is not a plain tensor state dict ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200]})") from None
    for key in ("model", "state_dict", "model_state_dict"):  # common wrappers of a training checkpoint
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return state


def pretrained_state(name, weights_name):
    """torchvision's pretrained weights, from the torch hub cache; a one-line error when not there."""
    try:
        weights = (torchvision.models.get_weight(weights_name) if weights_name
                   else torchvision.models.get_model_weights(name).DEFAULT)
    except (ValueError, KeyError, AttributeError) as e:
        raise ModelError(f"weights: no torchvision weights {weights_name or 'DEFAULT'!r} for {name} ({e})") from None
    file = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    try:
        return weights.get_state_dict(progress=False, check_hash=False)
    except Exception as e:  # offline: URLError, socket errors...
        raise ModelError(f"pretrained: {file} is not in the torch hub cache and {weights.url} could not be "
                         f"downloaded ({type(e).__name__}); fetch it where there is network and copy it there "
                         f"(the cache follows TORCH_HOME)") from None


def initialise(model, args, log=print):
    """Pretrained or --init_from weights (a classifier for other classes is re-initialised); freezing."""
    source = ("pretrained", pretrained_state(args.model, args.weights)) if args.pretrained or args.weights \
        else ("init_from", read_state_dict(args.init_from)) if args.init_from else None
    if source is not None:
        reinit = load_matching(model, source[1], source[0])
        dropped = f"; re-initialised (other shape): {', '.join(reinit)}" if reinit else ""
        log(f"{source[0]}: weights loaded{dropped}")
    if args.freeze_backbone:
        trainable = set(head(model).parameters())
        for p in model.parameters():
            p.requires_grad_(p in trainable)
