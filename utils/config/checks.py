"""The checks across options, one function per concern, run on the parsed options before anything is
built: each bad combination stops the run with one line naming the option (ConfigError, exit 2)."""

from utils.core.errors import ConfigError, at_least, requirement
from utils.data.decoding import on_device as decoding_on_device
from utils.data.loading import sampling
from utils.data.sources import catalog, folds, streamed, video_files
from utils.data.transforms import batch, input as inputs
from utils.evaluation.metrics import MetricError, parse_metric_spec
from utils.models import libraries
from utils.training import balance, objective, probes, schedule


def check_args(args, source, defaults, typed):
    """Reject impossible combinations before anything is built: an option the run's data `source` does not read
    (one whose value is not its default in `defaults`), the data's and its input's own checks (each module's
    check_options, of their typed options), the optimizer and schedule, the run's own bookkeeping, then the model (it
    may import its library) and the input it can take; `typed`: the options of each subsystem, typed
    (utils/config/settings.py). Returns that input, the run's Input, resolved here once."""
    need = requirement(vars(args))
    for key, why in source.unused.items():  # applied or refused: never trained on without a word
        need(getattr(args, key) == defaults[key], key, why)
    data, asked = typed["data"], typed["input_options"]
    # The data's checks, each in the module whose code it protects: the source and its sizes, streaming, video;
    # the input's crops, clips and progressive resizing; MixUp/CutMix and erasing (batch.py's); decoding on the device,
    # repeated augmentation.
    catalog.check_options(data, need)
    folds.check_options(data, need)
    streamed.check_options(data, need)
    video_files.check_options(data, need, source)
    need(not (data.streaming and args.sync_bn), "sync_bn", "not with --streaming: a process past the end of its "
         "shards takes padding steps, without SyncBatchNorm's collective, and the others would wait for it")
    fmt = source.pixel_format(data)  # what the first training file holds: read once, here
    inputs.check_options(asked, need, source, fmt)
    batch.check_options(typed["batch"], need)
    decoding_on_device.check_options(asked, need)
    sampling.check_options(data, need)
    schedule.check_options(typed["optimizer"], typed["schedule"], need)
    _batch(args, need)
    _lr_find(args, need, defaults)
    _steps(args, need)
    objective.check_options(typed["losses"], need)
    balance.check_options(typed["balance"], data, need, typed["losses"].bce_loss)
    _run(args, need)
    _probe(args, need, source, defaults, typed["probe"])
    libraries.check_options(typed["model"], need, source.video)
    for key in ("model_ema_decay", "model_ema_steps", "model_ema_warmup"):  # set without the average: refused, not lost
        need(args.model_ema or getattr(args, key) == defaults[key], key, "sets the moving average of the weights: add "
             "--model_ema")
    return _model_input(args, source, asked, fmt)


def _batch(args, need):
    """--global_batch_size and --batch_size auto (utils/training/batch_size.py); the process count's checks wait for
    the processes."""
    need(args.global_batch_size is None or args.global_batch_size >= 1, "global_batch_size", "must be >= 1")
    if args.batch_size != "auto":
        return
    need(args.global_batch_size is not None, "batch_size", "auto finds the micro-batch of a global batch: give "
         "--global_batch_size N too (the batch the recipe was tuned for)")
    need(not args.eval_only, "batch_size", "auto tries training steps, and --eval_only trains none: give a number")
    need(not args.streaming, "batch_size", "auto is not available with --streaming (a stream's epoch is laid out in "
         "micro-batches before the model is built): give a number with --global_batch_size")


def _lr_find(args, need, defaults):
    """--lr_find and --lr auto (utils/training/lr_range.py): a sweep of this run's training steps before it; its
    settings refused without it (never ignored)."""
    if not (args.lr_find or args.lr == "auto"):
        for key in ("lr_find_min", "lr_find_max", "lr_find_steps"):
            need(getattr(args, key) == defaults[key], key, "sets the LR range test: add --lr_find or --lr auto")
        return
    key = "lr_find" if args.lr_find else "lr"
    need(not args.eval_only, key, "sweeps training steps, and --eval_only trains none")
    need(not args.streaming, key, "is not available with --streaming (the sweep would take the stream's first batches "
         "out of the run's): give --lr")
    need(not (args.lr_find and args.resume), "lr_find", "tests the LR of a run about to start: not with --resume")
    need(not (args.lr == "auto" and args.lr_scale_batch), "lr_scale_batch", "scales a given --lr; --lr auto finds "
         "the LR in force for this global batch: drop one of the two")
    need(0 < args.lr_find_min < args.lr_find_max, "lr_find_min", f"must be > 0 and below --lr_find_max "
         f"{args.lr_find_max:g}")
    need(args.lr_find_steps >= 3, "lr_find_steps", "must be >= 3")


def _steps(args, need):
    """The steps: how many, what clips their gradients, what the backbone keeps."""
    need(args.max_train_steps is None or args.max_train_steps >= 0, "max_train_steps", "must be >= 0")
    need(args.layer_decay is None or not args.freeze_backbone, "layer_decay", "has nothing to decay with "
         "--freeze_backbone (only the head trains)")
    need(0 <= args.label_smoothing < 1, "label_smoothing", "must be in [0, 1)")
    need(args.clip_grad_norm is None or args.clip_grad_norm > 0, "clip_grad_norm", "must be > 0")


def _run(args, need):
    """Validation, logging, checkpoints, resuming and the end of the run."""
    at_least(args, need, ("val_every", "log_every"), 1)
    need(args.early_stop is None or args.early_stop >= 1, "early_stop", "must be >= 1 (validations without gain)")
    need(args.early_stop_min_delta >= 0, "early_stop_min_delta", "must be >= 0")
    at_least(args, need, ("save_every",), 0)
    need(args.checkpoint_every_steps is None or args.checkpoint_every_steps >= 1, "checkpoint_every_steps",
         "must be >= 1")
    at_least(args, need, ("keep_last", "keep_best", "skip_nonfinite_steps", "top_losses"), 0)
    need(not (args.push_to_hub and args.eval_only), "push_to_hub",
         "uploads a trained model folder: not with --eval_only")
    need(not (args.calibrate and args.eval_only), "calibrate", "records its temperature in the model folder training "
         "writes, which --eval_only does not: train with it (or from the weights: --init_from W --epochs 1 --lr 0)")
    need(not (args.init_from and args.resume), "init_from", "a fresh run's weights: do not combine it with --resume")
    need(not args.eval_only or args.resume or args.init_from or args.pretrained or args.weights, "eval_only",
         "needs weights to score: --resume, --init_from or --pretrained")
    need(args.dist_timeout_s >= 1, "dist_timeout_s", "must be >= 1")
    need(0 <= args.seed < 2**32, "seed", "must be in [0, 2**32): accelerate's set_seed seeds numpy's 32-bit global RNG")
    need(args.resume != "latest" or args.output_dir, "resume", "'latest' needs --output_dir, the run to continue")
    for spec in args.metrics or ():
        try:
            parse_metric_spec(spec)
        except MetricError as e:
            raise ConfigError(str(e)) from None


def _probe(args, need, source, defaults, options):
    """--probe (utils/run/probe.py): its own options, and what it leaves alone refused."""
    probes.check_options(options, need, defaults)
    if options.probe is None:
        return
    need(not source.video, "probe", "caches image features: not available for video data yet")
    for option, why in probes.NOT_WITH_PROBE.items():  # applied by training only
        need(getattr(args, option) == defaults[option], option, why)
    need(args.batch_size != "auto", "batch_size", "auto tries training steps; a probe trains none: give a number")
    need(options.probe == "linear" or args.epochs == defaults["epochs"], "epochs", "sets the linear probe's training; "
         "--probe knn trains nothing")
    need(not (options.probe == "knn" and args.folds), "folds", "a fold's predictions are its model's classifier's, and "
         "--probe knn votes instead: use --probe linear")
    need(args.resume in (None, "latest"), "resume", "a probe has no checkpoints: --resume latest continues its "
         "feature pass")


def _model_input(args, source, asked, fmt):
    """The run's Input, resolved from InputOptions `asked` (`fmt`: the data's pixel format), and the input sizes and
    clip length the model can take."""
    try:
        inp = inputs.resolve_input(asked, source, fmt)
        for size in sorted({inp.train_crop_size, inp.val_crop_size}):  # the smallest first (torchvision's minimums)
            libraries.check_image_size(args.model, size, inp.frames)
    except ValueError as e:
        default = " (the default for this data)" if args.image_size is None else ""
        raise ConfigError(f"image_size: {e}{default}") from None
    if inp.video:
        try:
            libraries.check_clip_frames(args.model, inp.frames)
        except ValueError as e:
            raise ConfigError(f"clip_len: {e}") from None
    return inp
