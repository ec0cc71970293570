"""Train and eval transform presets (torchvision transforms v2), and the defaults that depend on the source.

Every preset ends in uint8 pixels: the loaders hand uint8 batches to the main process (a quarter of
float32's bytes through worker IPC and host-to-device copies), and normalisation, random erasing and
MixUp/CutMix run on whole batches on the device (utils/data/on_device.py), as timm and FFCV do.
"""

import os
from dataclasses import dataclass

from torchvision.transforms import v2

from utils.data.moving_digits import CANVAS as MOVING_DIGITS_CANVAS
from utils.data.sources import folder_holds_videos
from utils.models.libraries import data_config, recommends_input

# Pixel statistics of the embedded digits (32x32, 0..1 scale), measured over all 1,797 images.
DIGITS_MEAN, DIGITS_STD = (0.306,) * 3, (0.324,) * 3
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Kinetics-400's, which torchvision's video weights were trained with.
KINETICS_MEAN, KINETICS_STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)
# Moving digits' (0..1 scale), measured over its 2,000 train clips: mostly black canvas.
MOVING_DIGITS_MEAN, MOVING_DIGITS_STD = (0.034,) * 3, (0.158,) * 3
VIDEO_KINDS = ("moving_digits", "video")


def source_kind(args):
    """digits, synthetic, moving_digits, video (list files, folders of videos) or images (a Hub
    dataset, an image folder, a save_to_disk folder): the modality follows from the data."""
    if args.train_list:
        return "video"
    folder = args.train_dir or args.data_dir and os.path.join(args.data_dir, "train")
    if folder:
        return "video" if folder_holds_videos(folder) else "images"
    return args.dataset if args.dataset in ("digits", "synthetic", "moving_digits") else "images"


def is_video(args):
    return source_kind(args) in VIDEO_KINDS


def sample_unit(args):
    """What the console calls a sample: clips of video data, images otherwise."""
    return "clips" if is_video(args) else "images"


# The embedded sources have a size and pixel statistics of their own, which win over a model's.
OWN_INPUT = ("digits", "synthetic", "moving_digits")


def model_input(args):
    """What a timm/hf model's library recommends for its input (image_size, mean, std, interpolation,
    crop_pct, origin), for the data that takes it: image and video files. {} otherwise."""
    return {} if source_kind(args) in OWN_INPUT else data_config(args.model)


def image_size(args):
    """The side of the model's input frames: --image_size; 32 for digits and synthetic, 24 (the canvas)
    for moving digits; the timm/hf model's input size; 112 for video (torchvision's Kinetics weights),
    else 224."""
    default = {"digits": 32, "synthetic": 32, "moving_digits": MOVING_DIGITS_CANVAS, "video": 112}
    kind = source_kind(args)
    if args.image_size or kind in OWN_INPUT:
        return args.image_size or default[kind]
    return model_input(args).get("image_size") or default.get(kind, 224)


def crop_pct(args):
    """--crop_pct, else the timm/hf model's, else 0.875 (224 of 256)."""
    return args.crop_pct or model_input(args).get("crop_pct") or 0.875


def interpolation(args):
    """--interpolation, else the timm/hf model's (bilinear or bicubic), else bilinear."""
    return args.interpolation or model_input(args).get("interpolation") or "bilinear"


def input_notes(args):
    """For a timm/hf model: which input values are used and where they came from."""
    if not recommends_input(args.model):
        return []
    kind, recommended = source_kind(args), model_input(args)
    if kind in OWN_INPUT:
        return [f"input: {kind}'s own size and pixel statistics ({image_size(args)} px), not {args.model}'s "
                f"recommended input"]
    own = [key for key in ("image_size", "mean", "std", "crop_pct", "interpolation") if getattr(args, key) is not None]
    mean, std = mean_std(args)
    used = (f"{image_size(args)} px, crop_pct {crop_pct(args):g}, {interpolation(args)}, mean "
            f"{tuple(round(v, 4) for v in mean)}, std {tuple(round(v, 4) for v in std)}")
    origin = f"from {recommended['origin']}" if recommended else f"{args.model} recommends none: the defaults"
    return [f"input: {used} ({origin}{'; yours: ' + ', '.join(own) if own else ''})"]


def train_crop_size(args, epoch=0):
    """--train_crop_size, else the image size; with --progressive_resize, the side for `epoch`."""
    if args.progressive_resize:
        return progressive_size(args, epoch)
    return args.train_crop_size or image_size(args)


def progressive_size(args, epoch):
    """FFCV's progressive resizing, --progressive_resize LOW HIGH START END: LOW up to epoch START
    (0-based), HIGH from epoch END on, in between the straight line from one to the other rounded to
    a multiple of --progressive_resize_step (32 as in FFCV, round half to even as numpy's)."""
    low, high, start, end = args.progressive_resize
    if epoch <= start:
        return low
    if epoch >= end:
        return high
    step = args.progressive_resize_step
    return round((low + (high - low) * (epoch - start) / (end - start)) / step) * step


def val_crop_size(args):
    return args.val_crop_size or image_size(args)


def val_resize_size(args):
    """The eval resize of the shorter side: --val_resize_size, else the val crop / crop_pct (224 / 0.875 = 256)."""
    return args.val_resize_size or int(val_crop_size(args) / crop_pct(args))


def mean_std(args):
    """The normalisation of the model's input (None: synthetic input, which is not normalised)."""
    kind = source_kind(args)
    if kind == "synthetic":
        return None
    if kind == "digits":
        return DIGITS_MEAN, DIGITS_STD
    if kind == "moving_digits":
        return MOVING_DIGITS_MEAN, MOVING_DIGITS_STD
    model = model_input(args)
    if kind == "video":
        return args.mean or model.get("mean") or KINETICS_MEAN, args.std or model.get("std") or KINETICS_STD
    return args.mean or model.get("mean") or IMAGENET_MEAN, args.std or model.get("std") or IMAGENET_STD


@dataclass(frozen=True)
class Input:
    """The model's input, resolved once from the options, the data and the model's library (resolve_input):
    what the transforms, the on-device normalisation, the model folder and predict.py read. The fields
    that are options keep their option's name."""

    kind: str  # source_kind: digits, synthetic, moving_digits, video, images
    image_size: int
    crop_pct: float
    interpolation: str
    mean_std: tuple  # ((R, G, B), (R, G, B)), None for synthetic input (not normalised)
    train_crop_size: int  # the train crop of every epoch, or of epoch 0 with progressive_resize
    val_crop_size: int
    val_resize_size: int
    progressive_resize: tuple  # (LOW, HIGH, START, END) or None
    progressive_resize_step: int
    no_hflip: bool
    auto_augment: str
    rand_augment: int
    notes: tuple  # which values a timm/hf model's input uses, and where they came from

    @property
    def video(self):
        return self.kind in VIDEO_KINDS

    def train_crop(self, epoch):
        """The train crop's side in `epoch`: progressive_size with --progressive_resize."""
        return progressive_size(self, epoch) if self.progressive_resize else self.train_crop_size


def resolve_input(args):
    """The Input of the run `args` describes; every value derived here once (the model's recommendation
    read from its library once)."""
    return Input(kind=source_kind(args), image_size=image_size(args), crop_pct=crop_pct(args),
                 interpolation=interpolation(args), mean_std=mean_std(args), train_crop_size=train_crop_size(args),
                 val_crop_size=val_crop_size(args), val_resize_size=val_resize_size(args),
                 progressive_resize=tuple(args.progressive_resize) if args.progressive_resize else None,
                 progressive_resize_step=args.progressive_resize_step, no_hflip=args.no_hflip,
                 auto_augment=args.auto_augment, rand_augment=args.rand_augment, notes=tuple(input_notes(args)))


def digits_train(size):
    # Digits must not be flipped; a small random affine (on the PIL image, ~2x faster than on tensors)
    # is what lifts val top-1 from ~0.989 to ~0.995 in the default 18 epochs.
    return v2.Compose([
        v2.Resize(size),
        v2.RandomAffine(degrees=10, translate=(0.08, 0.08), scale=(0.9, 1.1)),
        v2.PILToTensor(),
    ])


def digits_eval(size):
    return v2.Compose([v2.Resize(size), v2.PILToTensor()])


def train_preset(inp, size=None):
    """For decoded uint8 (3, H, W) tensors: uint8 resizing kernels are faster than PIL's here.
    Random crops of side `size` (default: the Input's train crop)."""
    mode = v2.InterpolationMode(inp.interpolation)
    steps = [v2.RandomResizedCrop(size or inp.train_crop(0), interpolation=mode, antialias=True)]
    if not inp.no_hflip:
        steps.append(v2.RandomHorizontalFlip())
    if inp.auto_augment == "ta_wide":
        steps.append(v2.TrivialAugmentWide(interpolation=mode))
    elif inp.auto_augment:
        steps.append(v2.AutoAugment(v2.AutoAugmentPolicy(inp.auto_augment)))
    if inp.rand_augment is not None:
        steps.append(v2.RandAugment(magnitude=inp.rand_augment))
    return v2.Compose(steps)


def eval_preset(inp):
    """Resize the shorter side to val_resize_size (default: val crop / crop_pct, 224 / 0.875 = 256),
    then centre-crop the val crop size."""
    return v2.Compose([v2.Resize(inp.val_resize_size, interpolation=v2.InterpolationMode(inp.interpolation),
                                 antialias=True),
                       v2.CenterCrop(inp.val_crop_size)])


def progressive_notes(inp, epochs):
    """What --progressive_resize does over `epochs`, e.g. ["progressive resizing: train crops 160 px in
    epochs 0-11, 192 px in epochs 12-15"] (0-based, as --progressive_resize counts); [] without it."""
    if not inp.progressive_resize:
        return []
    runs = []  # [side, first epoch, last epoch]
    for epoch in range(epochs):
        size = progressive_size(inp, epoch)
        if runs and runs[-1][0] == size:
            runs[-1][2] = epoch
        else:
            runs.append([size, epoch, epoch])
    spans = [f"{size} px in epoch{f's {a}-{b}' if b > a else f' {a}'}" for size, a, b in runs]
    return ["progressive resizing: train crops " + ", ".join(spans)]


class Fixed:
    """One transform for every epoch, and the side of what it returns (see ImageRows)."""

    def __init__(self, transform, size):
        self.transform, self.size = transform, size

    def __call__(self, epoch):
        return self.transform, self.size


class ByEpoch:
    """The train transform of each epoch with its side, the Input's train_crop(epoch): `build(size)`
    made once per size in each process (a class, not a closure: DataLoader workers started by spawn,
    as on macOS, receive it pickled)."""

    def __init__(self, build, inp):
        self.build, self.inp, self.built = build, inp, {}

    def __call__(self, epoch):
        size = self.inp.train_crop(epoch)
        if size not in self.built:
            self.built[size] = self.build(size)
        return self.built[size], size


def source_name(args):
    """How results.json and the run folder name the data: digits, synthetic, a Hub name, a folder or a list."""
    if args.train_list:
        return f"videolist:{args.train_list}"
    if args.train_dir or args.data_dir:
        return f"{'video' if is_video(args) else 'image'}folder:{args.train_dir or args.data_dir}"
    return args.dataset
