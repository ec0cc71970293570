"""wandb / TensorBoard through Accelerate's trackers: set up on the main process, fed the metrics.jsonl rows."""

import os
from dataclasses import dataclass

TRACKERS = {"none": [], "wandb": ["wandb"], "tensorboard": ["tensorboard"], "all": ["wandb", "tensorboard"]}


def check_wandb_login(report_to):
    """Online wandb without a login would fail after the job is half set up: say so first, in one line."""
    if "wandb" not in TRACKERS[report_to] or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return None
    if _has_wandb_key():
        return None
    return ("report_to: wandb is online but not logged in: run `wandb login` (or set WANDB_API_KEY), or log "
            "offline with WANDB_MODE=offline and `wandb sync` later")


def _has_wandb_key():
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc(os.environ.get("NETRC") or os.path.expanduser("~/.netrc"))
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("//")[-1].split("/")[0]
    return auth.authenticators(host) is not None


@dataclass(frozen=True)
class TrackerOptions:
    """Where the run is shown, read from the options once (utils/config/settings.py); each field is its option's."""

    report_to: str  # a key of TRACKERS
    project_name: str
    run_name: str  # None: the run folder's name
    wandb_entity: str
    wandb_tags: tuple
    wandb_run_id: str


def start(accelerator, options, out, config, run_id=None):
    """Create the runs (main process only, inside Accelerate) as TrackerOptions `options` ask; returns the wandb run
    id, if any (`run_id`: a resumed run's, continued)."""
    if not TRACKERS[options.report_to]:
        return None
    accelerator.project_configuration.logging_dir = str(out)  # TensorBoard writes <out>/<project_name>
    wandb_kwargs = {"name": options.run_name or out.name, "dir": str(out), "entity": options.wandb_entity,
                    "tags": options.wandb_tags, "id": run_id or options.wandb_run_id, "resume": "allow"}
    accelerator.init_trackers(options.project_name, init_kwargs={"wandb": wandb_kwargs})
    for tracker in accelerator.trackers:  # TensorBoard's hparams take scalars only: a list option goes as its text
        tracker.store_init_configuration(scalars(config) if tracker.name == "tensorboard" else config)
    if "wandb" in TRACKERS[options.report_to] and accelerator.is_main_process:
        return accelerator.get_tracker("wandb", unwrap=True).id
    return None


def scalars(config):
    """`config` with its lists, tuples and dicts as their text (--mean 0.5 0.5 0.5, --probe_lrs' sweep)."""
    return {key: str(value) if isinstance(value, (list, tuple, dict)) else value for key, value in config.items()}


EXAMPLES = 16  # validation images in the wandb table
CONFUSION_PLOT_MAX = 100  # wandb's confusion chart holds one table row per cell: past this it is unreadable


def log_validation_media(accelerator, step, figures, class_names, examples, label_text):
    """wandb only: its own confusion-matrix chart and a table of validation images, predicted vs true (each label
    written by `label_text`, the task's)."""
    if "wandb" not in [tracker.name for tracker in accelerator.trackers] or not accelerator.is_main_process:
        return
    import wandb

    from utils.evaluation.tasks import figures_kind

    values = {}
    matrix = figures_kind(figures).confusion(figures)  # none for multi-label data (per-class AP is in the rows)
    if matrix is not None and len(class_names) <= CONFUSION_PLOT_MAX:
        cells = [[class_names[i], class_names[j], matrix[i][j]]
                 for i in range(len(class_names)) for j in range(len(class_names))]
        values["val_confusion_matrix"] = wandb.plot_table(
            "wandb/confusion_matrix/v1", wandb.Table(columns=["Actual", "Predicted", "nPredictions"], data=cells),
            {"Actual": "Actual", "Predicted": "Predicted", "nPredictions": "nPredictions"},
            {"title": f"confusion matrix, step {step}"})
    if examples is not None:
        images, predicted, true = examples
        rows = [[wandb.Image(image.permute(1, 2, 0).numpy()), label_text(p, class_names), label_text(t, class_names),
                 p == t]
                for image, p, t in zip(images, predicted, true)]
        values["val_examples"] = wandb.Table(columns=["image", "predicted", "true", "correct"], data=rows)
    accelerator.get_tracker("wandb").log(values, step=step)


def predictions_table(rows):
    """A wandb.Table of validation predictions: (image, true, predicted, probability, loss, which) rows."""
    import wandb

    data = [[wandb.Image(image) if image is not None else None, *rest] for image, *rest in rows]
    return wandb.Table(columns=["image", "true", "predicted", "probability", "loss", "which"], data=data)


def log_predictions(accelerator, step, rows):
    """wandb only: a table of validation predictions at the run's end, `rows()` giving (image, true, predicted,
    probability, loss, which) for the top losses and a sample of the rest (utils/reporting/failures.py); asked for only
    when there is a wandb run (it reads those images again)."""
    if "wandb" not in [tracker.name for tracker in accelerator.trackers] or not accelerator.is_main_process:
        return
    accelerator.get_tracker("wandb").log({"val_predictions": predictions_table(rows())}, step=step)


def log_best_predictions(accelerator, step, figure, rows):
    """wandb only: at a validation whose tracked figure (`figure`) beats every earlier one of the run (kept in the run's
    summary, so a resumed run compares with its past), the table of predictions as `val_predictions_best`."""
    if "wandb" not in [tracker.name for tracker in accelerator.trackers] or not accelerator.is_main_process:
        return
    run = accelerator.get_tracker("wandb", unwrap=True)
    best = run.summary.get("best_tracked_figure")
    if best is None or figure > best:
        accelerator.get_tracker("wandb").log({"val_predictions_best": predictions_table(rows())}, step=step)
        run.summary["best_tracked_figure"] = figure


def log_pictures(accelerator, step, paths):
    """The final PNGs (curves, confusion matrix) as images on every dashboard (none with --no_plots)."""
    if not accelerator.trackers:
        return
    import numpy as np
    from PIL import Image

    pictures = {path.stem: np.asarray(Image.open(path).convert("RGB")) for path in paths if path.exists()}
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.log_images({k: v[None] for k, v in pictures.items()}, step=step, dataformats="NHWC")
        elif tracker.name == "wandb":
            tracker.log_images({k: [v] for k, v in pictures.items()}, step=step)


def displayable(pixel_values):
    """The loader's images as uint8 (N, 3, H, W): as they are, or min-max scaled (synthetic float input, the raw
    values of multispectral or 16-bit files); of other than 3 channels, the first three shown (one: as gray)."""
    import torch

    x = pixel_values.cpu()
    x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x[:, :3]
    if x.dtype == torch.uint8:
        return x
    low = x.amin(dim=(1, 2, 3), keepdim=True)
    x = (x - low) / (x.amax(dim=(1, 2, 3), keepdim=True) - low).clamp(min=1e-6)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8)


def examples(batch, logits, decided):
    """The first EXAMPLES images of a validation batch (a clip's middle frame), displayable, with their predicted and
    true labels (`decided`: the task's, of their logits and labels): the wandb table's rows."""
    shown = batch["pixel_values"][:EXAMPLES]
    if shown.dim() == 5:  # video clips (N, C, T, H, W): their middle frames
        shown = shown[:, :, shown.shape[2] // 2]
    return (displayable(shown), *decided(logits[:EXAMPLES], batch["labels"][:EXAMPLES]))
