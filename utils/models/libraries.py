"""Where a --model comes from: a torchvision name, `timm/<name>`, `hf/<Hub repo or local folder>` or
`pv/<name>` (pytorchvideo's video models).

One entry point per question the script asks of a model (is the name valid, build it, which input it
expects, which parameters are its classifier, how it is saved), answered by the library the name's
prefix picks, in `library()`, the one place that tells them apart (utils/models/protocol.py: the
protocol). timm, transformers and pytorchvideo are imported only when their namespace is used: the
default job never pays for them.
"""

import functools
from dataclasses import dataclass

import torch

from utils.core.errors import ConfigError
from utils.models.errors import ModelError
from utils.models.grad_checkpointing import keep_batchnorm_statistics
from utils.models.hf_library import Transformers
from utils.models.lora import LoraOptions
from utils.models.pv_library import PyTorchVideo
from utils.models.temporal_shift import add_temporal_shift
from utils.models.timm_library import Timm, import_timm
from utils.models.torchvision_library import Torchvision, pretrained_state
from utils.models.weights import load_weights, read_state_dict

@dataclass(frozen=True)
class ModelOptions:
    """What the options ask of the model, read from them once (utils/config/settings.py: typed_options) and
    handed down; every field is the option's value."""

    name: str  # --model, with its library's prefix
    pretrained: bool
    weights: str  # torchvision's weight set (--weights)
    init_from: str  # a state dict, a run or checkpoint folder
    freeze_backbone: bool
    drop_path: float
    dropout: float
    zero_init_residual: bool
    temporal_shift: bool  # TSM in a 2D model on clips
    grad_checkpointing: bool
    sync_bn: bool
    channels_last: bool
    ema: bool  # --model_ema, --model_ema_decay, --model_ema_warmup (utils/models/ema.py)
    ema_decay: float
    ema_warmup: bool
    ema_steps: int  # optimizer steps between two updates of the average
    lora: int = 0  # --lora's rank (0: none), --lora_alpha, --lora_dropout, --lora_targets (utils/models/lora.py)
    lora_alpha: float = None
    lora_dropout: float = 0.0
    lora_targets: tuple = None

    @property
    def adapters(self):
        """--lora's LoraOptions; None without adapters."""
        return LoraOptions(self.lora, self.lora_alpha, self.lora_dropout, self.lora_targets) if self.lora else None


LIBRARIES = (Timm(), Transformers(), PyTorchVideo())  # by prefix; a name with none of theirs is torchvision's
TORCHVISION = Torchvision()


def library(name):
    """(the Library that `name` belongs to, the name without its prefix)."""
    for lib in LIBRARIES:
        if name.startswith(lib.prefix):
            return lib, name[len(lib.prefix):]
    return TORCHVISION, name


def named_weights(name):
    """Whether --weights can name the model's weights (torchvision's weight enums)."""
    return library(name)[0].named_weights


def recommends_input(name):
    """Whether the model's library recommends its input (timm's pretrained_cfg, a transformers processor)."""
    return library(name)[0].recommends_input


def is_video_model(name):
    """A model that takes clips (B, C, T, H, W) itself: torchvision's video models and transformers' video
    classifiers (VideoMAE, TimeSformer, ViViT...). timm's models and transformers' image classifiers take
    images (on video data they score frames, see protocol.frame_averaged)."""
    lib, arch = library(name)
    return lib.is_video(arch)


def check_model_name(name):
    """Raise ValueError, with close matches from the name's namespace, when `name` names no model."""
    lib, arch = library(name)
    return lib.check_name(arch)


def build_model(name, num_classes, video=False, zero_init_residual=True, drop_path=None, dropout=None,
                pretrained=False, class_names=None, temporal_shift=None, in_chans=3, image_size=None):
    """A model with a `num_classes`-way classifier; timm and transformers models load their own pretrained
    weights when `pretrained` (the classifier for our labels newly initialised). torchvision's pretrained
    weights are loaded afterwards by initialise(). An image model on video scores frames (TSN); with
    `temporal_shift` (the clip's frame count) its residual blocks also shift channels in time (TSM). `in_chans`:
    the input's channels (multispectral, grayscale), the stem built or adapted for them (utils/models/stem.py).
    `image_size`: the ImageSize (ImageSize.of) a model laid out for one input size is made for (a ViT at another
    size than its own: its position embeddings resampled by its library); None: its own."""
    lib, arch = library(name)
    model = lib.build(arch, num_classes, video=video, zero_init_residual=zero_init_residual, drop_path=drop_path,
                      dropout=dropout, pretrained=pretrained, class_names=class_names, in_chans=in_chans,
                      image_size=image_size)
    return add_temporal_shift(model, temporal_shift, name) if temporal_shift else model


@functools.cache
def data_config(name):
    """The input the model's library recommends, as a dict with some of image_size, mean, std,
    interpolation, crop_pct and `origin` (where they came from); {} for torchvision names."""
    lib, arch = library(name)
    return lib.data_config(arch)


def check_image_size(name, size, frames=None):
    """ModelError when the model cannot take size x size input: torchvision's measured minimums; a timm
    model with a fixed input size; a transformers model that cuts images into patches (ViT-like: its
    position embeddings are laid out for its config's image_size)."""
    lib, arch = library(name)
    return lib.check_image_size(arch, size, frames)


def check_clip_frames(name, frames):
    """ModelError when a transformers video model cannot take clips of `frames` frames: its position
    embeddings are laid out for its config's num_frames (torchvision's limits: check_image_size)."""
    lib, arch = library(name)
    return lib.check_clip_frames(arch, frames)


def classifier_parameters(model, name):
    """The parameters --freeze_backbone leaves trainable, found the way each library defines its head:
    timm's get_classifier(), everything outside a transformers model's base model, torchvision's last Linear."""
    lib, _ = library(name)
    try:
        params = lib.classifier_parameters(model)
    except ModelError as e:
        raise ModelError(f"freeze_backbone: {e}; nothing to train alone") from None
    if not params:
        raise ModelError(f"freeze_backbone: {name} has no classifier parameters to train alone")
    return params


def classifier(model, name):
    """The model's final classifier layer as its library defines it (what it reads: the model's features)."""
    lib, _ = library(name)
    return lib.classifier(model)


def replace_classifier(model, name, head):
    """`model` with its classifier layer (`classifier`) replaced by module `head`, which reads what it read."""
    old = classifier(model, name)
    for parent in model.modules():
        for child, module in parent.named_children():
            if module is old:
                setattr(parent, child, head)
                return model
    raise ModelError(f"{name}: its classifier is not a submodule of the model")


def layer_ids(model, name):
    """--layer_decay: {parameter name: its layer, 0 the input side, the head last}, grouped as the model's library
    lays it out (Library.layer_matcher) by timm's group_parameters. A ModelError when the model cannot be grouped
    into three layers or more."""
    lib, arch = library(name)
    matcher = lib.layer_matcher(model)
    if matcher is None:
        raise ModelError(f"layer_decay: {name}'s parameters cannot be grouped into layers here (it groups timm "
                         f"models with a group_matcher, torchvision's ViT, Swin and ConvNeXt, and transformers "
                         f"models whose encoder has numbered blocks); drop --layer_decay")
    try:
        group_parameters = import_timm("timm.models").group_parameters
    except ImportError:
        raise ModelError("layer_decay: groups parameters with timm, which is not installed: pip install -r "
                         "requirements-models.txt (or pip install timm)") from None
    ids = group_parameters(model, matcher, reverse=True)
    if len(set(ids.values())) < 3:
        raise ModelError(f"layer_decay: {name}'s parameters fall into {len(set(ids.values()))} layer(s) only; "
                         f"drop --layer_decay")
    return ids


def enable_grad_checkpointing(model, name):
    """--grad_checkpointing, the way the model's library does it, with BatchNorm's running statistics kept from a
    second update in the recomputation (utils/models/grad_checkpointing.py); returns the start-up line saying so."""
    lib, _ = library(name)
    line = lib.grad_checkpointing(model)
    kept = keep_batchnorm_statistics(model)
    return line + (f"; {kept} BatchNorm layers update their statistics once" if kept else "")


def save_in_library_form(model, name, folder, inputs, class_names):
    """`model` written to `folder` the way its own library loads it (reporting/model_folder.py)."""
    lib, arch = library(name)
    lib.save(model, arch, folder, inputs, class_names)


def pretrained_model(name, num_classes, video, class_names, log=print, image_size=None):
    """`name` with its library's pretrained weights, whole: their classifier must have `num_classes` outputs (a
    --teacher NAME: a new classifier would teach nothing). A ModelError otherwise."""
    lib, arch = library(name)
    try:
        have = lib.pretrained_classes(arch)
    except (OSError, RuntimeError, ValueError) as e:  # offline without its config; a tag timm does not know
        raise ModelError(f"{name}: its pretrained weights' classes cannot be read ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:150] if str(e) else 'no message'})") from None
    if have != num_classes:
        count = f"has {have} classes" if have else "has a class count its library does not say"
        raise ModelError(f"{name}'s pretrained classifier {count} and the data {num_classes}: its predictions are "
                         f"not of these classes; train a model on this data and give its run folder")
    model = build_model(name, num_classes, video=video, pretrained=True, class_names=class_names,
                        image_size=image_size)
    if not lib.builds_pretrained:
        load_weights(model, "pretrained", pretrained_state(name, None), log)
    return model


def distillation_head(model, video=False):
    """Switch on a distillation token's head where the model has one (timm's deit_*_distilled: in training it then
    answers (class head, distillation head)); whether it did. Not for video: frames scored one by one are averaged
    into one answer (frame_averaged)."""
    if not hasattr(model, "set_distilled_training"):
        return False
    if video:
        raise ModelError("teacher: a model with a distillation token scores video frames one by one, and its two heads "
                         "cannot be averaged over them; distil into a model without one")
    model.set_distilled_training(True)
    return True


def initialise(model, options, log=print):
    """The weights `options` (ModelOptions) ask for: --pretrained/--weights (torchvision's; timm and transformers
    models got theirs when built), else --init_from (a classifier of another shape is re-initialised);
    --freeze_backbone; --lora's adapters (utils/models/lora.py)."""
    lib, _ = library(options.name)
    stem = next((m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))), None)
    channels = stem.in_channels if stem is not None and stem.in_channels != 3 else None  # multispectral, grayscale
    if not lib.builds_pretrained and (options.pretrained or options.weights):
        load_weights(model, "pretrained", pretrained_state(options.name, options.weights), log)
    elif options.init_from:
        given = read_state_dict(options.init_from)
        state = lib.fitted(model, given)
        if resampled := [k for k in state if state[k].shape != given[k].shape]:
            log(f"init_from: {', '.join(resampled)} resampled by {lib.name} to this model's input size")
        load_weights(model, "init_from", state, log)
    elif options.pretrained:
        adapted = f"; its stem adapted to {channels} channels (summed for one, repeated and scaled for more)"
        log(f"pretrained: {options.name}'s weights loaded by {lib.name}, with a new classifier"
            f"{adapted * bool(channels)}")
    elif channels:
        log(f"model: {options.name} built for {channels} input channels")
    if options.freeze_backbone:
        trainable = set(classifier_parameters(model, options.name))
        for p in model.parameters():
            p.requires_grad_(p in trainable)
    add_adapters(model, options.name, options.adapters, log)  # --lora: on the weights just loaded


def add_adapters(model, name, adapters, log=print):
    """--lora's adapters (LoraOptions `adapters`; None: none) on the model `name` names (utils/models/lora.py)."""
    if adapters is None:
        return model
    from utils.models.lora import add_lora

    lib, _ = library(name)
    return add_lora(model, adapters, lib, classifier_parameters(model, name), log)


def check_options(options, need, video):
    """The model's name (in its library's namespace), its weights, its regularisation (`options`: ModelOptions); a
    video model needs `video` data."""
    for key, value in (("drop_path", options.drop_path), ("dropout", options.dropout)):
        need(value is None or 0 <= value < 1, key, "must be in [0, 1)")
    need(0 < options.ema_decay < 1, "model_ema_decay", "must be in (0, 1)")
    need(options.ema_steps >= 1, "model_ema_steps", "must be >= 1")
    try:
        check_model_name(options.name)
    except ValueError as e:
        raise ConfigError(f"model: {e}") from None
    need(options.weights is None or named_weights(options.name), "weights", "names torchvision weights; for "
         "timm give the tag in the name (--model timm/resnet50.a1_in1k --pretrained), for hf/ the repo")
    need(video or not is_video_model(options.name), "model", "a video model needs video data (--train_list, "
         "a folder of videos, --dataset moving_digits)")
    need(options.lora >= 0, "lora", "is the adapters' rank: a positive number (0: no adapters)")
    for key, ok in (("lora_alpha", options.lora_alpha is None), ("lora_dropout", options.lora_dropout == 0),
                    ("lora_targets", options.lora_targets is None)):
        need(options.lora or ok, key, "sets the LoRA adapters: add --lora RANK")
    need(options.lora_alpha is None or options.lora_alpha > 0, "lora_alpha", "must be > 0")
    need(0 <= options.lora_dropout < 1, "lora_dropout", "must be in [0, 1)")
    need(not (options.lora and options.freeze_backbone), "lora", "trains adapters beside the head; --freeze_backbone "
         "trains the head alone: drop one of the two")
    need(not options.lora or options.pretrained or options.weights or options.init_from, "lora", "adapts trained "
         "weights, which it leaves frozen: give them (--pretrained, --weights or --init_from), or train the whole "
         "model without --lora")
    need(not options.temporal_shift or video and not is_video_model(options.name), "temporal_shift",
         "shifts channels in time inside a 2D image model scoring video frames (TSM): give video data and an "
         "image model (resnet50, timm/resnet50...)")
