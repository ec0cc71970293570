"""Where a --model comes from: a torchvision name, `timm/<name>` or `hf/<Hub repo or local folder>`.

One entry point per question the script asks of a model (is the name valid, build it, which input it
expects, which parameters are its classifier), answered by the library the name belongs to. timm and
transformers are imported only when their namespace is used: the default job never pays for them.
"""

import difflib
import functools
import os
from pathlib import Path

from utils.models import torchvision_models as models
from utils.models.torchvision_models import ModelError

TIMM, HF = "timm/", "hf/"


def source(name):
    """'timm', 'hf' or 'torchvision'."""
    return "timm" if name.startswith(TIMM) else "hf" if name.startswith(HF) else "torchvision"


def is_video_model(name):
    """A model that takes clips (B, C, T, H, W) itself: torchvision's video models and transformers' video
    classifiers (VideoMAE, TimeSformer, ViViT...). timm's models and transformers' image classifiers take
    images (on video data they score frames, see frame_averaged)."""
    kind = source(name)
    if kind == "torchvision":
        return models.is_video_model(name)
    return kind == "hf" and _hf_video_config(name[len(HF):]) is not None


@functools.lru_cache(maxsize=None)
def _hf_config(ref):
    return quiet_transformers().AutoConfig.from_pretrained(ref)


def _hf_video_config(ref):
    """The config of a transformers video classifier, None for anything else (or a config not found:
    building the model says why)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES as VIDEO

    try:
        config = _hf_config(ref)
    except (OSError, ValueError):
        return None
    return config if config.model_type in VIDEO else None


def check_model_name(name):
    """Raise ValueError, with close matches from the name's namespace, when `name` names no model."""
    kind = source(name)
    if kind == "torchvision":
        return models.check_model_name(name)
    if kind == "timm":
        return _check_timm(name[len(TIMM):])
    return _check_hf(name[len(HF):])


def _check_timm(arch):
    import timm

    known = timm.list_pretrained() if "." in arch else timm.list_models()  # name.tag names pretrained weights
    if arch in known:
        return
    close = difflib.get_close_matches(arch, known, n=3, cutoff=0.6)
    hint = (f"; did you mean {', '.join(TIMM + c for c in close)}?" if close
            else "; see timm.list_models() (architectures) and timm.list_pretrained() (name.tag weights)")
    raise ValueError(f"'{TIMM}{arch}' is not a timm {'pretrained model' if '.' in arch else 'model'}{hint}")


def _check_hf(ref):
    if not ref:
        raise ValueError("hf/ needs a Hub repository (hf/google/vit-base-patch16-224) or a local folder")
    folder = Path(ref)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ValueError(f"{HF}{ref}: the folder has no config.json (write one with the model's save_pretrained)")
        return
    if "/" not in ref or ref.startswith((".", "/")) or ref.count("/") > 1:  # not a repo id: a folder not found
        raise ValueError(f"{HF}{ref}: no such folder")
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") and not _hf_cached(ref):
        cached = _cached_hf_models()
        close = difflib.get_close_matches(ref, cached, n=3, cutoff=0.5)
        hint = f"; cached: {', '.join(HF + c for c in close)}" if close else ""
        raise ValueError(f"{HF}{ref}: not in the Hugging Face cache and HF_HUB_OFFLINE is set; download it where "
                         f"there is network (hf download {ref}) and copy the cache (HF_HOME), or give a local "
                         f"folder{hint}")


def _hf_cached(repo):
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, "config.json"), str)


def _cached_hf_models():
    try:
        from huggingface_hub import scan_cache_dir

        return sorted(r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model")
    except Exception:  # no cache yet
        return []


def quiet_transformers():
    import transformers

    transformers.utils.logging.set_verbosity_error()  # load reports and "newly initialised" notices
    transformers.utils.logging.disable_progress_bar()
    return transformers


def build_model(name, num_classes, video=False, zero_init_residual=True, drop_path=None, dropout=None,
                pretrained=False, class_names=None):
    """A model with a `num_classes`-way classifier; timm and transformers models load their own pretrained
    weights when `pretrained` (the classifier for our labels newly initialised). torchvision's pretrained
    weights are loaded afterwards by initialise(). An image model on video scores frames (TSN)."""
    kind = source(name)
    if kind == "torchvision":
        return models.build_model(name, num_classes, video, zero_init_residual, drop_path, dropout)
    model = (_build_timm(name[len(TIMM):], num_classes, drop_path, dropout, pretrained) if kind == "timm"
             else _build_hf(name[len(HF):], num_classes, drop_path, dropout, pretrained, class_names))
    return models.frame_averaged(model) if video and not is_video_model(name) else model


def _offline_weights_error(name, e, fetch):
    return ModelError(f"pretrained: the weights of {name} are not in the Hugging Face cache and could not be "
                      f"downloaded ({type(e).__name__}); run `{fetch}` where there is network and copy the "
                      f"cache (HF_HOME), or point HF_HUB_CACHE at one; set HF_HUB_OFFLINE=1 to skip the retries")


def _build_timm(arch, num_classes, drop_path, dropout, pretrained):
    import timm

    asked = {key: value for key, value in (("drop_path_rate", drop_path), ("drop_rate", dropout)) if value is not None}
    try:
        return timm.create_model(arch, pretrained=pretrained, num_classes=num_classes, **asked)
    except TypeError as e:
        if not asked or not any(key in str(e) for key in asked):
            raise
        raise ModelError(f"--drop_path/--dropout: timm's {arch} takes no {', '.join(asked)} argument ({e}); "
                         f"drop the option") from None
    except (OSError, RuntimeError) as e:  # huggingface_hub's LocalEntryNotFoundError is an OSError
        if not pretrained or isinstance(e, RuntimeError) and "download" not in str(e).lower():
            raise
        raise _offline_weights_error(TIMM + arch, e, f"hf download {_timm_hub_id(arch)}") from None


def _timm_hub_id(arch):
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(arch)
    return (cfg.hf_hub_id if cfg is not None and cfg.hf_hub_id else f"timm/{arch}").split("@")[0]


# transformers' config attributes that --drop_path and --dropout set, first present wins
_HF_DROP_PATH = ("drop_path_rate",)
_HF_DROPOUT = ("classifier_dropout_prob", "classifier_dropout", "hidden_dropout_prob")


def _build_hf(ref, num_classes, drop_path, dropout, pretrained, class_names):
    transformers = quiet_transformers()
    names = class_names or [str(i) for i in range(num_classes)]
    labels = dict(num_labels=num_classes, id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    try:
        config = transformers.AutoConfig.from_pretrained(ref, **labels)
    except OSError as e:
        raise _offline_weights_error(HF + ref, e, f"hf download {ref}") from None
    for flag, value, keys in (("--drop_path", drop_path, _HF_DROP_PATH), ("--dropout", dropout, _HF_DROPOUT)):
        if value is None:
            continue
        key = next((k for k in keys if hasattr(config, k)), None)
        if key is None:
            raise ModelError(f"{flag}: {config.model_type} models have none of the config fields {', '.join(keys)}; "
                             f"drop the option")
        setattr(config, key, value)
    video = _hf_video_config(ref) is not None
    auto = transformers.AutoModelForVideoClassification if video else transformers.AutoModelForImageClassification
    try:
        model = (auto.from_pretrained(ref, config=config, ignore_mismatched_sizes=True) if pretrained
                 else auto.from_config(config))
    except OSError as e:
        raise _offline_weights_error(HF + ref, e, f"hf download {ref}") from None
    except ValueError as e:  # not an image classifier (a text model, say)
        raise ModelError(f"{HF}{ref}: not an image or video classification model for transformers ({str(e).splitlines()[0]})") \
            from None
    if video:  # our clips are (B, C, T, H, W), as torchvision's video models take them; transformers' (B, T, C, H, W)
        model.register_forward_pre_hook(_frames_first)
    model.register_forward_hook(_logits)  # the loop wants logits; the state dict keeps transformers' names
    return model


def _frames_first(module, inputs):
    return (inputs[0].transpose(1, 2),)


def _logits(module, inputs, output):
    return output.logits


@functools.lru_cache(maxsize=None)
def data_config(name):
    """The input the model's library recommends, as a dict with some of image_size, mean, std,
    interpolation, crop_pct and `origin` (where they came from); {} for torchvision names."""
    kind = source(name)
    if kind == "timm":
        return _timm_data_config(name[len(TIMM):])
    if kind == "hf":
        return _hf_data_config(name[len(HF):])
    return {}


def _timm_data_config(arch):
    from timm.data import resolve_data_config
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(arch)
    if cfg is None:
        return {}
    data = resolve_data_config(pretrained_cfg=cfg.to_dict())
    out = dict(image_size=data["input_size"][-1], mean=tuple(data["mean"]), std=tuple(data["std"]),
               crop_pct=data["crop_pct"], origin=f"timm's pretrained_cfg of {cfg.architecture}.{cfg.tag}")
    if data["interpolation"] in ("bilinear", "bicubic"):
        out["interpolation"] = data["interpolation"]
    return out


_PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}


def _hf_data_config(ref):
    transformers = quiet_transformers()
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(ref)
    except (OSError, ValueError):  # a config-only folder: fall back to the config's image size
        config = _hf_config(ref)
        size = getattr(config, "image_size", None)
        return dict(image_size=size, origin=f"{ref}'s config.json") if isinstance(size, int) else {}
    size, crop = dict(getattr(processor, "size", None) or {}), dict(getattr(processor, "crop_size", None) or {})
    side = crop.get("height") if getattr(processor, "do_center_crop", False) and crop else None
    side = side or size.get("height") or size.get("shortest_edge")
    out = dict(origin=f"{ref}'s image processor ({type(processor).__name__})")
    if side:
        out["image_size"] = int(side)
    if getattr(processor, "image_mean", None) is not None:
        out["mean"], out["std"] = tuple(processor.image_mean), tuple(processor.image_std)
    if getattr(processor, "crop_pct", None):
        out["crop_pct"] = float(processor.crop_pct)
    elif size.get("height") and not getattr(processor, "do_center_crop", False):
        out["crop_pct"] = 1.0  # resized to the input size whole, nothing cut
    elif side and size.get("shortest_edge"):
        out["crop_pct"] = side / size["shortest_edge"]
    if _PIL_RESAMPLE.get(getattr(processor, "resample", None)):
        out["interpolation"] = _PIL_RESAMPLE[processor.resample]
    return out


def check_image_size(name, size, frames=None):
    """ModelError when the model cannot take size x size input: torchvision's measured minimums; a timm
    model with a fixed input size; a transformers model that cuts images into patches (ViT-like: its
    position embeddings are laid out for its config's image_size)."""
    kind = source(name)
    if kind == "torchvision":
        return models.check_image_size(name, size, frames)
    if kind == "timm":
        from timm.models import get_pretrained_cfg

        cfg = get_pretrained_cfg(name[len(TIMM):])
        if cfg is not None and cfg.fixed_input_size and size != cfg.input_size[-1]:
            raise ModelError(f"{name} takes --image_size {cfg.input_size[-1]} only, got {size}")
        return
    config = _hf_config(name[len(HF):])
    fixed = getattr(config, "image_size", None)

    if hasattr(config, "patch_size") and isinstance(fixed, int) and size != fixed:
        raise ModelError(f"{name} takes --image_size {fixed} only (its position embeddings are laid out for it), "
                         f"got {size}")


def check_clip_frames(name, frames):
    """ModelError when a transformers video model cannot take clips of `frames` frames: its position
    embeddings are laid out for its config's num_frames (torchvision's limits: check_image_size)."""
    if source(name) != "hf" or not is_video_model(name):
        return
    clip = getattr(_hf_config(name[len(HF):]), "num_frames", None)
    if isinstance(clip, int) and frames != clip:
        raise ModelError(f"{name} takes clips of {clip} frames only (--clip_len x --num_segments), got {frames}")


def classifier_parameters(model, name):
    """The parameters --freeze_backbone leaves trainable, found the way each library defines its head:
    timm's get_classifier(), everything outside a transformers model's base model, torchvision's last Linear."""
    kind = source(name)
    if kind == "timm":
        params = list(model.get_classifier().parameters())
    elif kind == "hf":
        prefix = model.base_model_prefix + "."
        params = [p for n, p in model.named_parameters() if not n.startswith(prefix)]
    else:
        params = list(models.head(model).parameters())
    if not params:
        raise ModelError(f"freeze_backbone: {name} has no classifier parameters to train alone")
    return params


def initialise(model, args, log=print):
    """--pretrained/--weights (torchvision's; timm and transformers models got theirs when built), else
    --init_from (a classifier of another shape is re-initialised); --freeze_backbone."""
    if source(args.model) == "torchvision" and (args.pretrained or args.weights):
        models.load_weights(model, "pretrained", models.pretrained_state(args.model, args.weights), log)
    elif args.init_from:
        models.load_weights(model, "init_from", models.read_state_dict(args.init_from), log)
    elif args.pretrained:
        log(f"pretrained: {args.model}'s weights loaded by {source(args.model)}, with a new classifier")
    if args.freeze_backbone:
        trainable = set(classifier_parameters(model, args.model))
        for p in model.parameters():
            p.requires_grad_(p in trainable)
