"""Every command-line option, declared once with its default, help and whether a resume must keep it
(the one source of config); parse_args applies the YAML recipes (recipes.py) and the checks (checks.py)."""

import argparse
import functools
import sys

from utils.config.checks import ConfigError, check_args
from utils.config.recipes import DATA_RECIPES, load_recipe
from utils.data.catalog import is_video


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on an error; we print one line and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _Declared:
    """A parser or argument group whose every option declares `resume_key`: whether a resumed run must keep
    its value. An option that declares nothing cannot be added (TypeError), so none is forgotten."""

    def __init__(self, container):
        self._container = container

    def add_argument(self, *flags, resume_key, **kwargs):
        action = self._container.add_argument(*flags, **kwargs)
        action.resume_key = resume_key
        return action

    def add_argument_group(self, title):
        return _Declared(self._container.add_argument_group(title))


@functools.cache
def resume_keys():
    """The options whose value a resumed run must share with its checkpoint (`resume_key=True` above).

    The LR schedule is laid out in steps of the epochs, batch, accumulation and LR options; the sample
    order and every augmentation of a sample come from the seed and the augmentation switches; the
    optimizer state only fits the optimizer (and the model) it was made with. Every other option may
    differ: the data is compared by its signature instead (run_folder.check_data), and the rest changes
    how later steps read, evaluate, report or checkpoint, not whether the state fits.
    """
    return tuple(action.dest for action in get_args_parser()._actions if getattr(action, "resume_key", False))


def get_args_parser(prog="train_classification.py"):
    """Every option, with its default and help. YAML keys are these dest names (snake_case)."""
    parser = _OneLineParser(prog=prog, description="Train an image or video classifier with HuggingFace Accelerate.",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p = _Declared(parser)
    p.add_argument("--config", resume_key=False, type=str, default=None,
                   help="YAML recipe whose keys (option names) set defaults; the command line wins")
    g = p.add_argument_group("data")
    g.add_argument("--dataset", resume_key=False, type=str, default="digits",
                   help="digits (embedded 8x8 scans, offline), moving_digits (embedded video clips labelled by "
                        "direction of motion, offline), synthetic (random tensors, no I/O), imagefolder "
                        "(with --data_dir), a folder written by save_to_disk, or a Hub dataset name (e.g. cifar10)")
    g.add_argument("--dataset_config", resume_key=False, type=str, default=None, help="Hub dataset configuration name")
    g.add_argument("--train_split", resume_key=False, type=str, default="train", help="split to train on")
    g.add_argument("--val_split", resume_key=False, type=str, default=None,
                   help="split to validate on (default: validation, val, valid or test, whichever exists)")
    g.add_argument("--val_fraction", resume_key=False, type=float, default=0.1,
                   help="without a validation split: this fraction of train, stratified, fixed seed")
    g.add_argument("--image_column", resume_key=False,
                   type=str, default=None, help="image column (default: image, img, ...)")
    g.add_argument("--label_column", resume_key=False,
                   type=str, default=None, help="label column (default: label, labels, ...)")
    g.add_argument("--train_dir", resume_key=False, type=str, default=None,
                   help="folder of <class>/<image> (or <class>/<video>) files to train on")
    g.add_argument("--val_dir", resume_key=False, type=str, default=None,
                   help="folder of <class>/<image> (or <class>/<video>) files to validate on")
    g.add_argument("--data_dir", resume_key=False, type=str, default=None,
                   help="with --dataset imagefolder: a folder holding train/ and val/ (or validation/)")
    g.add_argument("--streaming", resume_key=True, action="store_true",
                   help="read the training split of --dataset (a Hub name, or a local folder of parquet/arrow/"
                        "webdataset shards) as a stream: each process reads its own shards, nothing cached ahead; "
                        "the validation split is read whole")
    g.add_argument("--steps_per_epoch", resume_key=True, type=int, default=None,
                   help="--streaming: optimizer steps per epoch (default: the split's size from its metadata over "
                        "the global batch)")
    g.add_argument("--shuffle_buffer", resume_key=True, type=int, default=1000,
                   help="--streaming: samples are shuffled in blocks of this many read in a row (the shard order "
                        "is shuffled too); each worker holds one block of undecoded samples")
    g.add_argument("--max_train_samples", resume_key=False,
                   type=int, default=None, help="train on a seeded subset of this size")
    g.add_argument("--max_val_samples", resume_key=False,
                   type=int, default=None, help="validate on a seeded subset of this size")
    g.add_argument("--skip_bad_images", "--skip_bad_videos", resume_key=False,
                   dest="skip_bad_images", action="store_true",
                   help="skip images or videos that cannot be decoded (listed in bad_images.txt) instead of stopping")
    g.add_argument("--image_size", resume_key=False, type=int, default=None,
                   help="side of the square input images (default: 32 for digits and synthetic, 24 for moving "
                        "digits, a timm/hf model's own, 112 for video, else 224)")
    g.add_argument("--num_classes", resume_key=False, type=int, default=10, help="class count of --dataset synthetic")
    g.add_argument("--synthetic_train_samples", resume_key=False,
                   type=int, default=1024, help="train size of --dataset synthetic")
    g.add_argument("--synthetic_val_samples", resume_key=False,
                   type=int, default=256, help="val size of --dataset synthetic")
    g.add_argument("--num_workers", resume_key=False, type=int, default=None,
                   help="data-loading worker processes per process (default: chosen from the cores per process)")
    g = p.add_argument_group("video (list files, <class>/<video> folders, moving digits)")
    g.add_argument("--train_list", resume_key=False, type=str, default=None,
                   help="list file of training videos: 'path label' or 'path num_frames label' per line; a path "
                        "is a video file or a folder of frame images")
    g.add_argument("--val_list", resume_key=False,
                   type=str, default=None, help="list file of validation videos (same format)")
    g.add_argument("--data_root", resume_key=False, type=str, default=None,
                   help="folder the list files' paths are relative to (default: each list file's folder)")
    g.add_argument("--class_names", resume_key=False, type=str, default=None,
                   help="file with one class name per line, for the integer labels of list files")
    g.add_argument("--clip_len", resume_key=True, type=int, default=16, help="frames per clip (per segment)")
    g.add_argument("--frame_interval", resume_key=True,
                   type=int, default=2, help="take every N-th frame of the video in a clip")
    g.add_argument("--num_segments", resume_key=True, type=int, default=1,
                   help="cut each video into N segments and take a clip in each (TSN); a model sees them all")
    g.add_argument("--test_clips", resume_key=False, type=int, default=None,
                   help="after training (and with --eval_only): test on N clips per video, spread evenly")
    g.add_argument("--test_crops", resume_key=False, type=int, default=None,
                   help="... and M crops per clip (3: left, centre, right); softmax averaged over a video's views")
    g = p.add_argument_group("augmentation (images and videos from files; digits keep their own recipes)")
    g.add_argument("--no_hflip", resume_key=True, action="store_true", help="no random horizontal flip")
    g.add_argument("--auto_augment", resume_key=True,
                   type=str, default=None, choices=("imagenet", "cifar10", "svhn", "ta_wide"),
                   help="AutoAugment policy")
    g.add_argument("--rand_augment", resume_key=True,
                   type=int, default=None, help="RandAugment with this magnitude (0-30)")
    g.add_argument("--random_erase", resume_key=True, type=float, default=0.0,
                   help="random erasing probability, after normalisation (torchvision's recipe: 0.1)")
    g.add_argument("--interpolation", resume_key=False, type=str, default=None, choices=("bilinear", "bicubic"),
                   help="resampling of the train crop and the eval resize (default: the timm/hf model's, else "
                        "bilinear)")
    g.add_argument("--crop_pct", resume_key=False, type=float, default=None,
                   help="eval: resize to the val crop size / crop_pct, then centre-crop (default: the timm/hf "
                        "model's, else 0.875)")
    g.add_argument("--train_crop_size", resume_key=True, type=int, default=None,
                   help="images: side of the random train crop (default: --image_size; torchvision's recipe: 176)")
    g.add_argument("--progressive_resize", resume_key=True,
                   type=int, nargs=4, default=None, metavar=("LOW", "HIGH", "START", "END"),
                   help="images: FFCV's progressive resizing: train crops of side LOW up to epoch START (0-based), "
                        "HIGH from epoch END, in between growing linearly in steps of --progressive_resize_step "
                        "(FFCV's 16-epoch ResNet-50: 160 192 11 13); instead of --train_crop_size")
    g.add_argument("--progressive_resize_step", resume_key=True, type=int, default=32,
                   help="progressive resizing: sides are multiples of this (FFCV: 32)")
    g.add_argument("--val_crop_size", resume_key=False,
                   type=int, default=None, help="images: side of the eval centre crop "
                   "(default: --image_size)")
    g.add_argument("--val_resize_size", resume_key=False, type=int, default=None,
                   help="images: eval resize of the shorter side before the crop (default: val crop / crop_pct; "
                        "torchvision's recipe: 232 for 224)")
    g.add_argument("--mixup_alpha", resume_key=True,
                   type=float, default=0.0, help="MixUp with this Beta(alpha, alpha) (0: off)")
    g.add_argument("--cutmix_alpha", resume_key=True, type=float, default=0.0,
                   help="CutMix with this Beta(alpha, alpha) (0: off); with both alphas, each batch takes one of "
                        "the two at random")
    g.add_argument("--mix_prob", resume_key=True,
                   type=float, default=1.0, help="probability that a batch is mixed at all")
    g.add_argument("--ra_reps", resume_key=True, type=int, default=1,
                   help="repeated augmentation: each sample N times per epoch, differently augmented, its copies on "
                        "different processes; the epoch keeps its length (torchvision's recipe: 4)")
    g.add_argument("--mean", resume_key=False, type=float, nargs=3, default=None,
                   help="normalisation mean (default: a timm/hf model's, else Kinetics' for video, ImageNet's)")
    g.add_argument("--std", resume_key=False, type=float, nargs=3, default=None,
                   help="normalisation std (default: as --mean)")
    g = p.add_argument_group("model and optimisation")
    g.add_argument("--model", resume_key=True, type=str, default=None,
                   help="a torchvision classification or video model name (default: resnet18 for images, "
                        "r2plus1d_18 for video), timm/<name>[.<tag>] (timm.create_model), or hf/<Hub repo or local "
                        "folder> (transformers' AutoModelForImageClassification); an image model on video scores "
                        "each frame and averages (TSN)")
    g.add_argument("--pretrained", resume_key=False,
                   action="store_true", help="start from pretrained weights: torchvision's DEFAULT, "
                   "timm's (the name's tag, else its default), a transformers checkpoint's; the classifier is new")
    g.add_argument("--weights", resume_key=False,
                   type=str, default=None, help="start from these torchvision weights (e.g. "
                   "ResNet50_Weights.IMAGENET1K_V2); read from the torch hub cache offline")
    g.add_argument("--init_from", resume_key=False, type=str, default=None,
                   help="start from a .safetensors/.pth state dict or a run/checkpoint folder (weights only); "
                        "a classifier for another class count is re-initialised")
    g.add_argument("--freeze_backbone", resume_key=False,
                   action="store_true", help="train the classifier only (torchvision: the last "
                   "Linear; timm: get_classifier(); transformers: what is outside the base model)")
    g.add_argument("--model_ema", resume_key=True, action="store_true",
                   help="keep an exponential moving average of the weights; validation scores it too (val_ema_*)")
    g.add_argument("--model_ema_decay", resume_key=True, type=float, default=0.9998, help="EMA decay per update")
    g.add_argument("--model_ema_steps", resume_key=True,
                   type=int, default=1, help="update the EMA every N optimizer steps")
    g.add_argument("--model_ema_warmup", resume_key=True, action=argparse.BooleanOptionalAction, default=True,
                   help="EMA decay min(decay, (1 + n) / (10 + n)) after n updates (timm's warmup)")
    g.add_argument("--drop_path", resume_key=False, type=float, default=None,
                   help="stochastic depth probability (stochastic_depth_prob of efficientnet, convnext, swin, ...)")
    g.add_argument("--dropout", resume_key=False,
                   type=float, default=None, help="the classifier's dropout (models whose builder takes it)")
    g.add_argument("--zero_init_residual", resume_key=False, action=argparse.BooleanOptionalAction, default=True,
                   help="image ResNets from scratch: each residual block's last BatchNorm starts at zero")
    g.add_argument("--temporal_shift", resume_key=True, action="store_true", help="TSM: a 2D ResNet on video shifts "
                   "1/8 of its channels a frame forward and 1/8 back in each residual block (else TSN)")
    g.add_argument("--sync_bn", resume_key=True, action="store_true",
                   help="BatchNorm statistics over the global batch (SyncBatchNorm), for small per-device batches")
    g.add_argument("--channels_last", resume_key=False,
                   action="store_true", help="model and input in channels-last memory format")
    g.add_argument("--compile", resume_key=False, action="store_true", help="torch.compile the model")
    g.add_argument("--compile_mode", resume_key=False, type=str, default="default",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                   help="torch.compile mode")
    g.add_argument("--eval_only", resume_key=False, action="store_true",
                   help="validate the weights of --resume / --init_from / --pretrained and write results.json")
    g.add_argument("--epochs", resume_key=True, type=int, default=18, help="training epochs")
    g.add_argument("--batch_size", resume_key=True,
                   type=int, default=64, help="batch size per process (global = this x processes)")
    g.add_argument("--grad_accum_steps", resume_key=True, type=int, default=1, help="micro-batches per optimizer step")
    g.add_argument("--optimizer", resume_key=True, type=str, default="sgd", choices=("sgd", "adamw"), help="optimizer")
    g.add_argument("--lr", resume_key=True, type=float, default=0.1, help="peak learning rate")
    g.add_argument("--momentum", resume_key=True, type=float, default=0.9, help="SGD momentum")
    g.add_argument("--nesterov", resume_key=True,
                   action=argparse.BooleanOptionalAction, default=True, help="SGD Nesterov momentum")
    g.add_argument("--weight_decay", resume_key=True,
                   type=float, default=5e-4, help="weight decay (of weights: see the next two)")
    g.add_argument("--norm_weight_decay", resume_key=True,
                   type=float, default=0.0, help="weight decay of normalisation layers")
    g.add_argument("--bias_weight_decay", resume_key=True,
                   type=float, default=0.0, help="weight decay of the other biases")
    g.add_argument("--lr_scale_batch", resume_key=True, type=int, default=None,
                   help="--lr is for a global batch of N: scale it linearly with the real global batch "
                        "(batch_size x processes x grad_accum_steps)")
    g.add_argument("--label_smoothing", resume_key=False, type=float, default=0.1, help="cross-entropy label smoothing")
    g.add_argument("--clip_grad_norm", resume_key=False,
                   type=float, default=None, help="clip the global gradient norm to this value")
    g.add_argument("--mixed_precision", resume_key=False, type=str, default=None, choices=("no", "fp16", "bf16"),
                   help="override the accelerate config's mixed precision")
    g = p.add_argument_group("learning-rate schedule (in epochs, so it is the same for any world size)")
    g.add_argument("--lr_schedule", resume_key=True,
                   type=str, default="cosine", choices=("cosine", "step"), help="decay after warmup")
    g.add_argument("--warmup_epochs", resume_key=True, type=float, default=None,
                   help="linear warmup length in epochs, fractional ok (default: 1, or a fifth of --epochs if shorter)")
    g.add_argument("--warmup_start_factor", resume_key=True,
                   type=float, default=0.1, help="warmup starts at this x lr (never 0)")
    g.add_argument("--min_lr", resume_key=True, type=float, default=0.0, help="cosine: final learning rate")
    g.add_argument("--lr_milestones", resume_key=True,
                   type=float, nargs="+", default=None, help="step: epochs at which lr *= lr_gamma")
    g.add_argument("--lr_gamma", resume_key=True, type=float, default=0.1, help="step: decay factor")
    g = p.add_argument_group("run")
    g.add_argument("--seed", resume_key=True, type=int, default=0, help="seed of weights, shuffling and augmentation")
    g.add_argument("--output_dir", resume_key=False, type=str, default=None,
                   help="where results go (default: runs/<time>-<dataset>-<model>); must not hold another run")
    g.add_argument("--resume", resume_key=False, type=str, default=None,
                   help="a checkpoint folder (.../checkpoints/step_N or epoch_E) to continue from exactly, or "
                        "'latest': the newest complete one under --output_dir (a fresh start if there is none)")
    g.add_argument("--checkpoint_every_steps", resume_key=False, type=int, default=None,
                   help="also checkpoint every N optimizer steps, mid-epoch included")
    g.add_argument("--keep_last", resume_key=False,
                   type=int, default=0, help="keep only the newest N checkpoints (0: all)")
    g.add_argument("--keep_best", resume_key=False, type=int, default=0,
                   help="also keep the K checkpoints with the best val top-1 (a checkpoint follows each "
                        "validation); the best weights go to <output_dir>/best/model.safetensors")
    g.add_argument("--skip_nonfinite_steps", resume_key=False, type=int, default=0,
                   help="skip the update of up to N optimizer steps with a NaN/inf loss (0: stop at the first)")
    g.add_argument("--dist_timeout_s", resume_key=False, type=int, default=600,
                   help="seconds a rank waits in a collective for the others before giving up")
    g.add_argument("--max_train_steps", resume_key=False, type=int, default=None,
                   help="stop after this many optimizer steps (the schedule stays laid out over --epochs)")
    g.add_argument("--val_every", resume_key=False,
                   type=int, default=1, help="validate every N epochs (and after the last)")
    g.add_argument("--save_every", resume_key=False,
                   type=int, default=0, help="checkpoint every N epochs (0: only at the end)")
    g.add_argument("--log_every", resume_key=False,
                   type=int, default=10, help="log a training line every N optimizer steps")
    g.add_argument("--report_to", resume_key=False,
                   type=str, default="none", choices=("none", "wandb", "tensorboard", "all"),
                   help="dashboards fed the metrics.jsonl rows (wandb offline: WANDB_MODE=offline)")
    g.add_argument("--project_name", resume_key=False,
                   type=str, default="train-classification", help="wandb / TensorBoard project")
    g.add_argument("--push_to_hub", resume_key=False, type=str, default=None, metavar="REPO",
                   help="at the end, upload <output_dir>/model/ with a model card (results, command line) to this "
                        "Hub model repository; tried only when given; a failure is one line, local files kept")
    g.add_argument("--run_name", resume_key=False,
                   type=str, default=None, help="wandb run name (default: the output folder's name)")
    g.add_argument("--wandb_entity", resume_key=False, type=str, default=None, help="wandb team or user")
    g.add_argument("--wandb_tags", resume_key=False, type=str, nargs="+", default=None, help="wandb run tags")
    g.add_argument("--wandb_run_id", resume_key=False, type=str, default=None,
                   help="continue this wandb run (a resumed run continues its checkpoint's run by itself)")
    g.add_argument("--metrics", resume_key=False, type=str, nargs="+", default=None,
                   help="extra evaluate metrics by Hub name (cached when offline) or local module folder, "
                        "options as NAME:KEY=VALUE,... (e.g. f1:average=weighted); scored on top-1 predictions")
    g.add_argument("--dump_rank_metrics", resume_key=False, action="store_true",
                   help="write each rank's validation sums to <output_dir>/eval/epoch_<E>/rank_<R>.json")
    return parser


def parse_args(argv=None, prog="train_classification.py"):
    """Parse `argv` (default sys.argv[1:]) over the recipe's defaults; exit 2 with one line on bad input."""
    parser = get_args_parser(prog)
    config_path, dataset = _find_config_arg(argv if argv is not None else sys.argv[1:], parser)
    try:
        recipe = load_recipe(config_path, parser) if config_path is not None else {}
        data_recipe = DATA_RECIPES.get(dataset or recipe.get("dataset"))
        if data_recipe is not None:
            parser.set_defaults(**load_recipe(data_recipe, parser))
        parser.set_defaults(**recipe)
        args = parser.parse_args(argv)
        if args.model is None:
            args.model = "r2plus1d_18" if is_video(args) else "resnet18"
        check_args(args)
    except ConfigError as e:
        parser.exit(2, f"{prog}: error: {e}\n")
    return args


def _find_config_arg(argv, parser):
    """Read --config and --dataset alone first: the recipes they name set the defaults of the full parse."""
    pre = _OneLineParser(prog=parser.prog, add_help=False)
    pre.add_argument("--config", type=str, default=None)
    pre.add_argument("--dataset", type=str, default=None)
    known, _ = pre.parse_known_args(argv)
    return known.config, known.dataset


