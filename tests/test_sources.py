"""The data sources (utils/data/sources/protocol.py): which one the options name, and what each gives the run
through the same methods (its input defaults, its name, its datasets, its sample count and signature)."""

import hashlib

import numpy as np
import pytest
from conftest import make_folder

from utils.config.options import parse_args
from utils.config.settings import input_for
from utils.data.sources.catalog import EMBEDDED, source_for
from utils.data.sources.digits import DIGITS_MEAN, DIGITS_STD
from utils.config.settings import datasets_for
from utils.data.sources.protocol import DataSource, IMAGENET_MEAN
from utils.data.sources.moving_digits import MOVING_DIGITS_MEAN
from utils.data.sources.video_files import KINETICS_MEAN
from utils.models.libraries import is_video_model


def test_the_options_name_one_source_and_its_input_defaults_follow(videos, tmp_path):
    make_folder(tmp_path / "img", {"cat": 2, "dog": 2})
    (tmp_path / "list.txt").write_text(f"{videos / 'va' / 'left' / '0.mp4'} 0\n")
    cases = [  # options, source, kind, video, frame side, mean (None: not normalised), name
        ([], "Digits", "digits", False, 32, DIGITS_MEAN[0], "digits"),
        (["--dataset", "synthetic"], "Synthetic", "synthetic", False, 32, None, "synthetic"),
        (["--dataset", "moving_digits"], "MovingDigits", "moving_digits", True, 24, MOVING_DIGITS_MEAN[0],
         "moving_digits"),
        (["--train_dir", str(tmp_path / "img")], "ImageFiles", "images", False, 224, IMAGENET_MEAN[0],
         f"imagefolder:{tmp_path / 'img'}"),
        (["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va")], "VideoFiles", "video", True, 112,
         KINETICS_MEAN[0], f"videofolder:{videos / 'tr'}"),
        (["--train_list", str(tmp_path / "list.txt"), "--val_list", str(tmp_path / "list.txt")], "VideoFiles",
         "video", True, 112, KINETICS_MEAN[0], f"videolist:{tmp_path / 'list.txt'}"),
        (["--dataset", str(tmp_path / "shards"), "--streaming", "--steps_per_epoch", "2"], "Streamed", "images",
         False, 224, IMAGENET_MEAN[0], str(tmp_path / "shards")),
        (["--dataset", "user/some-hub-set"], "ImageFiles", "images", False, 224, IMAGENET_MEAN[0], "user/some-hub-set"),
    ]
    for argv, cls, kind, video, size, mean, name in cases:
        args = parse_args(argv)
        source, inp = source_for(args), input_for(args)
        assert (type(source).__name__, source.kind, source.video, inp.video) == (cls, kind, video, video), argv
        assert (inp.image_size, inp.mean_std and inp.mean_std[0][0], source.name(args)) == (size, mean, name), argv
        assert is_video_model(args.model) == video  # the default model follows the modality
    # --image_size wins over every source's own side, --mean/--std over every source's statistics (its own too)
    assert input_for(parse_args(["--dataset", "moving_digits", "--image_size", "16"])).image_size == 16
    mine = ["--mean", "0.5", "0.5", "0.5", "--std", "0.2", "0.2", "0.2"]
    assert input_for(parse_args(["--train_dir", str(tmp_path / "img"), *mine])).mean_std[0] == (0.5,) * 3
    assert input_for(parse_args(mine)).mean_std == ((0.5,) * 3, (0.2,) * 3)
    assert input_for(parse_args([])).mean_std == (DIGITS_MEAN, DIGITS_STD)


def test_every_source_answers_the_protocol_with_datasets_of_its_own():
    sources = {cls for cls in EMBEDDED.values()} | {type(source_for(parse_args(argv))) for argv in (
        ["--dataset", "user/x"], ["--dataset", "user/x", "--streaming", "--steps_per_epoch", "1"])}
    assert len(sources) == 7
    for cls in sources:
        assert issubclass(cls, DataSource) and cls.datasets is not DataSource.datasets, cls


@pytest.mark.parametrize("argv, samples, labels_hashed", [
    (["--dataset", "synthetic", "--synthetic_train_samples", "20", "--image_size", "8"], 20, False),
    (["--max_train_samples", "30", "--max_val_samples", "10"], 30, True),
])
def test_a_sources_signature_is_its_size_classes_and_labels_in_order(argv, samples, labels_hashed):
    args = parse_args(argv)
    source = source_for(args)
    train, val, names, _ = datasets_for(args)
    signature = source.signature(train, len(names))
    assert source.sample_count(train) == len(train) == signature["train_samples"] == samples
    assert signature["classes"] == len(names) == (args.num_classes if "synthetic" in argv else 10)
    labels = np.asarray(train.dataset.labels, dtype=np.int64).tobytes() if labels_hashed else b""
    assert signature["labels_sha256"] == hashlib.sha256(labels).hexdigest()[:16]


def test_a_hub_dataset_whose_card_declares_no_features_is_typed_by_its_folder_builder(videos, monkeypatch):
    """Online, a Hub repo of raw video files gets `datasets`' videofolder builder, whose features are only known
    once its files are read: it is still a video source, found without loading (here a real videofolder builder
    over the fixture's files stands in for the Hub's answer, which needs the network)."""
    import datasets

    from utils.data.sources import hub as sources

    builder = datasets.load_dataset_builder("videofolder", data_dir=str(videos / "tr"))
    assert builder.info.features is None  # what makes the question worth asking
    monkeypatch.setattr(sources, "_hub", lambda name, config, load: builder if not load else pytest.fail("loaded"))
    assert type(source_for(parse_args(["--dataset", "someone/raw-videos"]))).__name__ == "StoredVideos"
