"""The model's input (Input), resolved once from what the options ask of it (InputOptions), the data source and the
model's library: sizes, crops, interpolation, normalisation; progressive resizing's size of each epoch."""

from dataclasses import dataclass, replace

from utils.core.errors import at_least
from utils.data.transforms.crops import CROP_RATIO
from utils.models.libraries import data_config, recommends_input


@dataclass(frozen=True)
class InputOptions:
    """What the options ask of the model's input, read from them once (utils/config/settings.py): each field is its
    option's value (None: not given), lists as tuples. resolve_input makes the run's Input of them."""

    model: str  # whose library may recommend an input (timm/, hf/)
    image_size: int
    crop_pct: float
    interpolation: str
    mean: tuple  # numbers, one a channel, or ("auto",)
    std: tuple
    bands: tuple  # the files' channels the model sees
    pixel_max: float
    train_crop_size: int
    train_crop_scale: tuple
    train_crop_ratio: tuple
    val_crop_size: int
    val_resize_size: int
    progressive_resize: tuple  # (LOW, HIGH, START, END)
    progressive_resize_step: int
    no_hflip: bool
    auto_augment: str
    rand_augment: int
    clip_len: int  # video
    frame_interval: int
    num_segments: int
    decode_on_device: bool  # JPEGs decoded on the device: 8-bit RGB files only


def model_input(asked, source):
    """What a timm/hf model's library recommends for its input (image_size, mean, std, interpolation,
    crop_pct, origin), for the data that takes it: image and video files. {} for a source with its own input."""
    return {} if source.own_input else data_config(asked.model)


def image_size(asked, source):
    """The side of the model's input frames: --image_size; else the source's own (32 for digits and
    synthetic, 24 for moving digits: the canvas); else the timm/hf model's input size; else the source's
    default (112 for video: torchvision's Kinetics weights; 224 for images)."""
    if asked.image_size or source.own_input:
        return asked.image_size or source.size
    return model_input(asked, source).get("image_size") or source.size


def crop_pct(asked, source):
    """--crop_pct, else the timm/hf model's, else 0.875 (224 of 256)."""
    return asked.crop_pct or model_input(asked, source).get("crop_pct") or 0.875


def interpolation(asked, source):
    """--interpolation, else the timm/hf model's (bilinear or bicubic), else bilinear."""
    return asked.interpolation or model_input(asked, source).get("interpolation") or "bilinear"


AUTO = "auto"  # --mean auto --std auto: per-channel statistics of the training split (utils/data/statistics.py)


def mean_std(asked, source, channels=3):
    """The normalisation of the model's input, ((mean), (std)) per channel: --mean/--std; AUTO (computed over the
    training split when the data is read) with --mean auto, for a source whose statistics are its data's, and by
    default for data of other than 3 channels (ImageNet's and a model's are RGB's); else a source's own statistics
    (the embedded data's); else the timm/hf model's; else the source's (ImageNet's for images, Kinetics' for video).
    None: synthetic input, not normalised."""
    if source.stats is None:
        return None
    if AUTO in (asked.mean or ()) or AUTO in (asked.std or ()) or source.stats == AUTO or (channels != 3 and
                                                                                         not asked.mean):
        return AUTO
    model = model_input(asked, source)
    mean, std = asked.mean or model.get("mean") or source.stats[0], asked.std or model.get("std") or source.stats[1]
    return tuple(map(float, mean)), tuple(map(float, std))


def pixel_fields(asked, fmt):
    """The Input's channels, bands, pixel_max and file_format for data whose first training file holds `fmt` (a
    PixelFormat, utils/data/decoding/bands.py; None: the source's own 8-bit RGB). 8-bit RGB files without --bands or
    --pixel_max are read as RGB (pixel_max None); anything else keeps its channels and bits."""
    if fmt is None or fmt.rgb and asked.bands is None and asked.pixel_max is None:
        return dict(channels=3, bands=None, pixel_max=None, file_format=None)
    bands = asked.bands or None
    return dict(channels=len(bands) if bands else fmt.channels, bands=bands,
                pixel_max=float(asked.pixel_max or fmt.type_max), file_format=(fmt.channels, fmt.dtype))


def input_notes(asked, source, fmt):
    """For a timm/hf model: which input values are used and where they came from."""
    if not recommends_input(asked.model):
        return []
    if source.own_input:
        return [f"input: {source.kind}'s own size and pixel statistics ({image_size(asked, source)} px), not "
                f"{asked.model}'s recommended input"]
    recommended = model_input(asked, source)
    own = [key for key in ("image_size", "mean", "std", "crop_pct", "interpolation") if getattr(asked, key) is not None]
    stats = mean_std(asked, source, pixel_fields(asked, fmt)["channels"])
    used = (f"{image_size(asked, source)} px, crop_pct {crop_pct(asked, source):g}, {interpolation(asked, source)}, " +
            ("mean and std of the training split" if stats == AUTO else
             f"mean {tuple(round(v, 4) for v in stats[0])}, std {tuple(round(v, 4) for v in stats[1])}"))
    origin = f"from {recommended['origin']}" if recommended else f"{asked.model} recommends none: the defaults"
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
    InputOptions or the Input, which keep both under their names."""
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

    def crop_box(self, targets):
        """((MIN, MAX) area share, (MIN, MAX) aspect ratio) of the random train crop of images: --train_crop_scale
        and --train_crop_ratio, else the defaults for data of `targets` (its crop_scale, CROP_RATIO)."""
        return (tuple(self.train_crop_scale or targets.crop_scale(self.image_size)),
                tuple(self.train_crop_ratio or CROP_RATIO))

    def with_crop_box(self, targets):
        """This Input with its train crop's scale and ratio resolved for data of `targets` (what run.json records)."""
        scale, ratio = self.crop_box(targets)
        return replace(self, train_crop_scale=scale, train_crop_ratio=ratio)


def resolve_input(asked, source, fmt):
    """The Input that InputOptions `asked` describe, for data from `source` (utils/data/sources/protocol.py) whose first
    training file holds `fmt` (its pixel_format; None: 8-bit RGB): every value derived
    here once (the model's recommendation read from its library once)."""
    size = image_size(asked, source)
    val_crop = asked.val_crop_size or size
    pct = crop_pct(asked, source)
    clips = dict(clip_len=asked.clip_len, frame_interval=asked.frame_interval, num_segments=asked.num_segments)
    pixels = pixel_fields(asked, fmt)
    return Input(video=source.video, image_size=size, crop_pct=pct, **pixels,
                 interpolation=interpolation(asked, source), mean_std=mean_std(asked, source, pixels["channels"]),
                 train_crop_size=(progressive_size(asked, 0) if asked.progressive_resize else
                                  asked.train_crop_size or size),
                 val_crop_size=val_crop,
                 val_resize_size=(asked.val_resize_size or int(val_crop / pct)) if source.eval_crop else val_crop,
                 progressive_resize=asked.progressive_resize or None,
                 progressive_resize_step=asked.progressive_resize_step, no_hflip=asked.no_hflip,
                 auto_augment=asked.auto_augment, rand_augment=asked.rand_augment,
                 train_crop_scale=asked.train_crop_scale or None,
                 train_crop_ratio=asked.train_crop_ratio or None,
                 notes=tuple(input_notes(asked, source, fmt) + pixel_notes(fmt, pixels)),
                 **(clips if source.video else {}))


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


def check_options(asked, need, source, fmt):
    """Crops and their sizes, clips, progressive resizing, crop_pct, the normalisation, RandAugment, of the input
    InputOptions `asked` describe, for data from `source` whose first training file holds `fmt`."""
    at_least(asked, need, ("image_size", "train_crop_size", "val_crop_size", "val_resize_size"), 1, optional=True)
    at_least(asked, need, ("clip_len", "frame_interval", "num_segments"), 1)
    if asked.progressive_resize:
        low, high, start, end = asked.progressive_resize
        need(asked.progressive_resize_step >= 1, "progressive_resize_step", "must be >= 1")
        need(1 <= low <= high and 0 <= start <= end, "progressive_resize",
             "must be LOW HIGH START END with 1 <= LOW <= HIGH and 0 <= START <= END")
        need(low % asked.progressive_resize_step == 0 and high % asked.progressive_resize_step == 0,
             "progressive_resize", f"LOW and HIGH must be multiples of --progressive_resize_step "
             f"{asked.progressive_resize_step}")
        need(asked.train_crop_size is None, "train_crop_size", "leave it out with --progressive_resize, which sets "
             "the train crop of each epoch")
    need(asked.val_resize_size is None or asked.val_resize_size >= (asked.val_crop_size or image_size(asked, source)),
         "val_resize_size", "must be at least the val crop size")
    need(asked.crop_pct is None or 0 < asked.crop_pct <= 1, "crop_pct", "must be in (0, 1]")
    low, high = asked.train_crop_scale or (0.5, 1)
    need(0 < low <= high <= 1, "train_crop_scale", f"must be MIN MAX with 0 < MIN <= MAX <= 1 (shares of the image's "
         f"area); got {low:g} {high:g}")
    low, high = asked.train_crop_ratio or (1, 1)
    need(0 < low <= high, "train_crop_ratio", f"must be MIN MAX with 0 < MIN <= MAX (width / height); got "
         f"{low:g} {high:g}")
    for key in ("mean", "std"):
        values = getattr(asked, key)
        need(values is None or values == (AUTO,) or AUTO not in values, key, "give numbers, one a channel, or auto")
    need(asked.std is None or asked.std == (AUTO,) or all(v > 0 for v in asked.std), "std", "must be > 0")
    need(asked.pixel_max is None or asked.pixel_max > 0, "pixel_max", "must be > 0")
    check_channels(asked, need, source, fmt)
    need(asked.rand_augment is None or 0 <= asked.rand_augment <= 30, "rand_augment", "must be in [0, 30]")


def check_channels(asked, need, source, fmt):
    """--bands, the normalisation's channel count and the colour policies against what the data's files hold."""
    for key in ("mean", "std"):
        need(AUTO not in (getattr(asked, key) or ()) or source.file_pixels, key, f"auto computes the statistics of "
             f"image files' pixels (folders, list files, save_to_disk, --dataset spectral_digits); this data "
             f"({source.kind}) has its own: give numbers or leave it out")
    if fmt is not None and asked.bands:
        need(all(0 <= b < fmt.channels for b in asked.bands), "bands",
             f"picks channels 0..{fmt.channels - 1} of files holding {fmt}; got {' '.join(map(str, asked.bands))}")
    pixels = pixel_fields(asked, fmt)
    channels = pixels["channels"]
    need(not asked.decode_on_device or pixels["pixel_max"] is None, "decode_on_device",
         f"decodes 8-bit RGB JPEGs on the device; these files hold {fmt}: drop it (workers read them)")
    for key in ("mean", "std"):
        values = getattr(asked, key)
        need(values is None or values == (AUTO,) or len(values) == channels, key,
             f"give {channels} values, one for each channel the model sees ({fmt or 'RGB'}), or auto")
    if channels != 3:
        for key in ("auto_augment", "rand_augment"):
            need(getattr(asked, key) is None, key, f"its colour operations are defined on RGB; this data has "
                 f"{channels} channel{'s' * (channels != 1)}: drop it (crops, flips, erasing and MixUp/CutMix work on "
                 f"any)")
