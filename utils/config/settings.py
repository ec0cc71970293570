"""The run's configuration, the one currency below the parser: every option typed once, in the section of the code
that reads it, and what the run derives from them once, while they are parsed (options.parse): the data source, the
model's input, the names for files and dashboards, where the warmup came from. It is frozen: what a run resolves later
(the batch plan, --lr auto's LR, a checkpoint's own values) comes as a new Settings from a pure function (here,
utils/run/lr_range.py, utils/run/batch_size.py), and options.flat_options turns it back into option names."""

from dataclasses import dataclass, fields, replace

import numpy as np

from utils.config.sections import EndOptions, LaunchOptions
from utils.data.sources.catalog import source_for
from utils.data.sources.protocol import DataOptions, DataSource
from utils.data.transforms.batch import BatchOptions
from utils.data.transforms.input import Input, InputOptions, resolve_input
from utils.evaluation.options import EvaluationOptions
from utils.models.libraries import ModelOptions
from utils.reporting.trackers import TrackerOptions
from utils.training import checkpoints
from utils.training.balance import BalanceOptions
from utils.training.batch_size import BatchPlan, BatchSizeOptions
from utils.training.cadence import LoopOptions
from utils.training.checkpoints import CheckpointOptions
from utils.training.early_stop import EarlyStopOptions
from utils.training.lr_range import RangeTestOptions
from utils.training.objective import LossOptions
from utils.training.probes import ProbeOptions
from utils.training.run_folder import FolderOptions
from utils.training.schedule import DEFAULT_WARMUP_EPOCHS, OptimizerOptions, ScheduleOptions, warmup_epochs


@dataclass(frozen=True)
class Settings:
    source: DataSource  # where the data comes from: its datasets, names, resume signature (utils/data/sources/)
    input: Input  # modality, sizes per phase, clips, mean/std, interpolation (utils/data/transforms/input.py)
    source_name: str  # how results.json and the run folder name the data
    sample_unit: str  # what the console calls a sample: clips or images
    warmup_notes: tuple  # where the warmup came from, when it is not what was asked
    model: ModelOptions  # what the options ask of the model (utils/models/libraries.py),
    optimizer: OptimizerOptions  # of the optimizer and
    schedule: ScheduleOptions  # of the LR schedule (utils/training/schedule.py),
    batch: BatchOptions  # of a training batch on the device (utils/data/transforms/batch.py),
    losses: LossOptions  # of the loss (utils/training/objective.py),
    balance: BalanceOptions  # of the class balance (utils/training/balance.py),
    trackers: TrackerOptions  # of the dashboards (utils/reporting/trackers.py),
    data: DataOptions  # of the data (utils/data/sources/protocol.py),
    input_options: InputOptions  # of the model's input, which `input` resolves (utils/data/transforms/input.py),
    folder: FolderOptions  # of the run folder (utils/training/run_folder.py),
    probe: ProbeOptions  # of a probe on frozen features (utils/training/probes.py),
    batch_size: BatchSizeOptions  # of the global batch (utils/training/batch_size.py),
    checkpoints: CheckpointOptions  # of the checkpoints (utils/training/checkpoints.py),
    early_stop: EarlyStopOptions  # of stopping early (utils/training/early_stop.py),
    range_test: RangeTestOptions  # of the LR range test (utils/training/lr_range.py),
    evaluation: EvaluationOptions  # of validation (utils/evaluation/options.py),
    launch: LaunchOptions  # of the launch (utils/run/accelerator.py),
    loop: LoopOptions  # of the training loop (utils/training/cadence.py),
    end: EndOptions  # and of the run's end (utils/run/records.py): utils/config/sections.py
    # How the global batch is taken, once taken (utils/run/batch_size.py take_batch): None before, and while
    # --batch_size auto is still to be found. The micro-batch and accumulation in force are also the optimizer's.
    plan: BatchPlan = None


# The typed fields read from an option of another name; every other field is read from the option of its own name.
RENAMED = {ModelOptions: {"name": "model", "ema": "model_ema", "ema_decay": "model_ema_decay",
                          "ema_warmup": "model_ema_warmup", "ema_steps": "model_ema_steps"},
           OptimizerOptions: {"name": "optimizer", "eps": "opt_eps", "betas": "opt_betas", "kwargs": "opt_kwargs"},
           ScheduleOptions: {"kind": "lr_schedule", "milestones": "lr_milestones", "gamma": "lr_gamma"}}
TYPED = {"model": ModelOptions, "optimizer": OptimizerOptions, "schedule": ScheduleOptions, "batch": BatchOptions,
         "losses": LossOptions, "balance": BalanceOptions, "trackers": TrackerOptions, "data": DataOptions,
         "input_options": InputOptions, "folder": FolderOptions, "probe": ProbeOptions, "batch_size": BatchSizeOptions,
         "checkpoints": CheckpointOptions, "early_stop": EarlyStopOptions, "range_test": RangeTestOptions,
         "evaluation": EvaluationOptions, "launch": LaunchOptions, "loop": LoopOptions, "end": EndOptions}


def option_name(kind, field):
    """The option a field of section `kind` is read from: its own name, unless RENAMED."""
    return RENAMED.get(kind, {}).get(field, field)


def read_options(args, kind):
    """The `kind` (one of TYPED) of the options `args`: each field its option's value (RENAMED names the others), a
    list as a tuple (the objects are frozen)."""
    def value(option):
        found = getattr(args, option)
        return tuple(found) if isinstance(found, list) else found

    return kind(**{field.name: value(option_name(kind, field.name)) for field in fields(kind)})


def typed_options(args):
    """{subsystem: its options, typed} (TYPED): what check_args checks and Settings hands down."""
    return {name: read_options(args, kind) for name, kind in TYPED.items()}


def input_for(args):
    """The Input of the run the options `args` describe, resolved as the run resolves it: for tools and tests."""
    return _source_and_input(args)[2]


def datasets_for(args, rank=0, world=1):
    """(train, val, class names, notes) of the data the options `args` name, built as the run builds them (rank of
    world: a stream's share), for tools and tests. The train set's augmentation is seeded per sample: call its
    set_epoch before each epoch."""
    data, source, inp = _source_and_input(args)
    return source.datasets(data, inp, rank, world)


def class_counts(args):
    """Each class's training samples in the data the options `args` name, or None where a sample has several labels
    or the labels come only with a pass over the data (a stream): what tune.py reads the data's balance from."""
    data, source, inp = _source_and_input(args)
    if not source.labels_ahead:
        return None
    train, _, class_names, _ = source.datasets(data, inp, 0, 1)
    rows = source.labels(train)
    if any(isinstance(row, (list, tuple)) for row in rows):
        return None
    return np.bincount(np.asarray(rows, dtype=np.int64), minlength=len(class_names))


def _source_and_input(args):
    """(DataOptions, the source they name, the Input resolved for it): each picked and read once."""
    data = read_options(args, DataOptions)
    source = source_for(data)
    return data, source, resolve_input(read_options(args, InputOptions), source, source.pixel_format(data))


def settle(args, source, inp, typed):
    """The Settings of the run `args` describes: its data `source`, model input `inp` and the typed options of its
    subsystems (`typed`: typed_options'), picked and resolved once."""
    warmup = warmup_epochs(typed["schedule"])
    shortened = args.warmup_epochs is None and warmup < DEFAULT_WARMUP_EPOCHS
    return Settings(source=source, input=inp, **typed, source_name=source.name(typed["data"]),
                    sample_unit="clips" if source.video else "images",
                    warmup_notes=(f"warmup: {warmup:g} epochs (the default {DEFAULT_WARMUP_EPOCHS:g}, shortened to a "
                                  f"fifth of --epochs {args.epochs})",) if shortened else ())


# The random train crop of images before --train_crop_scale and --train_crop_ratio existed (timm's and torchvision's):
# a checkpoint that records neither option was made with it, and its run continues with it whatever the default is now.
EARLIER_CROP = {"train_crop_scale": (0.08, 1.0), "train_crop_ratio": (3 / 4, 4 / 3)}


def as_checkpointed(settings, folder, log=print):
    """The Settings a run resumed from checkpoint `folder` (None: a fresh start) trains with: those of the options,
    but for the train crop of a checkpoint made before its options existed (EARLIER_CROP)."""
    if folder is None or "train_crop_scale" in settings.source.unused:
        return settings
    recorded = checkpoints.read_state(folder).get("options") or {}
    asked = settings.input_options
    earlier = {key: value for key, value in EARLIER_CROP.items() if key not in recorded and getattr(asked, key) is None}
    if not earlier:
        return settings
    kept = ", ".join(f"{key} {low:g}-{high:.4g}" for key, (low, high) in earlier.items())
    log(f"resume: {folder} was made before {' and '.join('--' + key for key in earlier)} existed: its run continues "
        f"with the crop it was made with ({kept})")
    return replace(settings, input=replace(settings.input, **earlier))
