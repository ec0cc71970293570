"""Build any torchvision classification model by name, with a helpful error for unknown names."""

import difflib
from pathlib import Path

import torch
import torchvision

from utils.core.errors import UserError
from utils.models.stem import adapt_input_weight, adapts, replace_stem


def classification_models():
    """Names that torchvision.models.get_model accepts for image or video classification."""
    return torchvision.models.list_models(module=torchvision.models) + video_models()


def video_models():
    """torchvision's video classifiers (input (B, C, T, H, W)): r3d_18, mc3_18, r2plus1d_18, s3d, mvit, swin3d."""
    return torchvision.models.list_models(module=torchvision.models.video)


def is_video_model(name):
    return name in video_models()


def check_model_name(name):
    """Raise ValueError naming close matches when `name` is not a torchvision classification model."""
    names = classification_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see torchvision.models.list_models()"
        raise ValueError(f"{name!r} is not a torchvision classification or video model{hint}")


class ModelError(UserError, ValueError):
    """A model or weights that cannot be used as asked; the message is one line saying what to do."""


# googlenet and inception_v3 return (logits, auxiliary logits...) in train mode, which the loss cannot
# take: build them with the main classifier only. transform_input as torchvision sets it for its
# pretrained weights (which expect it), so pretrained, --init_from and scratch runs see one input.
_BUILD_OPTIONS = {name: dict(aux_logits=False, transform_input=True, init_weights=True)
                  for name in ("googlenet", "inception_v3")}
AUX_HEADS = ("aux1", "aux2", "AuxLogits")  # their auxiliary classifiers' module names


def build_options(name):
    """The builder arguments, beyond num_classes, this project builds `name` with (googlenet, inception_v3)."""
    return dict(_BUILD_OPTIONS.get(name, {}))


def zero_init_residual_applies(name):
    """The image ResNets (resnet*, resnext*, wide_resnet*), whose builders take zero_init_residual."""
    return name.startswith(("resnet", "resnext", "wide_resnet"))


def build_model(name, num_classes, video=False, zero_init_residual=True, drop_path=None, dropout=None, in_chans=3):
    """A randomly initialised model whose classifier has `num_classes` outputs. An image model asked
    to take video (`video`) scores every frame and averages the logits (TSN, see frame_averaged).

    An image ResNet starts with the last BatchNorm of each residual block at zero (`zero_init_residual`,
    timm's default too): every block starts as the identity, and the first steps at a high LR no longer
    blow up BatchNorm's running statistics (on the digits: epoch-0 val loss 3.0 instead of ~9,600).

    `drop_path` and `dropout` go to the builder's `stochastic_depth_prob` and `dropout` arguments; a
    model whose builder has no such argument is a ModelError. `in_chans` other than 3: its stem replaced
    (utils/models/stem.py)."""
    options = build_options(name)
    if zero_init_residual and zero_init_residual_applies(name):
        options["zero_init_residual"] = True
    asked = {key: value for key, value in (("stochastic_depth_prob", drop_path), ("dropout", dropout))
             if value is not None}
    try:
        model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **options, **asked)
    except TypeError as e:
        flag = next((f"--{flag}" for key, flag in (("stochastic_depth_prob", "drop_path"), ("dropout", "dropout"))
                     if key in asked and key in str(e)), None)
        if flag is None:
            raise
        key, others = (("stochastic_depth_prob", "efficientnet, convnext, mvit") if flag == "--drop_path" else
                       ("dropout", "efficientnet, mobilenet, vgg, vit, swin"))
        # "multiple values": the model has one, but its builder sets it itself (swin, maxvit, swin3d's depth)
        what = flag[2:].replace("_", " ")
        why = (f"torchvision's {name} builder sets its own {what} (it takes no {key} argument)"
               if "multiple values" in str(e) else
               f"{name} has no {what} to set (torchvision's builder takes no {key} argument)")
        raise ModelError(f"{flag}: {why}; drop the option or pick a model whose builder takes it (e.g. {others}, "
                         f"or a timm/ model)") from None
    with_stem(model, in_chans, name)
    return frame_averaged(model) if video and not is_video_model(name) else model


def with_stem(model, in_chans, name):
    """`model` with its stem taking `in_chans` channels (utils/models/stem.py); a ModelError when it has none to adapt."""
    if in_chans != 3 and replace_stem(model, in_chans) is None:
        raise ModelError(f"{name}: has no convolution taking 3 channels to adapt to {in_chans}; give 3-channel data "
                         f"(--bands with three bands) or another model")
    return model


def frame_averaged(model):
    """Make a 2D image model take clips (B, C, T, H, W): each frame is scored alone, as an image, and
    a clip's logits are the mean of its frames' (TSN's consensus). Done with forward hooks on the
    model itself, so its state dict keeps torchvision's names: pretrained weights, --init_from and
    --freeze_backbone work unchanged, and model.safetensors loads into the plain image model."""
    def frames_as_images(module, inputs):
        (clips,) = inputs
        b, c, t, h, w = clips.shape
        module._clip_shape = (b, t)
        return clips.transpose(1, 2).reshape(b * t, c, h, w)

    def average_frames(module, inputs, logits):
        b, t = module._clip_shape
        return logits.view(b, t, -1).mean(dim=1)

    model.register_forward_pre_hook(frames_as_images)
    model.register_forward_hook(average_frames)
    return model


def _min_image_size(name):
    """(smallest input side the model accepts, whether that is the only side), measured per model.

    Below the minimum a pooling layer's output is empty; torchvision's weights meta "min_size" agrees
    for these, but overstates it for others (efficientnet_v2 and swin run at 32). ViT and MaxViT
    are laid out for 224 exactly.
    """
    if name.startswith(("vit_", "maxvit_")):
        return 224, True
    if name.startswith(("vgg", "convnext_")):
        return 32, False
    if name.startswith("densenet"):
        return 29, False
    return {"alexnet": 63, "googlenet": 15, "inception_v3": 75, "squeezenet1_0": 21,
            "squeezenet1_1": 17}.get(name, 1), False


# Video models laid out for Kinetics' 16 x 224 x 224 clips: (side, frames, exactly that?), measured.
_VIDEO_INPUT = {"s3d": (224, 16, False), "mvit_v1_b": (224, 16, True), "mvit_v2_s": (224, 16, True)}


def check_image_size(name, size, frames=None):
    """Raise ModelError when `name` cannot take size x size inputs (before a conv fails deep inside),
    or, for a video model, clips of `frames` frames."""
    if name in _VIDEO_INPUT:
        side, least_frames, only = _VIDEO_INPUT[name]
        if (size, frames) != (side, least_frames) if only else (size < side or (frames or 0) < least_frames):
            raise ModelError(f"{name} takes clips of {'exactly' if only else 'at least'} {least_frames} frames "
                             f"of {side}x{side} (--clip_len x --num_segments, --image_size), got {frames} of {size}")
        return
    least, only = _min_image_size(name)
    if only and size != least:
        raise ModelError(f"{name} takes --image_size {least} only, got {size}")
    if size < least:
        raise ModelError(f"{name} needs --image_size {least} or more, got {size}")


def head(model):
    """The classifier: the last Linear layer of a torchvision classification model."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise ModelError(f"freeze_backbone: {type(model).__name__} has no Linear classifier to train alone")
    return linears[-1]


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


def for_device(model, args, accelerator):
    """--sync_bn (BatchNorm statistics over all processes) and --channels_last, before Accelerate wraps the model."""
    if args.sync_bn:
        if accelerator.num_processes > 1 and accelerator.device.type == "cpu":
            raise ModelError("sync_bn: torch's SyncBatchNorm runs on GPUs (CUDA, XPU, HPU) only, not on CPU "
                             "processes: drop --sync_bn here")
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if args.channels_last:
        # 3-D convolutions (video models, whichever library) take the 5-D format; an image model on clips scores frames.
        volumes = any(p.dim() == 5 for p in model.parameters())
        model = model.to(memory_format=torch.channels_last_3d if volumes else torch.channels_last)
    return model
