"""The checks across options, one function per concern, run on the parsed options before anything is
built: each bad combination stops the run with one line naming the option (ConfigError, exit 2)."""

from utils.core.errors import UserError
from utils.data.catalog import source_for
from utils.data.presets import image_size, resolve_input
from utils.evaluation.metrics import MetricError, parse_metric_spec
from utils.models.libraries import check_clip_frames, check_image_size, check_model_name, is_video_model, named_weights
from utils.training.schedule import warmup_epochs


class ConfigError(UserError, ValueError):
    """A bad option value; the message names the option."""


def check_args(args):
    """Reject impossible combinations before anything is built: the data, how it is streamed, video,
    augmentation, the schedule, the run's own bookkeeping, then the model (which may import its library)."""
    def need(ok, key, problem):
        if not ok:
            raise ConfigError(f"{key}: {problem}, got {getattr(args, key)!r}")

    source = source_for(args)  # utils/data/source.py: its kind, modality, own input
    for check in (_data, _streaming, _video, _augmentation, _schedule, _run, _model):
        check(args, need, source)


def _at_least(args, need, keys, low, optional=False):
    for key in keys:
        value = getattr(args, key)
        need((optional and value is None) or value >= low, key, f"must be >= {low}")


def _data(args, need, source):
    """Where the data comes from: one source, its sizes and subsets."""
    _at_least(args, need, ("synthetic_train_samples", "synthetic_val_samples"), 1)
    _at_least(args, need, ("image_size", "max_train_samples", "max_val_samples"), 1, optional=True)
    for key in ("max_train_samples", "max_val_samples"):  # else silently ignored
        need(getattr(args, key) is None or source.kind not in ("synthetic", "moving_digits"), key,
             "applies to the digits, folders, lists and Hub datasets; synthetic data is sized with "
             "--synthetic_train_samples/--synthetic_val_samples, the moving digits are used whole")
    need(0 < args.val_fraction < 1, "val_fraction", "must be in (0, 1)")
    need(args.num_workers is None or args.num_workers >= 0, "num_workers", "must be >= 0")
    need(args.num_classes >= 2, "num_classes", "must be >= 2")
    need(not (args.train_dir and args.data_dir), "data_dir", "give --train_dir [--val_dir] or --data_dir, not both")
    need(args.val_dir is None or args.train_dir, "val_dir", "needs --train_dir")
    need(not (args.train_list and (args.train_dir or args.data_dir)), "train_list",
         "give list files or folders, not both")
    need(args.val_list is None or args.train_list, "val_list", "needs --train_list")
    need(args.train_list is None or args.val_list, "train_list", "needs --val_list too")
    need(not args.train_list or args.dataset == "digits", "dataset",
         "reads no list file: drop it when giving --train_list")
    folders = args.train_dir or args.data_dir
    need(not folders or args.dataset in ("digits", "imagefolder"), "dataset",
         "reads no folder: drop it (or say imagefolder) when giving --train_dir/--data_dir")
    need(args.dataset != "imagefolder" or folders, "dataset", "imagefolder needs --data_dir or --train_dir")


def _streaming(args, need, source):
    """--streaming reads shards named by --dataset, in epochs of --steps_per_epoch."""
    if args.streaming:
        need(source.kind == "images" and not (args.train_dir or args.data_dir), "streaming",
             "reads a Hub dataset or local shard files named by --dataset, not the embedded data or folders of images")
        need(args.max_train_samples is None, "max_train_samples", "cannot subset a stream: set its length with "
             "--steps_per_epoch")
        need(args.ra_reps == 1, "ra_reps", "repeated augmentation needs map-style data (it deals copies of a sample "
             "to processes): not with --streaming")
        need(not args.sync_bn, "sync_bn", "not with --streaming: a process past the end of its shards takes padding "
             "steps, without SyncBatchNorm's collective, and the others would wait for it")
    need(args.steps_per_epoch is None or args.streaming, "steps_per_epoch",
         "sets the epoch of --streaming data (map-style epochs are a pass over the data)")
    need(args.steps_per_epoch is None or args.steps_per_epoch >= 1, "steps_per_epoch", "must be >= 1")
    need(args.shuffle_buffer >= 1, "shuffle_buffer", "must be >= 1")


def _video(args, need, source):
    """Clips and the multi-view test; the image-only crop options."""
    _at_least(args, need, ("clip_len", "frame_interval", "num_segments"), 1)
    _at_least(args, need, ("test_clips", "test_crops"), 1, optional=True)
    video = source.video
    need(video or not (args.test_clips or args.test_crops), "test_clips", "multi-view test is for video data")
    sizes = ("train_crop_size", "progressive_resize", "val_crop_size", "val_resize_size")
    given = [key for key in sizes if getattr(args, key) is not None]
    need(not video or not given, given[0] if given else "", "is for images (clips use --image_size)")


def _augmentation(args, need, source):
    """Crops, progressive resizing, MixUp/CutMix, RandAugment, erasing, repeated augmentation."""
    _at_least(args, need, ("train_crop_size", "val_crop_size", "val_resize_size"), 1, optional=True)
    if args.progressive_resize:
        low, high, start, end = args.progressive_resize
        need(args.progressive_resize_step >= 1, "progressive_resize_step", "must be >= 1")
        need(1 <= low <= high and 0 <= start <= end, "progressive_resize",
             "must be LOW HIGH START END with 1 <= LOW <= HIGH and 0 <= START <= END")
        need(low % args.progressive_resize_step == 0 and high % args.progressive_resize_step == 0,
             "progressive_resize", f"LOW and HIGH must be multiples of --progressive_resize_step "
             f"{args.progressive_resize_step}")
        need(args.train_crop_size is None, "train_crop_size", "leave it out with --progressive_resize, which sets "
             "the train crop of each epoch")
        need(source.kind != "synthetic", "progressive_resize", "synthetic data has no crop to resize "
             "(it is generated at --image_size)")
    need(args.val_resize_size is None or args.val_resize_size >= (args.val_crop_size or image_size(args, source)),
         "val_resize_size", "must be at least the val crop size")
    _at_least(args, need, ("mixup_alpha", "cutmix_alpha"), 0)
    need(0 <= args.mix_prob <= 1, "mix_prob", "must be in [0, 1]")
    need(args.ra_reps >= 1, "ra_reps", "must be >= 1")
    need(args.crop_pct is None or 0 < args.crop_pct <= 1, "crop_pct", "must be in (0, 1]")
    need(args.std is None or all(v > 0 for v in args.std), "std", "must be > 0")
    need(args.rand_augment is None or 0 <= args.rand_augment <= 30, "rand_augment", "must be in [0, 30]")
    need(0 <= args.random_erase <= 1, "random_erase", "must be in [0, 1]")


def _schedule(args, need, source):
    """The optimizer and the LR schedule, laid out in epochs."""
    _at_least(args, need, ("epochs", "batch_size", "grad_accum_steps"), 1)
    need(args.lr_scale_batch is None or args.lr_scale_batch >= 1, "lr_scale_batch", "must be >= 1")
    _at_least(args, need, ("weight_decay", "norm_weight_decay", "bias_weight_decay", "min_lr"), 0)
    need(args.max_train_steps is None or args.max_train_steps >= 0, "max_train_steps", "must be >= 0")
    need(args.lr > 0, "lr", "must be > 0")
    need(0 <= args.momentum < 1, "momentum", "must be in [0, 1)")
    need(0 <= args.label_smoothing < 1, "label_smoothing", "must be in [0, 1)")
    need(args.clip_grad_norm is None or args.clip_grad_norm > 0, "clip_grad_norm", "must be > 0")
    need(0 < args.warmup_start_factor <= 1, "warmup_start_factor", "must be in (0, 1] (0 would waste the first step)")
    need(args.warmup_epochs is None or 0 <= args.warmup_epochs < args.epochs, "warmup_epochs",
         f"must be in [0, epochs={args.epochs})")
    warmup = warmup_epochs(args)
    need(args.min_lr <= args.lr, "min_lr", f"must not exceed lr={args.lr}")
    need(args.lr_gamma > 0, "lr_gamma", "must be > 0")
    if args.lr_schedule == "step":
        need(args.lr_milestones is not None, "lr_milestones", "required with lr_schedule step")
        ms = args.lr_milestones
        need(all(warmup < m < args.epochs for m in ms), "lr_milestones",
             f"each must lie after warmup ({warmup}) and before the end of training ({args.epochs})")
        need(all(a < b for a, b in zip(ms, ms[1:])), "lr_milestones", "must be strictly increasing")
    need(0 < args.model_ema_decay < 1, "model_ema_decay", "must be in (0, 1)")
    need(args.model_ema_steps >= 1, "model_ema_steps", "must be >= 1")


def _run(args, need, source):
    """Validation, logging, checkpoints, resuming and the end of the run."""
    _at_least(args, need, ("val_every", "log_every"), 1)
    _at_least(args, need, ("save_every",), 0)
    need(args.checkpoint_every_steps is None or args.checkpoint_every_steps >= 1, "checkpoint_every_steps",
         "must be >= 1")
    _at_least(args, need, ("keep_last", "keep_best", "skip_nonfinite_steps"), 0)
    need(not (args.push_to_hub and args.eval_only), "push_to_hub",
         "uploads a trained model folder: not with --eval_only")
    need(not (args.init_from and args.resume), "init_from", "a fresh run's weights: do not combine it with --resume")
    need(not args.eval_only or args.resume or args.init_from or args.pretrained or args.weights, "eval_only",
         "needs weights to score: --resume, --init_from or --pretrained")
    need(args.dist_timeout_s >= 1, "dist_timeout_s", "must be >= 1")
    need(args.resume != "latest" or args.output_dir, "resume", "'latest' needs --output_dir, the run to continue")
    for spec in args.metrics or ():
        try:
            parse_metric_spec(spec)
        except MetricError as e:
            raise ConfigError(str(e)) from None


def _model(args, need, source):
    """The model's name, weights, regularisation, and the input it can take."""
    for key in ("drop_path", "dropout"):
        need(getattr(args, key) is None or 0 <= getattr(args, key) < 1, key, "must be in [0, 1)")
    try:
        check_model_name(args.model)
    except ValueError as e:
        raise ConfigError(f"model: {e}") from None
    need(args.weights is None or named_weights(args.model), "weights", "names torchvision weights; for "
         "timm give the tag in the name (--model timm/resnet50.a1_in1k --pretrained), for hf/ the repo")
    video = source.video
    need(video or not is_video_model(args.model), "model", "a video model needs video data (--train_list, "
         "a folder of videos, --dataset moving_digits)")
    try:
        inp = resolve_input(args, source)
        check_image_size(args.model, min(inp.train_crop_size, inp.val_crop_size),
                         args.clip_len * args.num_segments if video else None)
    except ValueError as e:
        default = " (the default for this data)" if args.image_size is None else ""
        raise ConfigError(f"image_size: {e}{default}") from None
    if video:
        try:
            check_clip_frames(args.model, args.clip_len * args.num_segments)
        except ValueError as e:
            raise ConfigError(f"clip_len: {e}") from None
