"""<output_dir>/model/: the trained model in the form its own library loads, with no code of ours.

    torchvision   config.json (architecture, num_classes, builder options, labels, input) + model.safetensors:
                  torchvision.models.get_model(cfg["architecture"], num_classes=..., **cfg["builder_options"])
                  .load_state_dict(safetensors.torch.load_file("model/model.safetensors"))
    timm          timm's own config.json (architecture, num_classes, label_names, pretrained_cfg with our
                  input) + model.safetensors: timm.create_model("local-dir:<output_dir>/model", pretrained=True)
    transformers  save_pretrained (config.json with id2label, weights) and the image processor when the
                  model came with one: AutoModelForImageClassification.from_pretrained("<output_dir>/model")

The weights are the EMA's when --model_ema is on (the ones validation follows), else the raw ones.
"""

import json

from utils.core.errors import UserError
from utils.core.io import write_text_atomic
from utils.data import presets
from utils.models.libraries import HF, quiet_transformers, source
from utils.models.torchvision_models import build_options


def input_config(args):
    """The eval input of the run: what a user of the folder must feed the model."""
    mean, std = presets.mean_std(args) or ((0.0,) * 3, (1.0,) * 3)  # synthetic input is not normalised
    size = presets.val_crop_size(args)
    resize = size if presets.source_kind(args) == "digits" else presets.val_resize_size(args)  # digits: no crop
    return dict(image_size=size, resize=resize,
                interpolation=presets.interpolation(args), mean=list(mean), std=list(std))


def save_model_folder(model, args, class_names, folder):
    """Write `model` (a bare, unsharded module on the CPU, in the default memory format) to `folder` in its
    library's format; returns the folder."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    kind, inputs = source(args.model), input_config(args)
    if kind == "timm":
        from timm.models import save_for_hf

        data = dict(input_size=(3, inputs["image_size"], inputs["image_size"]), mean=tuple(inputs["mean"]),
                    std=tuple(inputs["std"]), interpolation=inputs["interpolation"],
                    crop_pct=inputs["image_size"] / inputs["resize"])
        save_for_hf(model, str(folder), model_config={"label_names": list(class_names)}, safe_serialization=True,
                    data_config=data)
    elif kind == "hf":
        model.save_pretrained(str(folder))
        _copy_image_processor(args.model[len(HF):], folder)
    else:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model.safetensors"))
        config = dict(library="torchvision", architecture=args.model, num_classes=len(class_names),
                      builder_options=build_options(args.model), labels=list(class_names), input=inputs)
        write_text_atomic(folder / "config.json", json.dumps(config, indent=2) + "\n")
    return folder


def _copy_image_processor(ref, folder):
    try:
        processor = quiet_transformers().AutoImageProcessor.from_pretrained(ref)
    except (OSError, ValueError):  # the model came without one
        return
    processor.save_pretrained(str(folder))



class PushError(UserError, RuntimeError):
    """The Hub upload failed; the message is one line, and every local file is kept."""


_LOAD = {
    "torchvision": "import json, torchvision\nfrom safetensors.torch import load_file\n"
                   "cfg = json.load(open('config.json'))\n"
                   "model = torchvision.models.get_model(cfg['architecture'], num_classes=cfg['num_classes'], "
                   "**cfg['builder_options'])\nmodel.load_state_dict(load_file('model.safetensors'))",
    "timm": "import timm\nmodel = timm.create_model('hf-hub:{repo}', pretrained=True)",
    "hf": "from transformers import AutoModelForImageClassification\n"
          "model = AutoModelForImageClassification.from_pretrained('{repo}')",
}


def model_card(repo, args, results, command):
    """README.md of the model folder: what it is, its validation figures, how it was trained and loaded."""
    kind = source(args.model)
    header = {"timm": "library_name: timm\n", "hf": "library_name: transformers\n"}.get(kind, "")
    rows = [("val top-1", results["val_top1"]), (f"val top-{results['topk']}", results["val_topk"]),
            ("val loss", results["val_loss"]), ("macro F1", results["macro_f1"])]
    rows += [("val top-1, EMA weights", results["val_ema_top1"])] if "val_ema_top1" in results else []
    table = "\n".join(f"| {name} | {value:.4f} |" for name, value in rows)
    return (f"---\n{header}tags:\n- image-classification\n---\n\n# {repo}\n\n"
            f"`{args.model}` trained on `{results['dataset']}` ({results['train_samples']} training samples, "
            f"{len(results['class_names'])} classes, {results['epochs_completed']} epochs, "
            f"{results['world_size']} process(es)); weights: {'EMA' if args.model_ema else 'final'}.\n\n"
            f"| metric ({results['val_samples']} validation samples) | value |\n|---|---|\n{table}\n\n"
            f"## Command line\n\n```\n{command}\n```\n\n## Loading\n\n```python\n"
            f"{_LOAD[kind].format(repo=repo)}\n```\n")


def push_model_folder(folder, repo, args, results, command):
    """Write the model card into `folder`, then upload the folder to the Hub model repository `repo`."""
    write_text_atomic(folder / "README.md", model_card(repo, args, results, command))
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, repo_type="model", exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                          commit_message=f"{args.model}: val top-1 {results['val_top1']:.4f}")
    except Exception as e:  # offline, no token, no rights: all the same to the user
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise PushError(f"push_to_hub: could not upload {folder} to {repo} ({type(e).__name__}: {reason}); every "
                        f"local file is kept: upload later with `hf upload {repo} {folder}`") from None
