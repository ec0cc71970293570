"""Plain names: torchvision's classification and video models, built by name with a helpful error for unknown names
(an image model on video scores frames, utils/models/protocol.py), saved as safetensors plus a config.json that
torchvision.models.get_model rebuilds them from."""

import difflib
import json
import re
from pathlib import Path

import torch
import torchvision
from torchvision import models
from torchvision.models import ConvNeXt, SwinTransformer, VisionTransformer

from utils.core.io import write_text_atomic
from utils.core.network import unreachable
from utils.models.errors import ModelError
from utils.models.grad_checkpointing import checkpoint_blocks
from utils.models.protocol import INF, MATCH_PREV, Library, frame_averaged
from utils.models.stem import with_stem

# The repeated blocks of torchvision's classification and video models, which --grad_checkpointing recomputes.
BLOCKS = (models.resnet.BasicBlock, models.resnet.Bottleneck, models.video.resnet.BasicBlock,
          models.video.resnet.Bottleneck, models.vision_transformer.EncoderBlock,
          models.swin_transformer.SwinTransformerBlock, models.swin_transformer.SwinTransformerBlockV2,
          models.convnext.CNBlock, models.efficientnet.MBConv, models.efficientnet.FusedMBConv,
          models.mobilenetv2.InvertedResidual, models.mobilenetv3.InvertedResidual, models.regnet.ResBottleneckBlock,
          models.maxvit.MaxVitLayer, models.video.mvit.MultiscaleBlock)


def _classification_models():
    """Names that torchvision.models.get_model accepts for image or video classification."""
    return torchvision.models.list_models(module=torchvision.models) + _video_models()


def _video_models():
    """torchvision's video classifiers (input (B, C, T, H, W)): r3d_18, mc3_18, r2plus1d_18, s3d, mvit, swin3d."""
    return torchvision.models.list_models(module=torchvision.models.video)


def _is_video_model(name):
    return name in _video_models()


def _check_model_name(name):
    """Raise ValueError naming close matches when `name` is not a torchvision classification model."""
    names = _classification_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see torchvision.models.list_models()"
        raise ValueError(f"{name!r} is not a torchvision classification or video model{hint}")


# googlenet and inception_v3 return (logits, auxiliary logits...) in train mode, which the loss cannot
# take: build them with the main classifier only. transform_input as torchvision sets it for its
# pretrained weights (which expect it), so pretrained, --init_from and scratch runs see one input.
_BUILD_OPTIONS = {name: dict(aux_logits=False, transform_input=True, init_weights=True)
                  for name in ("googlenet", "inception_v3")}


def _build_options(name):
    """The builder arguments, beyond num_classes, this project builds `name` with (googlenet, inception_v3)."""
    return dict(_BUILD_OPTIONS.get(name, {}))


def _zero_init_residual_applies(name):
    """The image ResNets (resnet*, resnext*, wide_resnet*), whose builders take zero_init_residual."""
    return name.startswith(("resnet", "resnext", "wide_resnet"))


def _build_model(name, num_classes, video=False, zero_init_residual=True, drop_path=None, dropout=None, in_chans=3):
    """A randomly initialised model whose classifier has `num_classes` outputs. An image model asked
    to take video (`video`) scores every frame and averages the logits (TSN, see frame_averaged).

    An image ResNet starts with the last BatchNorm of each residual block at zero (`zero_init_residual`,
    timm's default too): every block starts as the identity, and the first steps at a high LR do not
    blow up BatchNorm's running statistics (on the digits: epoch-0 val loss 3.0, against ~9,600 without it).

    `drop_path` and `dropout` go to the builder's `stochastic_depth_prob` and `dropout` arguments; a
    model whose builder has no such argument is a ModelError. `in_chans` other than 3: its stem replaced
    (utils/models/stem.py)."""
    options = _build_options(name)
    if zero_init_residual and _zero_init_residual_applies(name):
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
    return frame_averaged(model) if video and not _is_video_model(name) else model


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


def _check_image_size(name, size, frames=None):
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


def _head(model):
    """The classifier: the last Linear layer of a torchvision classification model."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise ModelError(f"{type(model).__name__} has no Linear classifier")
    return linears[-1]


def pretrained_state(name, weights_name):
    """torchvision's pretrained weights, from the torch hub cache; a one-line error when not there."""
    try:
        weights = (torchvision.models.get_weight(weights_name) if weights_name
                   else torchvision.models.get_model_weights(name).DEFAULT)
    except (ValueError, KeyError, AttributeError) as e:
        raise ModelError(f"weights: no torchvision weights {weights_name or 'DEFAULT'!r} for {name} ({e})") from None
    file = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    why = None if file.is_file() else unreachable(weights.url)  # said at once, not after the download's wait
    try:
        if why is None:
            return weights.get_state_dict(progress=False, check_hash=False)
    except Exception as e:  # offline: URLError, socket errors...
        why = type(e).__name__
    raise ModelError(f"pretrained: {file} is not in the torch hub cache and {weights.url} could not be downloaded "
                     f"({why}); fetch it where there is network and copy it there (the cache follows TORCH_HOME)")


class Torchvision(Library):
    name = "torchvision"
    load_snippet = ("import json, torchvision\nfrom safetensors.torch import load_file\n"
                    "cfg = json.load(open('config.json'))\n"
                    "model = torchvision.models.get_model(cfg['architecture'], num_classes=cfg['num_classes'], "
                    "**cfg['builder_options'])\nmodel.load_state_dict(load_file('model.safetensors'))")
    builds_pretrained = False  # initialise() loads torchvision's weights after the build
    named_weights = True
    recommends_input = False  # the data's defaults (ImageNet's, Kinetics') apply

    def check_name(self, arch):
        return _check_model_name(arch)

    def is_video(self, arch):
        return _is_video_model(arch)

    def build(self, arch, num_classes, *, video, zero_init_residual, drop_path, dropout, pretrained, class_names,
              in_chans=3, image_size=None):
        return _build_model(arch, num_classes, video, zero_init_residual, drop_path, dropout, in_chans)

    def pretrained_classes(self, arch):
        try:
            return len(models.get_model_weights(arch).DEFAULT.meta["categories"])
        except (ValueError, KeyError, AttributeError):  # no weights for it
            return None

    def check_image_size(self, arch, size, frames=None):
        return _check_image_size(arch, size, frames)

    def layer_matcher(self, model):
        """ViT: the patch embedding, class token and position embedding, then each encoder block, the final norm
        with the last block, the head. Swin and ConvNeXt: `features` holds the stem, then stages of blocks (odd
        indices) with a downsampling step between them (even), which joins the next stage's first block as timm
        groups its own Swin and ConvNeXt; their final norm with the last block, the classifier last."""
        if isinstance(model, VisionTransformer):
            return _vit_layer
        if isinstance(model, (SwinTransformer, ConvNeXt)):
            return _staged_layer
        return None

    def grad_checkpointing(self, model):
        """The model's residual or transformer blocks (BLOCKS), each through torch.utils.checkpoint."""
        count = checkpoint_blocks(model, BLOCKS)
        if not count:
            raise ModelError(f"grad_checkpointing: {type(model).__name__} has none of the blocks it checkpoints "
                             f"(ResNet, ViT, Swin, ConvNeXt, EfficientNet, MobileNet, RegNet, MaxViT, MViT blocks); "
                             f"drop the option")
        return f"grad_checkpointing: {count} blocks recompute their activations in the backward pass"

    def lora_targets(self, model):
        """A ViT's MLP, its two Linear layers (its attention is torch's MultiheadAttention, whose weights its forward
        reads directly: utils/models/lora.py)."""
        if isinstance(model, torchvision.models.VisionTransformer):
            return r".*\.mlp\.(0|3)"
        return None

    def classifier(self, model):
        """The last Linear layer."""
        return _head(model)

    def save(self, model, arch, folder, inputs, class_names):
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model.safetensors"))
        config = dict(library="torchvision", architecture=arch, num_classes=len(class_names),
                      builder_options=_build_options(arch), labels=list(class_names), input=inputs)
        write_text_atomic(folder / "config.json", json.dumps(config, indent=2) + "\n")


def _vit_layer(name):
    if name.startswith(("conv_proj.", "class_token", "encoder.pos_embedding")):
        return (0,)
    if block := re.match(r"encoder\.layers\.encoder_layer_(\d+)\.", name):
        return (1, int(block[1]))
    return (1, MATCH_PREV) if name.startswith("encoder.ln.") else (INF,)


def _staged_layer(name):
    if step := re.match(r"features\.(\d+)\.(\w+)", name):
        index = int(step[1])
        if index == 0:
            return (0,)
        return (1, index, int(step[2])) if index % 2 else (1, index + 1, 0)
    return (1, MATCH_PREV) if name.startswith("norm.") else (INF,)
