"""Weights read from a file and loaded into a model whose layers may differ: a classifier of another shape left
re-initialised, an RGB stem's weights adapted to other channels (utils/models/stem.py), auxiliary classifiers
dropped."""

import hashlib
from pathlib import Path

import torch

from utils.models.errors import ModelError
from utils.models.stem import adapt_input_weight, adapts

# The auxiliary classifiers of torchvision's pretrained googlenet and inception_v3, which the project builds without.
AUX_HEADS = ("aux1", "aux2", "AuxLogits")  # their auxiliary classifiers' module names


def tensors_sha256(named):
    """The SHA-256 of (name, tensor) pairs `named`, in name order: each name, then the tensor's bytes."""
    digest = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda pair: pair[0]):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def auxiliary_keys(model, state):
    """Keys of auxiliary classifiers (googlenet's, inception_v3's) in `state` that `model` was built without."""
    own = model.state_dict()
    return sorted(k for k in state if k not in own and k.split(".")[0] in AUX_HEADS)


def load_matching(model, state, source):
    """Load `state` into `model`; tensors whose shape differs (a classifier for other classes) are left
    re-initialised and returned, but for an RGB stem's weights in a stem of other channels, which are adapted
    (utils/models/stem.py); auxiliary classifiers the model lacks are dropped (torchvision's
    pretrained googlenet/inception_v3 have them); any other missing or unexpected key is an error."""
    aux = set(auxiliary_keys(model, state))
    state = {k: v for k, v in state.items() if k not in aux}
    own = model.state_dict()
    adapted = {k: adapt_input_weight(v, own[k].shape[1]) for k, v in state.items()
               if k in own and adapts(own[k].shape, v.shape)}  # an RGB stem's weights, for other channels
    state = {**state, **adapted}
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


def load_weights(model, source, state, log=print):
    """Load `state` (from `source`: pretrained, init_from) into `model`, saying what was left out."""
    aux = sorted({k.split(".")[0] for k in auxiliary_keys(model, state)})
    own = model.state_dict()
    stems = [f"{k} ({v.shape[1]} -> {own[k].shape[1]} channels)" for k, v in state.items()
             if k in own and adapts(own[k].shape, v.shape)]
    reinit = load_matching(model, state, source)
    dropped = f"; re-initialised (other shape): {', '.join(reinit)}" if reinit else ""
    unused = f"; auxiliary classifiers not used: {', '.join(aux)}" if aux else ""
    stem = f"; stem adapted: {', '.join(stems)}" if stems else ""
    log(f"{source}: weights loaded{stem}{dropped}{unused}")
