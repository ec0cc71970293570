"""What a run needs beyond its options, derived from them once, while they are parsed (options.parse), into one
frozen object: the data source, the model's input and the names for files and dashboards, and where the warmup
came from; and those of a resumed checkpoint made before an option existed (as_checkpointed)."""

from dataclasses import dataclass, replace

from utils.data.sources.protocol import DataSource
from utils.data.transforms.batch import BatchOptions
from utils.data.transforms.input import Input
from utils.models.libraries import ModelOptions
from utils.reporting.trackers import TrackerOptions
from utils.training import checkpoints
from utils.training.balance import BalanceOptions
from utils.training.losses import LossOptions
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
    losses: LossOptions  # of the loss (utils/training/losses.py),
    balance: BalanceOptions  # of the class balance (utils/training/balance.py),
    trackers: TrackerOptions  # and of the dashboards (utils/reporting/trackers.py)


def typed_options(args):
    """{subsystem: its options, typed}: what check_args checks and Settings hands down."""
    return {"model": model_options(args), "optimizer": optimizer_options(args), "schedule": schedule_options(args),
            "losses": loss_options(args), "batch": batch_options(args),
            "balance": BalanceOptions(sampler=args.sampler, sampler_power=args.sampler_power,
                                      class_weights=args.class_weights, logit_adjust=args.logit_adjust,
                                      pos_weight=args.pos_weight),
            "trackers": TrackerOptions(report_to=args.report_to, project_name=args.project_name, run_name=args.run_name,
                                       wandb_entity=args.wandb_entity, wandb_run_id=args.wandb_run_id,
                                       wandb_tags=None if args.wandb_tags is None else tuple(args.wandb_tags))}


def batch_options(args):
    """A training batch's options on the device, typed (utils/data/transforms/batch.py)."""
    return BatchOptions(mixup_alpha=args.mixup_alpha, cutmix_alpha=args.cutmix_alpha, mix_prob=args.mix_prob,
                        random_erase=args.random_erase, channels_last=args.channels_last, seed=args.seed)


def loss_options(args):
    """The loss's options, typed (utils/training/losses.py)."""
    return LossOptions(label_smoothing=args.label_smoothing, bce_loss=args.bce_loss,
                       bce_target_thresh=args.bce_target_thresh, logit_adjust=args.logit_adjust,
                       focal_gamma=args.focal_gamma, multi_label_loss=args.multi_label_loss, distill=args.distill,
                       distill_alpha=args.distill_alpha, distill_temperature=args.distill_temperature)


def model_options(args):
    """The model's options, typed (utils/models/libraries.py)."""
    return ModelOptions(name=args.model, pretrained=args.pretrained, weights=args.weights, init_from=args.init_from,
                        freeze_backbone=args.freeze_backbone, drop_path=args.drop_path, dropout=args.dropout,
                        zero_init_residual=args.zero_init_residual, temporal_shift=args.temporal_shift,
                        grad_checkpointing=args.grad_checkpointing, sync_bn=args.sync_bn,
                        channels_last=args.channels_last, ema=args.model_ema, ema_decay=args.model_ema_decay,
                        ema_warmup=args.model_ema_warmup, ema_steps=args.model_ema_steps)


def optimizer_options(args):
    """The optimizer's options, typed (utils/training/schedule.py)."""
    return OptimizerOptions(name=args.optimizer, lr=args.lr, lr_scale_batch=args.lr_scale_batch,
                            batch_size=args.batch_size, grad_accum_steps=args.grad_accum_steps,
                            momentum=args.momentum, nesterov=args.nesterov, weight_decay=args.weight_decay,
                            norm_weight_decay=args.norm_weight_decay, bias_weight_decay=args.bias_weight_decay,
                            layer_decay=args.layer_decay, eps=args.opt_eps,
                            betas=None if args.opt_betas is None else tuple(args.opt_betas),
                            kwargs=tuple(args.opt_kwargs or ()))


def schedule_options(args):
    """The LR schedule's options, typed (utils/training/schedule.py)."""
    return ScheduleOptions(epochs=args.epochs, warmup_epochs=args.warmup_epochs,
                           warmup_start_factor=args.warmup_start_factor, kind=args.lr_schedule, min_lr=args.min_lr,
                           milestones=None if args.lr_milestones is None else tuple(args.lr_milestones),
                           gamma=args.lr_gamma)


def settle(args, source, inp, typed):
    """The Settings of the run `args` describes: its data `source`, model input `inp` and the typed options of its
    subsystems (`typed`: model, optimizer, schedule), picked and resolved once."""
    warmup = warmup_epochs(typed["schedule"])
    shortened = args.warmup_epochs is None and warmup < DEFAULT_WARMUP_EPOCHS
    return Settings(source=source, input=inp, **typed, source_name=source.name(args),
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
