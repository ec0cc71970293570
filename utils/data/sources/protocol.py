"""What every data source answers, the same way: embedded digits, synthetic images, moving digits, image
files (folders, the Hub, save_to_disk), streamed shards, video files (folders, list files).

A source is one class, in its own module, instantiated once per run by utils/data/sources/catalog.py (the one
place that tells which source the options name). The rest of the run asks it, never `args.dataset`:

    kind          digits, synthetic, moving_digits, images or video (results and notes print it)
    video         the modality: clips (N, C, T, H, W) or images (N, C, H, W)
    own_input     its own frame side and pixel statistics win over a timm/hf model's recommended input
    eval_crop     its eval view is a centre crop of a larger resize (crop_pct); else a resize to the side
    size          the frame side when --image_size (and, without own_input, the model) gives none
    stats         ((mean), (std)) of its pixels on the 0..1 scale; None: not normalised (synthetic)
    name(args)    how results.json and the run folder name the data
    datasets(args, inp, rank, world) -> (train, val, class names, notes), transforms attached for the
                  run's Input `inp` (utils/data/transforms/input.py); rank of world matters to streams only
    sample_count(train) the training set's size (None for a stream of unknown size)
    signature(train, classes) what a resumed run must find again (utils/run/job.py compares it)
"""

import hashlib

import numpy as np

from utils.data.loading.loaders import build_dataloaders


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DataSource:
    kind = "images"
    video = False
    own_input = False
    eval_crop = True
    size = 224
    stats = (IMAGENET_MEAN, IMAGENET_STD)

    def name(self, args):
        return args.dataset

    def datasets(self, args, inp, rank=0, world=1):
        raise NotImplementedError

    def loaders(self, accelerator, train, val, batch_size, num_workers, ra_reps=1, seed=0, decode=None):
        """(training loader, validation loader) of its datasets: map-style ones, sharded by Accelerate."""
        return build_dataloaders(accelerator, train, val, batch_size, num_workers, ra_reps=ra_reps, seed=seed,
                                 decode=decode)

    def sample_count(self, train):
        return len(train)

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
    return np.asarray(labels, dtype=np.int64).tobytes()
