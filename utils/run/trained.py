"""A trained run of this script read back from what it recorded: its model, its input (modality, sizes,
normalisation, clip sampling), its classes and its weights, for predict.py, utils/inference.py and a --teacher
given as a run folder. Never from its training data: the run folder explains itself, wherever it was copied.

A run writes run.json when it starts (write_record). A folder written before runs recorded it holds config.yaml
only: its options are parsed again, as those versions read them (which looks at the data they name)."""

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import torch

from utils.config.options import parse
from utils.core.errors import UserError
from utils.core.io import write_json_atomic
from utils.data.transforms.input import Input
from utils.models.libraries import add_adapters, build_model, replace_classifier
from utils.models.protocol import ImageSize
from utils.models.lora import FROZEN_FILE, LoraOptions, frozen_fingerprint, merged
from utils.models.errors import ModelError
from utils.models.weights import read_state_dict
from utils.evaluation.knn import KNN_FILE, knn_head
from utils.evaluation.tasks import recorded_kind, task_kind
from utils.training.checkpoints import STATE_FILE

RECORD = "run.json"
FORMAT = 1  # run.json's layout; a newer one names its format


class RunError(UserError, ValueError):
    """A run folder, input or output that cannot be used as asked; the message is one line."""


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """What a trained run is, as it recorded it."""

    model: str  # its --model
    source: str  # its data source's kind (utils/data/sources/catalog.source_named gives the source back)
    input: Input  # the model's input: modality, sizes, crop, interpolation, normalisation, clips
    classes: list  # class names, in the classifier's order (labels.json)
    temporal_shift: bool  # TSM in its residual blocks
    test_clips: int  # the multi-view test's views (None: 1)
    test_crops: int
    video_decoder: str  # who decodes its video files
    # Its kind of labels by name (utils/evaluation/tasks.py kind_named): single_label, or multi_label (sigmoid
    # outputs, labels at a threshold). A run.json written before it was named has a bool "multi_label" instead.
    label_kind: str = "single_label"
    threshold: float = 0.5  # its --threshold (multi-label)
    temperature: float = 1.0  # --calibrate's: what its logits are divided by before the softmax
    # The weights file that the temperature and model/thresholds.json were fitted to: the ones model/ holds (the EMA's
    # with --model_ema). None: a run recorded before it was kept (they were taken to fit any weights).
    tuned_on: str = None
    batch: dict = None  # how its global batch was taken (utils/training/batch_size.py BatchPlan.record); None: not said
    lr_found: dict = None  # --lr auto: the LR range test's suggestions, its LR the "suggested" (None: --lr was given)
    # What --folds (its fold and fold seed), --exclude and --flip_labels made of the training split (utils/data/sources/
    # folds.py Remade.record); None: the split as the data has it
    split: dict = None
    lora: dict = None  # its --lora adapters (utils/models/lora.py LoraOptions), which its checkpoints hold unmerged
    probe: dict = None  # --probe: its kind, and the kNN's k and temperature (the bank: utils/run/probe.py KNN_FILE)


def trained_run(settings, classes, multi_label=False, temperature=1.0, batch=None, lr_found=None):
    """The TrainedRun of a run of these Settings, on these classes (several a sample: `multi_label`, the flag of the
    run's kind, which records it by name; `batch`: its BatchPlan; `lr_found`: --lr auto's suggestions; the split its
    source remade, once it built its data)."""
    remade = settings.source.remade
    chosen, data = settings.model, settings.data
    return TrainedRun(chosen.name, settings.source.kind, settings.input, list(classes), chosen.temporal_shift,
                      data.test_clips, data.test_crops, data.video_decoder, task_kind(multi_label).name,
                      settings.evaluation.threshold, temperature,
                      "model_ema.safetensors" if chosen.ema else "model.safetensors",
                      batch.record() if batch is not None else None, lr_found,
                      remade.record() if remade is not None else None,
                      dataclasses.asdict(settings.model.adapters) if settings.model.adapters else None,
                      probe_record(settings.probe))


def probe_record(options):
    """run.json's record of --probe's ProbeOptions `options` (None: the model trained)."""
    if options.probe is None:
        return None
    return {"probe": "knn", "k": options.knn_k, "temperature": options.knn_temperature} if options.probe == "knn" \
        else {"probe": "linear"}


def tuned_for(run, ema=False, checkpoint=None):
    """Whether the run's temperature and tuned thresholds were fitted to the weights that `ema` and `checkpoint` choose
    (load_run): its final ones that model/ holds, the EMA's with --model_ema; not a checkpoint's, nor the raw ones of a
    --model_ema run."""
    return checkpoint is None and (run.tuned_on is None or run.tuned_on == ("model_ema.safetensors" if ema else
                                                                          "model.safetensors"))


class Tempered(torch.nn.Module):
    """A calibrated run's model: its logits divided by the temperature --calibrate fitted (utils/evaluation/
    calibration.py), so that predict.py's probabilities, the ONNX graph and a teacher's are the calibrated ones."""

    def __init__(self, model, temperature):
        super().__init__()
        self.model, self.temperature = model, temperature

    def forward(self, pixels):
        return self.model(pixels) / self.temperature


def unwrapped(model):
    """The model as its library built it, without load_run's Tempered wrapper."""
    return model.model if isinstance(model, Tempered) else model


def write_record(out, run):
    """<out>/run.json: what a user of the TrainedRun `run`'s weights needs of it (its classes: labels.json)."""
    record = {key: value for key, value in dataclasses.asdict(run).items() if key != "classes"}
    del record["input"]["notes"]  # start-up lines
    write_json_atomic(out / RECORD, {"format": FORMAT, **record})


def read_run(run_dir):
    """The TrainedRun of a folder written by train_classification.py; a RunError naming what is missing."""
    run_dir = Path(run_dir)
    record, config, labels = run_dir / RECORD, run_dir / "config.yaml", run_dir / "labels.json"
    for file in (record if record.is_file() else config, labels):
        if not file.is_file():
            raise RunError(f"{run_dir}: no {file.name} (give a folder written by train_classification.py)")
    classes = [name for _, name in sorted(json.loads(labels.read_text()).items(), key=lambda kv: int(kv[0]))]
    if not record.is_file():
        return trained_run(read_settings(config), classes)
    saved = json.loads(record.read_text())
    try:
        if saved.get("format") != FORMAT:
            raise TypeError(f"format {saved.get('format')}")
        inp = dict(saved.pop("input"), notes=())
        saved["label_kind"] = recorded_kind(saved).name  # one read back of the kind, old records' bool too
        saved.pop("multi_label", None)
        for key in ("mean_std", "progressive_resize", "bands", "file_format", "train_crop_scale", "train_crop_ratio"):
            if key in inp:  # JSON keeps tuples as lists (bands, file_format, the crop's; a run.json may lack some)
                inp[key] = inp[key] and tuple(tuple(v) if isinstance(v, list) else v for v in inp[key])
        return TrainedRun(**{k: v for k, v in saved.items() if k != "format"}, input=Input(**inp), classes=classes)
    except TypeError as e:
        raise RunError(f"{record}: written by another version of the script, which this one cannot read ({e})") \
            from None


def _built(inp, varying):
    built = ImageSize.of(inp)
    return built._replace(varying=built.varying or varying)


def load_run(run_dir, ema=False, checkpoint=None, varying=False):
    """(the TrainedRun, its model in eval mode with the chosen weights on the CPU; divided by --calibrate's temperature
    where the weights are those it was fitted to: tuned_for).

    Weights: <run>/model.safetensors, model_ema.safetensors with `ema`, or a checkpoint folder's. The model is built
    for the size the run recorded (a ViT's embeddings at its eval crop), resampled to each input with `varying`."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    weights = Path(checkpoint) / "model.safetensors" if checkpoint else \
        run_dir / ("model_ema.safetensors" if ema else "model.safetensors")
    if not weights.is_file():
        hint = " (the run trained without --model_ema)" if ema else " (training has not finished: pass --checkpoint)"
        raise RunError(f"{weights} does not exist{hint if not checkpoint else ''}")
    model = build_model(run.model, num_classes=len(run.classes), video=run.input.video, class_names=run.classes,
                        temporal_shift=run.input.frames if run.temporal_shift else None,  # TSM, as the run trained
                        in_chans=run.input.channels, image_size=_built(run.input, varying))
    try:
        if checkpoint and run.lora:  # the adapters apart, the frozen weights in the run folder: merged once loaded
            load_adapted(model, run, run_dir, Path(checkpoint))
        else:
            model.load_state_dict(read_state_dict(weights))
    except (RuntimeError, ModelError) as e:
        raise RunError(f"{weights}: does not fit {run.model} with {len(run.classes)} classes "
                       f"({str(e).splitlines()[0][:200]})") from None
    model = merged(model)
    if (run.probe or {}).get("probe") == "knn":  # its classifier is the vote over the bank beside the weights
        if not (run_dir / KNN_FILE).is_file():
            raise RunError(f"{run_dir / KNN_FILE} does not exist: a --probe knn run votes with the memory bank it "
                           f"wrote there; copy the run folder whole")
        replace_classifier(model, run.model, knn_head(run_dir))
    calibrated = run.temperature != 1.0 and tuned_for(run, ema, checkpoint)  # T only where it was fitted
    return run, (Tempered(model, run.temperature) if calibrated else model).eval()


def load_adapted(model, run, run_dir, checkpoint):
    """A --lora run's checkpoint into `model` (built plain): the adapters added as the run added them, the frozen
    weights from the run folder (lora.FROZEN_FILE), what trained from the checkpoint; a RunError when they were not
    the checkpoint's frozen weights."""
    lora = LoraOptions(**{**run.lora, "targets": tuple(run.lora["targets"] or ()) or None})
    add_adapters(model, run.model, lora, log=lambda line: None)
    frozen = run_dir / FROZEN_FILE
    if not frozen.is_file():
        raise RunError(f"{frozen} does not exist: a --lora run's checkpoints hold what trains, and the run folder its "
                       f"frozen weights; copy the run folder whole")
    state = {**read_state_dict(frozen), **read_state_dict(checkpoint / "model.safetensors")}
    model.load_state_dict(state)  # strict: every tensor of the model, from one file or the other
    recorded = json.loads((checkpoint / STATE_FILE).read_text()).get("frozen_sha256")
    if recorded != frozen_fingerprint(model):
        raise RunError(f"{frozen} holds other frozen weights than {checkpoint} was trained on")


def read_settings(config):
    """The Settings of a run's config.yaml, as this version of the script parses them; a RunError naming the
    file when it cannot (an option since renamed, a model whose library is not installed here)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return parse(["--config", str(config)])
    except SystemExit:
        why = said.getvalue().strip().splitlines()[-1:] or ["no reason given"]
        raise RunError(f"{config}: this version of the script cannot read it ({why[0].split('error: ', 1)[-1]})") \
            from None
