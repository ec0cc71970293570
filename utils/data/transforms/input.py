"""The model's input (Input), resolved once from the options, the data source and the model's library: sizes,
crops, interpolation, normalisation; progressive resizing's size of each epoch."""

from dataclasses import dataclass, replace

from utils.core.errors import at_least
from utils.models.libraries import data_config, recommends_input


def model_input(args, source):
    """What a timm/hf model's library recommends for its input (image_size, mean, std, interpolation,
    crop_pct, origin), for the data that takes it: image and video files. {} for a source with its own input."""
    return {} if source.own_input else data_config(args.model)


def image_size(args, source):
    """The side of the model's input frames: --image_size; else the source's own (32 for digits and
    synthetic, 24 for moving digits: the canvas); else the timm/hf model's input size; else the source's
    default (112 for video: torchvision's Kinetics weights; 224 for images)."""
    if args.image_size or source.own_input:
        return args.image_size or source.size
    return model_input(args, source).get("image_size") or source.size


def crop_pct(args, source):
    """--crop_pct, else the timm/hf model's, else 0.875 (224 of 256)."""
    return args.crop_pct or model_input(args, source).get("crop_pct") or 0.875


def interpolation(args, source):
    """--interpolation, else the timm/hf model's (bilinear or bicubic), else bilinear."""
    return args.interpolation or model_input(args, source).get("interpolation") or "bilinear"


AUTO = "auto"  # --mean auto --std auto: per-channel statistics of the training split (utils/data/statistics.py)


def mean_std(args, source, channels=3):
    """The normalisation of the model's input, ((mean), (std)) per channel: --mean/--std; AUTO (computed over the
    training split when the data is read) with --mean auto, for a source whose statistics are its data's, and by
    default for data of other than 3 channels (ImageNet's and a model's are RGB's); else a source's own statistics
    (the embedded data's); else the timm/hf model's; else the source's (ImageNet's for images, Kinetics' for video).
    None: synthetic input, not normalised."""
    if source.stats is None:
        return None
    if AUTO in (args.mean or ()) or AUTO in (args.std or ()) or source.stats == AUTO or (channels != 3 and
                                                                                         not args.mean):
        return AUTO
    model = model_input(args, source)
    mean, std = args.mean or model.get("mean") or source.stats[0], args.std or model.get("std") or source.stats[1]
    return tuple(map(float, mean)), tuple(map(float, std))


def pixel_fields(args, fmt):
    """The Input's channels, bands, pixel_max and file_format for data whose first training file holds `fmt` (a
    PixelFormat, utils/data/decoding/bands.py; None: the source's own 8-bit RGB). 8-bit RGB files without --bands or
    --pixel_max are read as RGB (pixel_max None); anything else keeps its channels and bits."""
    if fmt is None or fmt.rgb and args.bands is None and args.pixel_max is None:
        return dict(channels=3, bands=None, pixel_max=None, file_format=None)
    bands = tuple(args.bands) if args.bands else None
    return dict(channels=len(bands) if bands else fmt.channels, bands=bands,
                pixel_max=float(args.pixel_max or fmt.type_max), file_format=(fmt.channels, fmt.dtype))


def input_notes(args, source):
    """For a timm/hf model: which input values are used and where they came from."""
    if not recommends_input(args.model):
        return []
    if source.own_input:
        return [f"input: {source.kind}'s own size and pixel statistics ({image_size(args, source)} px), not "
                f"{args.model}'s recommended input"]
    recommended = model_input(args, source)
    own = [key for key in ("image_size", "mean", "std", "crop_pct", "interpolation") if getattr(args, key) is not None]
    stats = mean_std(args, source, pixel_fields(args, source.pixel_format(args))["channels"])
    used = (f"{image_size(args, source)} px, crop_pct {crop_pct(args, source):g}, {interpolation(args, source)}, " +
            ("mean and std of the training split" if stats == AUTO else
             f"mean {tuple(round(v, 4) for v in stats[0])}, std {tuple(round(v, 4) for v in stats[1])}"))
    origin = f"from {recommended['origin']}" if recommended else f"{args.model} recommends none: the defaults"
    return [f"input: {used} ({origin}{'; yours: ' + ', '.join(own) if own else ''})"]


def pixel_notes(fmt, pixels):
    """What the files hold and what the model sees of them, for data that keeps its channels and bits."""
    if pixels["pixel_max"] is None:
        return []
    seen = f"bands {' '.join(map(str, pixels['bands']))} in that order" if pixels["bands"] else "all of them"
    return [f"pixels: {fmt} in each file (as the first training file holds), {seen}: {pixels['channels']} channel"
            f"{'s' * (pixels['channels'] != 1)} into the model, each value divided by {pixels['pixel_max']:g}"]


def progressive_size(opts, epoch):
    """FFCV's progressive resizing, --progressive_resize LOW HIGH START END: LOW up to epoch START
    (0-based), HIGH from epoch END on, in between the straight line from one to the other rounded to
    a multiple of --progressive_resize_step (32 as in FFCV, round half to even as numpy's). `opts`: the
    options or the Input, which keeps both under their names."""
    low, high, start, end = opts.progressive_resize
    if epoch <= start:
        return low
    if epoch >= end:
        return high
    step = opts.progressive_resize_step
    return round((low + (high - low) * (epoch - start) / (end - start)) / step) * step


@dataclass(frozen=True)
class Input:
    """The model's input, resolved once from the options, the data and the model's library (resolve_input):
    what the transforms, the on-device normalisation, the model folder and predict.py read; a run records it
    (utils/run/trained.py). The fields that are options keep their option's name."""

    video: bool  # clips (N, C, T, H, W) or images
    image_size: int
    crop_pct: float
    interpolation: str
    mean_std: tuple  # ((mean), (std)) per channel, None for synthetic input (not normalised); AUTO until computed
    train_crop_size: int  # the train crop of every epoch, or of epoch 0 with progressive_resize
    val_crop_size: int
    val_resize_size: int
    progressive_resize: tuple  # (LOW, HIGH, START, END) or None
    progressive_resize_step: int
    no_hflip: bool
    auto_augment: str
    rand_augment: int
    notes: tuple  # which values a timm/hf model's input uses, and where they came from
    clip_len: int = None  # video: frames of a clip in each segment, every frame_interval-th of the video
    frame_interval: int = None
    num_segments: int = None  # TSN's segments: a clip in each, the model sees them all
    channels: int = 3  # the model's input channels
    bands: tuple = None  # the files' channels the model sees, in order (--bands); None: all of them
    pixel_max: float = None  # None: 8-bit RGB files read as RGB, x / 255; else each file's raw values / pixel_max
    file_format: tuple = None  # (channels, dtype) every file must hold, its first training file's (with pixel_max)
    train_crop_scale: tuple = None  # images: the random train crop's (MIN, MAX) share of the area; None: crop_box's
    train_crop_ratio: tuple = None  # ... and its aspect ratio's range; None: CROP_RATIO

    @property
    def stats_pending(self):
        """Whether the normalisation is still to be computed over the training split (--mean auto)."""
        return self.mean_std == AUTO

    @property
    def frames(self):
        """A video input's frame count T (None for images)."""
        return self.clip_len * self.num_segments if self.video else None

    def train_crop(self, epoch):
        """The train crop's side in `epoch`: progressive_size with --progressive_resize."""
        return progressive_size(self, epoch) if self.progressive_resize else self.train_crop_size

    def crop_box(self, multi_label):
        """((MIN, MAX) area share, (MIN, MAX) aspect ratio) of the random train crop of images: --train_crop_scale
        and --train_crop_ratio, else the defaults for this data (default_crop_scale, CROP_RATIO)."""
        return (tuple(self.train_crop_scale or default_crop_scale(self.image_size, multi_label)),
                tuple(self.train_crop_ratio or CROP_RATIO))

    def with_crop_box(self, multi_label):
        """This Input with its train crop's scale and ratio resolved for data of that kind (what run.json records)."""
        scale, ratio = self.crop_box(multi_label)
        return replace(self, train_crop_scale=scale, train_crop_ratio=ratio)


# The random-resized crop's defaults. timm's and torchvision's ImageNet recipes draw 8-100 % of the area at aspect
# ratios 3/4-4/3 (Inception's crop): right for single-label photos of 128 px and more (every ImageNet recipe trains at
# 160 px or more), where a crop of a twelfth of the image still shows enough of its one object. Two kinds of data lose
# their labels to it (benchmarks/crop_scale.py, measured in docs/recipes.md): multi-label images, whose labelled
# objects lie apart, so that a small crop cuts out some of them while their labels stay on, and small images, which
# are mostly their object (a 32 px digit cropped to a twelfth is a 9 px smudge). Both keep 85-100 % of the image: a
# shift and a slight zoom, as CIFAR's padded random crop is; no crop at all overfits (measured too).
CROP_RATIO = (3 / 4, 4 / 3)
IMAGENET_CROP_SCALE = (0.08, 1.0)
WHOLE_OBJECTS_CROP_SCALE = (0.85, 1.0)  # multi-label images of any size, single-label images under SMALL_SIDE
SMALL_SIDE = 128


def crop_note(args, inp, multi_label):
    """The start-up line of the random train crop of Input `inp` (before with_crop_box): its area share and aspect
    ratio, and where they came from."""
    (low, high), (narrow, wide) = inp.crop_box(multi_label)
    origin = ("--train_crop_scale" if args.train_crop_scale else "as the resumed checkpoint was made" if
              inp.train_crop_scale else "the default of multi-label data" if multi_label else
              f"the default of single-label images of {inp.image_size} px")
    return (f"train crops: {low:.0%}-{high:.0%} of each image's area ({origin}), aspect ratio {narrow:.3g}-{wide:.3g}"
            f"{' (--train_crop_ratio)' if args.train_crop_ratio else ''}")


def default_crop_scale(side, multi_label):
    """The train crop's area share when --train_crop_scale is not given, for images of model input `side`."""
    return WHOLE_OBJECTS_CROP_SCALE if multi_label or side < SMALL_SIDE else IMAGENET_CROP_SCALE


def resolve_input(args, source):
    """The Input of the run `args` describes, reading `source` (utils/data/sources/protocol.py): every value derived
    here once (the model's recommendation read from its library once)."""
    size = image_size(args, source)
    val_crop = args.val_crop_size or size
    pct = crop_pct(args, source)
    clips = dict(clip_len=args.clip_len, frame_interval=args.frame_interval, num_segments=args.num_segments)
    fmt = source.pixel_format(args)
    pixels = pixel_fields(args, fmt)
    return Input(video=source.video, image_size=size, crop_pct=pct, **pixels,
                 interpolation=interpolation(args, source), mean_std=mean_std(args, source, pixels["channels"]),
                 train_crop_size=(progressive_size(args, 0) if args.progressive_resize else
                                  args.train_crop_size or size),
                 val_crop_size=val_crop,
                 val_resize_size=(args.val_resize_size or int(val_crop / pct)) if source.eval_crop else val_crop,
                 progressive_resize=tuple(args.progressive_resize) if args.progressive_resize else None,
                 progressive_resize_step=args.progressive_resize_step, no_hflip=args.no_hflip,
                 auto_augment=args.auto_augment, rand_augment=args.rand_augment,
                 train_crop_scale=tuple(args.train_crop_scale) if args.train_crop_scale else None,
                 train_crop_ratio=tuple(args.train_crop_ratio) if args.train_crop_ratio else None,
                 notes=tuple(input_notes(args, source) + pixel_notes(fmt, pixels)), **(clips if source.video else {}))


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


def check_options(args, need, source):
    """Crops and their sizes, progressive resizing, crop_pct, the normalisation, RandAugment."""
    at_least(args, need, ("train_crop_size", "val_crop_size", "val_resize_size"), 1, optional=True)
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
    need(args.val_resize_size is None or args.val_resize_size >= (args.val_crop_size or image_size(args, source)),
         "val_resize_size", "must be at least the val crop size")
    need(args.crop_pct is None or 0 < args.crop_pct <= 1, "crop_pct", "must be in (0, 1]")
    low, high = args.train_crop_scale or (0.5, 1)
    need(0 < low <= high <= 1, "train_crop_scale", f"must be MIN MAX with 0 < MIN <= MAX <= 1 (shares of the image's "
         f"area); got {low:g} {high:g}")
    low, high = args.train_crop_ratio or (1, 1)
    need(0 < low <= high, "train_crop_ratio", f"must be MIN MAX with 0 < MIN <= MAX (width / height); got "
         f"{low:g} {high:g}")
    for key in ("mean", "std"):
        values = getattr(args, key)
        need(values is None or values == [AUTO] or AUTO not in values, key, "give numbers, one a channel, or auto")
    need(args.std is None or args.std == [AUTO] or all(v > 0 for v in args.std), "std", "must be > 0")
    need(args.pixel_max is None or args.pixel_max > 0, "pixel_max", "must be > 0")
    check_channels(args, need, source)
    need(args.rand_augment is None or 0 <= args.rand_augment <= 30, "rand_augment", "must be in [0, 30]")


def check_channels(args, need, source):
    """--bands, the normalisation's channel count and the colour policies against what the data's files hold."""
    for key in ("mean", "std"):
        need(AUTO not in (getattr(args, key) or ()) or source.file_pixels, key, f"auto computes the statistics of "
             f"image files' pixels (folders, list files, save_to_disk, --dataset spectral_digits); this data "
             f"({source.kind}) has its own: give numbers or leave it out")
    fmt = source.pixel_format(args)
    if fmt is not None and args.bands:
        need(all(0 <= b < fmt.channels for b in args.bands), "bands",
             f"picks channels 0..{fmt.channels - 1} of files holding {fmt}; got {' '.join(map(str, args.bands))}")
    pixels = pixel_fields(args, fmt)
    channels = pixels["channels"]
    need(not args.decode_on_device or pixels["pixel_max"] is None, "decode_on_device",
         f"decodes 8-bit RGB JPEGs on the device; these files hold {fmt}: drop it (workers read them)")
    for key in ("mean", "std"):
        values = getattr(args, key)
        need(values is None or values == [AUTO] or len(values) == channels, key,
             f"give {channels} values, one for each channel the model sees ({fmt or 'RGB'}), or auto")
    if channels != 3:
        for key in ("auto_augment", "rand_augment"):
            need(getattr(args, key) is None, key, f"its colour operations are defined on RGB; this data has {channels} "
                 f"channel{'s' * (channels != 1)}: drop it (crops, flips, erasing and MixUp/CutMix work on any)")
