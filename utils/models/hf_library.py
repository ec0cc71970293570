"""`hf/<Hub repo or local folder>`: transformers' image and video classifiers, their image processors
and their own folder format. transformers is imported only when an `hf/` name is used."""

import difflib
import functools
import re
from pathlib import Path

from utils.models.errors import ModelError, missing_library
from utils.models.hub import cached_file, cached_models, why_not_fetched
from utils.models.protocol import INF, MATCH_PREV, Library
from utils.models.timm_library import offline_weights_error
from utils.models.stem import with_stem

# transformers' config attributes that --drop_path and --dropout set, first present wins
_DROP_PATH = ("drop_path_rate",)
_DROPOUT = ("classifier_dropout_prob", "classifier_dropout", "hidden_dropout_prob")
_PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}


def quiet_transformers():
    try:
        import transformers
    except ImportError:  # requirements-models.txt: torchvision's models need neither timm nor transformers
        raise missing_library("hf/", "transformers") from None

    transformers.utils.logging.set_verbosity_error()  # load reports and "newly initialised" notices
    transformers.utils.logging.disable_progress_bar()
    return transformers


@functools.cache
def _config(ref):
    return quiet_transformers().AutoConfig.from_pretrained(ref)


def _video_config(ref):
    """The config of a transformers video classifier, None for anything else (or a config not found:
    building the model says why)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES as VIDEO

    try:
        config = _config(ref)
    except (OSError, ValueError):
        return None
    return config if config.model_type in VIDEO else None


class Transformers(Library):
    name, prefix, card_header = "hf", "hf/", "library_name: transformers\n"
    load_snippet = ("from transformers import AutoModelForImageClassification\n"
                    "model = AutoModelForImageClassification.from_pretrained('{repo}')")

    def is_video(self, arch):
        """transformers' video classifiers (VideoMAE, TimeSformer, ViViT...); its image classifiers score frames."""
        return _video_config(arch) is not None

    def check_name(self, ref):
        quiet_transformers()  # installed? (one line saying how to install it, else)
        if not ref:
            raise ValueError("hf/ needs a Hub repository (hf/google/vit-base-patch16-224) or a local folder")
        folder = Path(ref)
        if folder.is_dir():
            if not (folder / "config.json").is_file():
                raise ValueError(f"hf/{ref}: the folder has no config.json (write one with the model's "
                                 f"save_pretrained)")
            return
        if "/" not in ref or ref.startswith((".", "/")) or ref.count("/") > 1:  # not a repo id: a folder not found
            raise ValueError(f"hf/{ref}: no such folder")
        if not cached_file(ref, "config.json") and (why := why_not_fetched()) is not None:
            close = difflib.get_close_matches(ref, cached_models(), n=3, cutoff=0.5)
            hint = f"; cached: {', '.join('hf/' + c for c in close)}" if close else ""
            raise ValueError(f"hf/{ref}: not in the Hugging Face cache and {why}; download it where there is network "
                             f"(hf download {ref}) and copy the cache (HF_HOME), or give a local folder{hint}")

    def build_image_or_video(self, ref, num_classes, *, drop_path, dropout, pretrained, class_names, in_chans=3,
                             image_size=None):
        transformers = quiet_transformers()
        names = class_names or [str(i) for i in range(num_classes)]
        labels = dict(num_labels=num_classes, id2label=dict(enumerate(names)),
                      label2id={n: i for i, n in enumerate(names)})
        try:
            config = transformers.AutoConfig.from_pretrained(ref, **labels)
        except OSError as e:
            raise offline_weights_error("hf/" + ref, type(e).__name__, f"hf download {ref}") from None
        for flag, value, keys in (("--drop_path", drop_path, _DROP_PATH), ("--dropout", dropout, _DROPOUT)):
            if value is None:
                continue
            key = next((k for k in keys if hasattr(config, k)), None)
            if key is None:
                raise ModelError(f"{flag}: {config.model_type} models have none of the config fields "
                                 f"{', '.join(keys)}; drop the option")
            setattr(config, key, value)
        if in_chans != 3 and not pretrained:  # built for it; pretrained weights: their RGB stem adapted below
            if getattr(config, "num_channels", None) is None:
                raise ModelError(f"hf/{ref}: its {config.model_type} config has no num_channels to build it for "
                                 f"{in_chans} channels; give 3-channel data (--bands) or another model")
            config.num_channels = in_chans
        video = self.is_video(ref)
        auto = transformers.AutoModelForVideoClassification if video else transformers.AutoModelForImageClassification
        try:
            model = (auto.from_pretrained(ref, config=config, ignore_mismatched_sizes=True) if pretrained
                     else auto.from_config(config))
        except OSError as e:
            raise offline_weights_error("hf/" + ref, type(e).__name__, f"hf download {ref}") from None
        except ValueError as e:  # not an image classifier (a text model, say)
            raise ModelError(f"hf/{ref}: not an image or video classification model for transformers "
                             f"({str(e).splitlines()[0]})") from None
        if pretrained:
            with_stem(model, in_chans, "hf/" + ref)
        if video:  # our clips are (B, C, T, H, W), as torchvision's video models take them; transformers'
            # are (B, T, C, H, W)
            model.register_forward_pre_hook(_frames_first)
        if image_size is not None and _resized(config, image_size.side):  # the config's embeddings, resampled to
            model.register_forward_pre_hook(_interpolated, with_kwargs=True)  # each input by transformers itself
        model.register_forward_hook(_logits)  # the loop wants logits; the state dict keeps transformers' names
        return model

    def pretrained_classes(self, ref):
        return _config(ref).num_labels

    def data_config(self, ref):
        transformers = quiet_transformers()
        try:
            processor = transformers.AutoImageProcessor.from_pretrained(ref)
        except (OSError, ValueError):  # a config-only folder: fall back to the config's image size
            size = getattr(_config(ref), "image_size", None)
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

    def check_image_size(self, ref, size, frames=None):
        """A model that cuts images into patches (ViT-like): its position embeddings are laid out for its config's
        image_size; another size where its forward resamples them (interpolate_pos_encoding) and the patches tile it."""
        config = _config(ref)
        if not _resized(config, size):
            return
        fixed, patch = config.image_size, config.patch_size if isinstance(config.patch_size, int) else None
        if not _interpolates(config):
            raise ModelError(f"hf/{ref} takes --image_size {fixed} only (its position embeddings are laid out for "
                             f"it, and its {config.model_type} model cannot resample them), got {size}")
        if patch and size % patch:
            raise ModelError(f"hf/{ref} cuts images into {patch} px patches: --image_size must be a multiple of "
                             f"{patch} (its own is {fixed}), got {size}")

    def check_clip_frames(self, ref, frames):
        """A video model's position embeddings are laid out for its config's num_frames."""
        if not self.is_video(ref):
            return
        clip = getattr(_config(ref), "num_frames", None)
        if isinstance(clip, int) and frames != clip:
            raise ModelError(f"hf/{ref} takes clips of {clip} frames only (--clip_len x --num_segments), got {frames}")

    def layer_matcher(self, model):
        """The base model's embeddings, then its encoder's blocks in order (ViT, DeiT, BEiT, VideoMAE:
        [encoder.]layer[s].N; Swin: encoder.layers.S.blocks.B, each stage's closing downsample with its last block;
        ConvNeXt: encoder.stages.S.layers.B, each stage's opening downsample with its first block), the rest of
        the base model (final norms, pooler) with the last block, and what lies outside it (the classifier)
        last. None when no encoder blocks are found."""
        prefix = model.base_model_prefix + "."
        if not any(_hf_block(n[len(prefix):]) for n, _ in model.named_parameters() if n.startswith(prefix)):
            return None

        def layer(name):
            if not name.startswith(prefix):
                return (INF,)
            rest = name[len(prefix):]
            if rest.startswith(("embeddings.", "embedder.")):
                return (0,)
            return _hf_block(rest) or (1, MATCH_PREV)
        return layer

    def grad_checkpointing(self, model):
        """transformers' own switch, gradient_checkpointing_enable (non-reentrant, as torch recommends)."""
        if not model.supports_gradient_checkpointing:
            raise ModelError(f"grad_checkpointing: transformers' {type(model).__name__} does not support it; drop "
                             f"the option")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return "grad_checkpointing: transformers' gradient_checkpointing_enable()"

    def lora_targets(self, model):
        """The attention's query and value projections, as transformers names them (query/value, q_proj/v_proj)."""
        names = {name.rpartition(".")[2] for name, _ in model.named_modules()}
        for pair in (["query", "value"], ["q_proj", "v_proj"]):
            if set(pair) <= names:
                return pair
        return None

    def classifier(self, model):
        """`classifier` (or the last module outside the base model: a VideoMAE's fc_norm comes before it)."""
        head = getattr(model, "classifier", None)
        outside = [m for n, m in model.named_children() if n != model.base_model_prefix]
        if head is None and not outside:
            raise ModelError(f"transformers' {type(model).__name__} has no classifier outside its base model")
        return head if head is not None else outside[-1]

    def classifier_parameters(self, model):
        """Everything outside the base model."""
        prefix = model.base_model_prefix + "."
        return [p for n, p in model.named_parameters() if not n.startswith(prefix)]

    def save(self, model, ref, folder, inputs, class_names):
        if inputs.get("multi_label"):  # transformers' pipelines and losses then take a sigmoid per class
            model.config.problem_type = "multi_label_classification"
        model.save_pretrained(str(folder))
        try:
            processor = quiet_transformers().AutoImageProcessor.from_pretrained(ref)
        except (OSError, ValueError):  # the model came without one
            return
        processor.save_pretrained(str(folder))


def _hf_block(rest):
    """The layer ordinal of a parameter of an encoder block (name below the base model), else None."""
    # transformers 5 names some models' blocks layers.N right under the base model (ViT, BEiT), others keep encoder.
    if staged := re.match(r"(?:encoder\.)?(?:layers|stages)\.(\d+)\.(?:blocks|layers)\.(\d+)\.", rest):
        return (1, int(staged[1]), int(staged[2]))
    if closing := re.match(r"(?:encoder\.)?layers\.(\d+)\.downsample\.", rest):
        return (1, int(closing[1]), MATCH_PREV)
    if opening := re.match(r"(?:encoder\.)?stages\.(\d+)\.downsampling_layer\.", rest):
        return (1, int(opening[1]), 0)
    if block := re.match(r"(?:encoder\.)?layers?\.(\d+)\.", rest):
        return (1, int(block[1]))
    return None


def _resized(config, side):
    """Whether a model of `config` cuts images into patches laid out for another size than `side` (ViT-like)."""
    fixed = getattr(config, "image_size", None)
    return hasattr(config, "patch_size") and isinstance(fixed, int) and side != fixed


def _interpolates(config):
    """Whether the image classifier of `config` resamples its position embeddings to its input when asked to
    (transformers' interpolate_pos_encoding: ViT, DeiT, BEiT, Data2Vec, ViT-MSN, ...)."""
    import inspect

    mapping = quiet_transformers().models.auto.modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING
    try:
        forward = mapping[type(config)].forward
    except KeyError:
        return False
    return "interpolate_pos_encoding" in inspect.signature(forward).parameters


def _interpolated(module, positional, kwargs):
    return positional, {**kwargs, "interpolate_pos_encoding": True}


def _frames_first(module, inputs):
    return (inputs[0].transpose(1, 2),)


def _logits(module, inputs, output):
    return output.logits
