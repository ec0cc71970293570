"""What every data source answers, the same way: embedded digits, synthetic images, moving digits, image
files (folders, the Hub, save_to_disk), streamed shards, video files (folders, list files).

A source is one class, in its own module, instantiated once per run by utils/data/sources/catalog.py (the one
place that tells which source the options name). The rest of the run asks it, never `--dataset`:

    kind          digits, synthetic, moving_digits, images or video: its name in notes and in the run's
                  record (catalog.source_named gives it back, without its data, to a trained run's user)
    video         the modality: clips (N, C, T, H, W) or images (N, C, H, W)
    labels_ahead  its training labels can be read without a pass over its data (class counts at every start)
    own_input     its own frame side and pixel statistics win over a timm/hf model's recommended input
    file_pixels   its image files keep their own channels and bit depth (multispectral, 16-bit, grayscale)
    eval_crop     its eval view is a centre crop of a larger resize (crop_pct); else a resize to the side
    size          the frame side when --image_size (and, without own_input, the model) gives none
    stats         ((mean), (std)) of its pixels on the 0..1 scale; None: not normalised (synthetic); "auto":
                  computed over its training split (utils/data/statistics.py)
    unused        {option: why} of the options it does not read: one that is set is refused in one line
                  (utils/config/checks.py), rather than trained without a word
    name(data)    how results.json and the run folder name the data (`data`: the run's DataOptions, below)
    datasets(data, inp, rank, world) -> (train, val, class names, notes), transforms attached for the
                  run's Input `inp` (utils/data/transforms/input.py); rank of world matters to streams only
    loaders(accelerator, train, val, ...) -> (training loader, validation loader)
    file_transform(inp) its validation's transform of an image file decoded to uint8 (predict.py's)
    pixel_format(data)  what its first training file holds (channels, type), before the data is built; None: RGB
    sample_count(train) the training set's size (None for a stream of unknown size)
    targets(train)      what a sample's target is: a class index, or a multi-hot row (the data side of its kind of
                        labels: utils/data/datasets/label_kinds.py)
    labels(train)       every training sample's label (a class index, or a list of them), in order, over the whole
                        split (every rank the same, not its shard): what the class counts come from (--sampler
                        balanced, --class_weights, --logit_adjust, --pos_weight auto; utils/training/balance.py)
    signature(train, classes) what a resumed run must find again (utils/run/job.py compares it)
    remade        after `datasets`, what --folds, --exclude and --flip_labels did to its training split (a Remade of
                  utils/data/sources/folds.py), or None
"""

import hashlib
from dataclasses import dataclass

import numpy as np

from utils.data.loading.loaders import build_dataloaders
from utils.data.transforms.images import eval_preset

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# The options only some sources read, and why, for `unused`. Each source lists those it does not read.
VIDEO_ONLY = {**dict.fromkeys(("clip_len", "frame_interval", "num_segments", "video_decoder"),
                              "is for video data (clips)"),
              **dict.fromkeys(("test_clips", "test_crops"), "multi-view test is for video data")}
SYNTHETIC_ONLY = dict.fromkeys(("num_classes", "synthetic_train_samples", "synthetic_val_samples"),
                               "sizes --dataset synthetic only")
STREAM_ONLY = {"streaming": "reads a Hub dataset or local shard files named by --dataset, not the embedded data or "
                            "folders of images or videos",
               "shuffle_buffer": "shuffles --streaming data in blocks (map-style data is shuffled whole)"}
IMAGE_CROPS = dict.fromkeys(("train_crop_size", "train_crop_scale", "train_crop_ratio", "progressive_resize",
                             "progressive_resize_step", "val_crop_size", "val_resize_size"),
                            "is for images (clips use --image_size)")
POLICIES = dict.fromkeys(("auto_augment", "rand_augment"), "is an image policy; clips take the video presets (a random "
                         "short side, crop and flip of every frame alike)")
EMBEDDED_SUBSETS = dict.fromkeys(("max_train_samples", "max_val_samples"), "applies to the digits, folders, lists "
                                 "and Hub datasets; synthetic data is sized with --synthetic_train_samples/"
                                 "--synthetic_val_samples, the moving digits are used whole")


@dataclass(frozen=True)
class DataOptions:
    """What the options ask of the data, read from them once (utils/config/settings.py): each field is its option's
    value, lists as tuples. The sources, the loaders' sampling and the multi-view test read these, never the options."""

    dataset: str  # --dataset: an embedded set's name, imagefolder, a save_to_disk folder or a Hub name
    dataset_config: str
    train_split: str
    val_split: str
    val_fraction: float
    image_column: str
    label_column: str
    train_dir: str  # folders of <class>/<file>
    val_dir: str
    data_dir: str
    train_list: str  # list files of videos
    val_list: str
    train_csv: str  # CSV files of several labels a file
    val_csv: str
    csv_path_column: str
    csv_labels_column: str
    data_root: str  # the folder the paths of list and CSV files are relative to
    class_names: tuple  # the class order, when given
    streaming: bool
    steps_per_epoch: int
    shuffle_buffer: int
    max_train_samples: int
    max_val_samples: int
    imbalance: float  # --imbalance: the training split made long-tailed
    folds: int  # --folds K --fold I: fold I of the training split is the validation (utils/data/sources/folds.py)
    fold: int
    fold_seed: int
    group_column: str
    groups: str
    exclude: str  # a CSV of training samples to leave out
    audit: str  # an audit.py folder: the validation figures also without the samples its leaked.csv names
    flip_labels: float  # a fraction of training labels flipped at random
    num_classes: int  # the synthetic data's sizes
    synthetic_train_samples: int
    synthetic_val_samples: int
    num_workers: int
    skip_bad_images: bool  # a file that cannot be decoded is listed and skipped, not the run's end
    decode_on_device: bool
    video_decoder: str
    test_clips: int  # video's multi-view test
    test_crops: int
    ra_reps: int
    seed: int  # the run's: each sample's augmentation and the subsets are seeded by it
    epochs: int  # a stream's length in epochs, progressive resizing's notes
    batch_size: int  # a stream's epoch is counted in global batches of these
    grad_accum_steps: int
    eval_only: bool  # the run only scores: a stream of unknown size needs no --steps_per_epoch


def no_imbalance(kind):
    """`unused` of data that --imbalance cannot make long-tailed."""
    return {"imbalance": f"makes the training split of the digits or of image files long-tailed; this data ({kind}) "
                         f"keeps its own class counts"}


def rgb_only(kind):
    """`unused` of data read as 8-bit RGB whatever it holds: the options of files with their own channels and bits."""
    why = (f"reads the channels and bit depth of image files (folders, list files, save_to_disk); this data ({kind}) "
           f"is 8-bit RGB")
    return dict.fromkeys(("bands", "pixel_max"), why)


def no_remaking(kind):
    """`unused` of data whose training split --folds, --exclude and --flip_labels cannot remake (utils/data/sources/
    folds.py: map-style image data)."""
    why = (f"remakes the training split of map-style image data (the embedded digits, folders, CSV files, Hub and "
           f"save_to_disk datasets); this data ({kind}) is not remade")
    return dict.fromkeys(("folds", "fold", "group_column", "groups", "exclude", "flip_labels", "audit"), why)


NO_COLUMNS = {"group_column": "names a column of --train_csv or of a Hub/save_to_disk dataset; this data has none: "
                              "name the groups with --groups FILE"}


def no_files(kind):
    """`unused` of data without files to decode (embedded, generated)."""
    return {"decode_on_device": f"decodes image files (JPEG) and video files on the device; this data ({kind}) has "
                                f"none"}


class DataSource:
    kind = "images"
    video = False
    own_input = False
    eval_crop = True
    labels_ahead = True  # its training labels are read without a pass over the data (a stream's are not)
    file_pixels = False  # its image files keep their own channels and bits (--bands, --pixel_max, --mean auto)
    size = 224
    stats = (IMAGENET_MEAN, IMAGENET_STD)
    unused = {**VIDEO_ONLY, **SYNTHETIC_ONLY, **STREAM_ONLY}

    remade = None  # what --folds, --exclude, --flip_labels did to its training split (utils/data/sources/folds.py)

    def name(self, data):
        return data.dataset

    def datasets(self, data, inp, rank=0, world=1):
        raise NotImplementedError

    def loaders(self, accelerator, train, val, batch_size, num_workers, ra_reps=1, seed=0, decode=None,
                weights=None, draws=None):
        """(training loader, validation loader) of its datasets: map-style ones, sharded by Accelerate; `weights`
        and `draws`: --sampler balanced's (utils/data/loading/sampling.py)."""
        return build_dataloaders(accelerator, train, val, batch_size, num_workers, ra_reps=ra_reps, seed=seed,
                                 decode=decode, weights=weights, draws=draws)

    def file_transform(self, inp):
        """Its validation's transform of an image file decoded to (3, H, W) uint8: the eval resize and crop."""
        return eval_preset(inp)

    def pixel_format(self, data):
        """What its first training file holds (a PixelFormat, utils/data/decoding/bands.py), where files keep their own
        channels and bits; None: 8-bit RGB."""
        return None

    def sample_count(self, train):
        return len(train)

    def targets(self, train):
        """What a training sample's target is (utils/data/datasets/label_kinds.py): a class index, or a multi-hot
        row."""
        return train.dataset.targets

    def labels(self, train):
        """Every training sample's label, in order, over the whole split (every rank reads the same rows: no shard)."""
        return list(train.dataset.labels)

    def train_labels(self, train):
        """The training labels in order, as int64 bytes (b"" where they follow from the size alone): the
        `labels` of the dataset that EpochSeeded wraps (ImageRows, VideoClips)."""
        return label_bytes(train.dataset.labels)

    def signature(self, train, classes):
        """The sample count, the class count and a hash of the labels in order: the schedule's steps,
        each sample's place in the permutation and the classifier's shape come from them."""
        return {"train_samples": len(train), "classes": classes,
                "labels_sha256": hashlib.sha256(self.train_labels(train)).hexdigest()[:16]}


def label_bytes(labels):
    """Class indices as int64 bytes; lists of them (multi-label) each preceded by its length."""
    if len(labels) and not isinstance(labels[0], (int, np.integer)):
        return np.asarray([v for row in labels for v in (len(row), *row)], dtype=np.int64).tobytes()
    return np.asarray(labels, dtype=np.int64).tobytes()
