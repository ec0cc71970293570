"""What a run needs beyond its options, derived from them once, while they are parsed (options.parse), into one
frozen object: the data source, the model's input and the names for files and dashboards, and where the warmup
came from; and those of a resumed checkpoint made before an option existed (as_checkpointed)."""

from dataclasses import dataclass, replace

from utils.data.sources.protocol import DataSource
from utils.data.transforms.input import Input
from utils.models.libraries import ModelOptions
from utils.training import checkpoints
from utils.training.schedule import DEFAULT_WARMUP_EPOCHS, warmup_epochs


@dataclass(frozen=True)
class Settings:
    source: DataSource  # where the data comes from: its datasets, names, resume signature (utils/data/sources/)
    input: Input  # modality, sizes per phase, clips, mean/std, interpolation (utils/data/transforms/input.py)
    source_name: str  # how results.json and the run folder name the data
    sample_unit: str  # what the console calls a sample: clips or images
    warmup_notes: tuple  # where the warmup came from, when it is not what was asked
    model: ModelOptions  # what the options ask of the model (utils/models/libraries.py)


def model_options(args):
    """The model's options, typed (utils/models/libraries.py)."""
    return ModelOptions(name=args.model, pretrained=args.pretrained, weights=args.weights, init_from=args.init_from,
                        freeze_backbone=args.freeze_backbone, drop_path=args.drop_path, dropout=args.dropout,
                        zero_init_residual=args.zero_init_residual, temporal_shift=args.temporal_shift,
                        grad_checkpointing=args.grad_checkpointing, sync_bn=args.sync_bn,
                        channels_last=args.channels_last, ema=args.model_ema, ema_decay=args.model_ema_decay,
                        ema_warmup=args.model_ema_warmup)


def settle(args, source, inp, model):
    """The Settings of the run `args` describes: its data `source`, model input `inp` and ModelOptions `model`,
    picked and resolved once."""
    warmup = warmup_epochs(args)
    shortened = args.warmup_epochs is None and warmup < DEFAULT_WARMUP_EPOCHS
    return Settings(source=source, input=inp, model=model, source_name=source.name(args),
                    sample_unit="clips" if source.video else "images",
                    warmup_notes=(f"warmup: {warmup:g} epochs (the default {DEFAULT_WARMUP_EPOCHS:g}, shortened to a "
                                  f"fifth of --epochs {args.epochs})",) if shortened else ())


# The random train crop of images before --train_crop_scale and --train_crop_ratio existed (timm's and torchvision's):
# a checkpoint that records neither option was made with it, and its run continues with it whatever the default is now.
EARLIER_CROP = {"train_crop_scale": (0.08, 1.0), "train_crop_ratio": (3 / 4, 4 / 3)}


def as_checkpointed(settings, args, folder, log=print):
    """The Settings a run resumed from checkpoint `folder` (None: a fresh start) trains with: those of the options,
    but for the train crop of a checkpoint made before its options existed (EARLIER_CROP)."""
    if folder is None or "train_crop_scale" in settings.source.unused:
        return settings
    recorded = checkpoints.read_state(folder).get("options") or {}
    earlier = {key: value for key, value in EARLIER_CROP.items() if key not in recorded and getattr(args, key) is None}
    if not earlier:
        return settings
    kept = ", ".join(f"{key} {low:g}-{high:.4g}" for key, (low, high) in earlier.items())
    log(f"resume: {folder} was made before {' and '.join('--' + key for key in earlier)} existed: its run continues "
        f"with the crop it was made with ({kept})")
    return replace(settings, input=replace(settings.input, **earlier))
