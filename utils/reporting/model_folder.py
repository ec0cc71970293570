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


from utils.core.errors import UserError
from utils.core.io import usual_permissions, write_text_atomic
from utils.evaluation.tasks import read_kind
from utils.models.libraries import library, save_in_library_form


def input_config(inp, kind=None, temperature=None):
    """The eval input of the run (its Input, utils/data/transforms/input.py): what a user of the folder must feed the
    model; what its task says of its kind of labels (`kind`: a task's folder_fields; a multi-label run's outputs are
    each class's own, a sigmoid, not a softmax); with --calibrate, the temperature its logits are divided by before
    the softmax."""
    mean, std = inp.mean_std or ((0.0,) * 3, (1.0,) * 3)  # synthetic input is not normalised
    config = dict(image_size=inp.val_crop_size, resize=inp.val_resize_size, interpolation=inp.interpolation,
                  mean=list(mean), std=list(std))
    if inp.pixel_max is not None:  # files of their own channels and bits: which bands, divided by what, before mean/std
        config.update(in_chans=inp.channels, bands=list(inp.bands) if inp.bands else None, pixel_max=inp.pixel_max)
    if temperature is not None:
        config["temperature"] = temperature
    return {**config, **(kind or {})}


def save_model_folder(model, name, inp, class_names, folder, task, temperature=None):
    """Write `model` (a bare, unsharded module on the CPU, in the default memory format) to `folder` in its
    library's format, with the run's eval input `inp`, what its `task` says of its labels (utils/evaluation/tasks.py)
    and --calibrate's temperature; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    save_in_library_form(model, name, folder, input_config(inp, task.folder_fields, temperature), class_names)
    usual_permissions(folder)
    return folder


class PushError(UserError, RuntimeError):
    """The Hub upload failed; the message is one line, and every local file is kept."""


def model_card(repo, chosen, results, command, kind):
    """README.md of the model folder: what it is, its validation figures (those its `kind` of labels shows), how it
    was trained and loaded."""
    lib, _ = library(chosen.name)
    table = "\n".join(f"| {name} | {value:.4f} |" for name, value in kind.card_rows(results))
    return (f"---\n{lib.card_header}tags:\n- image-classification\n---\n\n# {repo}\n\n"
            f"`{chosen.name}` trained on `{results['dataset']}` ({results['train_samples']} training samples, "
            f"{len(results['class_names'])} classes, {results['epochs_completed']} epochs, "
            f"{results['world_size']} process(es)); weights: {'EMA' if chosen.ema else 'final'}.\n\n"
            f"| metric ({results['val_samples']} validation samples) | value |\n|---|---|\n{table}\n\n"
            f"## Command line\n\n```\n{command}\n```\n\n## Loading\n\n```python\n"
            f"{lib.load_snippet.format(repo=repo)}\n```\n")


def push_model_folder(folder, repo, chosen, results, command):
    """Write the model card into `folder`, then upload the folder to the Hub model repository `repo`. The run's kind
    of labels is the one its run folder (the model folder's parent) recorded."""
    kind = read_kind(folder.parent)
    write_text_atomic(folder / "README.md", model_card(repo, chosen, results, command, kind))
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, repo_type="model", exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                          commit_message=f"{chosen.name}: {kind.headline(results)}")
    except Exception as e:  # offline, no token, no rights: all the same to the user
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise PushError(f"push_to_hub: could not upload {folder} to {repo} ({type(e).__name__}: {reason}); every "
                        f"local file is kept: upload later with `hf upload {repo} {folder}`") from None
