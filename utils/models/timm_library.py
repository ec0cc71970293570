"""`timm/<name>`: timm's models, their pretrained configs and its own Hub format. timm is imported only
when a `timm/` name is used, and only through `import_timm`."""

import difflib
import importlib
import sys
from pathlib import Path

from utils.models.errors import ModelError, missing_library
from utils.models.hub import cached_file, why_not_fetched
from utils.models.protocol import ImageSize, Library


def offline_weights_error(name, why, fetch):
    """The one line for weights that are not cached and could not be fetched (`why`: the error's kind, or the
    reason they cannot be: utils/models/hub.py)."""
    return ModelError(f"pretrained: the weights of {name} are not in the Hugging Face cache and could not be "
                      f"downloaded ({why}); run `{fetch}` where there is network and copy the "
                      f"cache (HF_HOME), or point HF_HUB_CACHE at one; set HF_HUB_OFFLINE=1 to skip the retries")


def import_timm(module="timm"):
    """timm's `module` (timm itself, timm.models, timm.optim, ...), timm imported without wandb.

    timm's training utilities (timm.utils.summary, which no code of ours calls) import wandb whenever it is
    installed: half a second of a run's start-up, 1.4 s in a process that has imported more, for a run that may not
    report to wandb at all (a run that does imports it where its tracker starts). Every import of timm in this
    project comes through here, so that the first one decides."""
    if "timm" not in sys.modules and "wandb" not in sys.modules:
        sys.modules["wandb"] = None  # `import wandb` raises ImportError: timm takes wandb for not installed
        try:
            importlib.import_module("timm")
        finally:
            del sys.modules["wandb"]
    return importlib.import_module(module)


class Timm(Library):
    name, prefix, card_header = "timm", "timm/", "library_name: timm\n"
    load_snippet = "import timm\nmodel = timm.create_model('hf-hub:{repo}', pretrained=True)"

    def check_name(self, arch):
        try:
            timm = import_timm()
        except ImportError:  # requirements-models.txt: torchvision's models need neither timm nor transformers
            raise missing_library(self.prefix, "timm") from None

        known = timm.list_pretrained() if "." in arch else timm.list_models()  # name.tag names pretrained weights
        if arch in known:
            return
        close = difflib.get_close_matches(arch, known, n=3, cutoff=0.6)
        hint = (f"; did you mean {', '.join(self.prefix + c for c in close)}?" if close
                else "; see timm.list_models() (architectures) and timm.list_pretrained() (name.tag weights)")
        raise ValueError(f"'{self.prefix}{arch}' is not a timm {'pretrained model' if '.' in arch else 'model'}{hint}")

    def build_image_or_video(self, arch, num_classes, *, drop_path, dropout, pretrained, class_names, in_chans=3,
                             image_size=None):
        timm = import_timm()

        asked = {key: value for key, value in (("drop_path_rate", drop_path), ("drop_rate", dropout))
                 if value is not None}
        if in_chans != 3:  # timm builds the stem for it, and adapts pretrained weights itself (adapt_input_conv)
            asked["in_chans"] = in_chans
        if pretrained and (why := _why_weights_not_fetched(arch)) is not None:  # at once, not after the retries
            raise offline_weights_error(self.prefix + arch, why, f"hf download {_hub_id(arch)}")
        try:  # at another size, timm resamples pretrained position embeddings as it loads them
            return timm.create_model(arch, pretrained=pretrained, num_classes=num_classes, **asked,
                                     **_sized(arch, image_size))
        except TypeError as e:
            if not asked or not any(key in str(e) for key in asked):
                raise
            raise ModelError(f"--drop_path/--dropout: timm's {arch} takes no {', '.join(asked)} argument ({e}); "
                             f"drop the option") from None
        except (OSError, RuntimeError) as e:  # huggingface_hub's LocalEntryNotFoundError is an OSError
            if not pretrained or isinstance(e, RuntimeError) and "download" not in str(e).lower():
                raise
            raise offline_weights_error(self.prefix + arch, type(e).__name__, f"hf download {_hub_id(arch)}") from None

    def fitted(self, model, state):
        """timm's own checkpoint_filter_fn of the model's family, as timm applies it to pretrained weights (a ViT's:
        position embeddings resampled to its patch grid), taken for the tensors whose shape differs from the
        model's and that it makes fit."""
        fit = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
        own = model.state_dict()
        differ = [k for k, v in state.items() if k in own and v.shape != own[k].shape]
        if fit is None or not differ:
            return state
        resampled = fit(dict(state), model)
        return {**state, **{k: resampled[k] for k in differ if k in resampled and resampled[k].shape == own[k].shape}}

    def pretrained_classes(self, arch):
        cfg = import_timm("timm.models").get_pretrained_cfg(arch)
        return cfg.num_classes if cfg is not None else None

    def data_config(self, arch):
        cfg = import_timm("timm.models").get_pretrained_cfg(arch)
        if cfg is None:
            return {}
        data = import_timm("timm.data").resolve_data_config(pretrained_cfg=cfg.to_dict())
        out = dict(image_size=data["input_size"][-1], mean=tuple(data["mean"]), std=tuple(data["std"]),
                   crop_pct=data["crop_pct"], origin=f"timm's pretrained_cfg of {cfg.architecture}.{cfg.tag}")
        if data["interpolation"] in ("bilinear", "bicubic"):
            out["interpolation"] = data["interpolation"]
        return out

    def check_image_size(self, arch, size, frames=None):
        """A model laid out for one size (a ViT's position embeddings), built at `size` on the meta device (no
        memory, no weights) and run once there: its patches must tile the image, and it must take the input."""
        cfg = import_timm("timm.models").get_pretrained_cfg(arch)
        if cfg is None or not cfg.fixed_input_size or size == cfg.input_size[-1]:
            return
        import torch

        native = cfg.input_size[-1]
        try:
            with torch.device("meta"):
                model = import_timm().create_model(arch, **_sized(arch, ImageSize(size)))
                patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
                if patch is not None and (size % patch[0] or size % patch[-1]):
                    raise ModelError(f"{self.prefix}{arch} cuts images into {patch[0]} px patches: --image_size must "
                                     f"be a multiple of {patch[0]} (its own is {native}), got {size}")
                model.eval()(torch.empty(1, 3, size, size))
        except ModelError:
            raise
        except (TypeError, RuntimeError, ValueError, AssertionError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"{self.prefix}{arch} is laid out for {native} px and cannot take {size} ({why}); "
                             f"give --image_size {native}") from None

    def layer_matcher(self, model):
        """timm's own grouping (its models' group_matcher), as its param_groups_layer_decay uses it."""
        return model.group_matcher(coarse=False) if hasattr(model, "group_matcher") else None

    def grad_checkpointing(self, model):
        """timm's own switch, set_grad_checkpointing."""
        try:
            model.set_grad_checkpointing(True)
        except (AssertionError, NotImplementedError, AttributeError) as e:
            why = str(e) or type(e).__name__
            raise ModelError(f"grad_checkpointing: timm's {type(model).__name__} does not support it ({why}); drop "
                             f"the option") from None
        return "grad_checkpointing: timm's set_grad_checkpointing(True)"

    def lora_targets(self, model):
        """A ViT's attention: its fused qkv projection and its output projection (not the patch embedding's proj)."""
        if any(name.endswith("attn.qkv") for name, _ in model.named_modules()):
            return r".*\.attn\.(qkv|proj)"
        return None

    def classifier(self, model):
        head = model.get_classifier()
        return head[0] if isinstance(head, tuple) else head  # a distilled ViT's (head, head_dist): the class token's

    def save(self, model, arch, folder, inputs, class_names):
        channels = inputs.get("in_chans", 3)  # multispectral and gray runs: timm builds it so from the folder too
        data = dict(input_size=(channels, inputs["image_size"], inputs["image_size"]), mean=tuple(inputs["mean"]),
                    std=tuple(inputs["std"]), interpolation=inputs["interpolation"],
                    crop_pct=inputs["image_size"] / inputs["resize"])
        # timm writes the model's own arguments (its img_size too) into config.json's model_args itself
        config = {"label_names": list(class_names), **({"model_args": {"in_chans": channels}} if channels != 3 else {})}
        import_timm("timm.models").save_for_hf(model, str(folder), model_config=config, safe_serialization=True,
                                               data_config=data)


def _sized(arch, image_size):
    """timm's arguments that make a model laid out for one input size (its pretrained config's fixed_input_size: a
    ViT's position embeddings) for ImageSize `image_size`: img_size, and dynamic_img_size when training shows it other
    sides too (timm then resamples the embeddings to each input); {} for its own size, or any size it takes."""
    cfg = import_timm("timm.models").get_pretrained_cfg(arch)
    if image_size is None or cfg is None or not cfg.fixed_input_size:
        return {}
    if image_size.side == cfg.input_size[-1] and not image_size.varying:
        return {}
    return {"img_size": image_size.side, **({"dynamic_img_size": True} if image_size.varying else {})}


def _why_weights_not_fetched(arch):
    """Why timm's pretrained weights of `arch` cannot be had now (utils/models/hub.py): None when they are cached, or
    their host (the Hub, or the URL of older weights) can be asked for them."""
    from torch.hub import get_dir

    cfg = import_timm("timm.models").get_pretrained_cfg(arch)
    if cfg is None or cfg.file:  # no weights (timm says so), or a local file
        return None
    if cfg.hf_hub_id:
        repo = cfg.hf_hub_id.split("@")[0]
        names = ("model.safetensors", "pytorch_model.bin", cfg.hf_hub_filename or "open_clip_pytorch_model.bin")
        return None if any(cached_file(repo, name) for name in names) else why_not_fetched()
    if cfg.url:
        return None if (Path(get_dir()) / "checkpoints" / Path(cfg.url).name).is_file() else why_not_fetched(cfg.url)
    return None


def _hub_id(arch):
    cfg = import_timm("timm.models").get_pretrained_cfg(arch)
    return (cfg.hf_hub_id if cfg is not None and cfg.hf_hub_id else f"timm/{arch}").split("@")[0]
