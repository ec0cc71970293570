"""Per-sample augmentation: a function of (seed, epoch, sample index) alone, read through real DataLoaders."""

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from utils.config.options import parse_args
from utils.config.settings import datasets_for

# torchvision 0.29 deprecates its decoders; utils/data/decoding/images.py still uses them on purpose
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")

SAME = (3, 7)  # a/same.png and b/same.png: one file's content under two classes


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """train/ and val/ alike: classes a and b, 3 noise images each plus one identical file in both."""
    root = tmp_path_factory.mktemp("aug")
    g = np.random.default_rng(0)
    same = Image.fromarray(g.integers(0, 256, (40, 48, 3), dtype=np.uint8))
    for split in ("train", "val"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(3):  # texture, so that two crops of one image differ visibly
                Image.fromarray(g.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / split / name / f"{i}.png")
            same.save(root / split / name / "same.png")
    return root


def datasets_of(folders, seed=3):
    args = parse_args(["--train_dir", str(folders / "train"), "--val_dir", str(folders / "val"),
                       "--image_size", "16", "--seed", str(seed)])
    train, val, names, _ = datasets_for(args)
    assert names == ["a", "b"] and len(train) == 8
    return train, val


class WithPid(Dataset):
    """Each sample also says which process read it."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return {**self.dataset[index], "pid": os.getpid()}


def read(loader, pids=None):
    """Every sample's pixels, in dataset order (shuffle=False); the reading processes' ids into `pids`."""
    batches = list(loader)
    if pids is not None:
        pids.update(int(p) for batch in batches for p in batch["pid"])
    return torch.cat([batch["pixel_values"] for batch in batches])


def loader(ds, workers, **kw):
    return DataLoader(WithPid(ds), batch_size=3, shuffle=False, num_workers=workers, **kw)


def test_a_sample_is_the_same_on_every_read_and_with_any_worker_count(folders):
    train, _ = datasets_of(folders)
    for epoch in (0, 1):
        train.set_epoch(epoch)
        one_by_one = torch.stack([train[i]["pixel_values"] for i in range(len(train))])
        assert torch.equal(one_by_one, torch.stack([train[i]["pixel_values"] for i in range(len(train))]))
        assert torch.equal(read(loader(train, 0)), one_by_one)
        pids = set()
        assert torch.equal(read(loader(train, 2), pids), one_by_one)
        assert len(pids) == 2 and os.getpid() not in pids  # the batches were read by 2 worker processes


def test_each_epoch_crops_anew_and_set_epoch_brings_an_epoch_back(folders):
    train, _ = datasets_of(folders)
    epochs = {}
    for epoch in (0, 1, 2):
        train.set_epoch(epoch)
        epochs[epoch] = read(loader(train, 0))
    for a, b in ((0, 1), (1, 2), (0, 2)):
        assert all(not torch.equal(x, y) for x, y in zip(epochs[a], epochs[b]))  # every sample changes
    train.set_epoch(0)
    assert torch.equal(read(loader(train, 0)), epochs[0])
    other_seed, _ = datasets_of(folders, seed=4)
    assert all(not torch.equal(x, y) for x, y in zip(read(loader(other_seed, 0)), epochs[0]))


def test_persistent_workers_follow_set_epoch(folders):
    train, _ = datasets_of(folders)
    expected = {}
    for epoch in (0, 1):
        train.set_epoch(epoch)
        expected[epoch] = read(loader(train, 0))
    train.set_epoch(0)
    persistent, pids = loader(train, 2, persistent_workers=True), [set(), set(), set()]
    first = read(persistent, pids[0])
    train.set_epoch(1)
    second = read(persistent, pids[1])  # the same worker processes: they see the epoch through shared memory
    train.set_epoch(0)
    third = read(persistent, pids[2])
    assert len(pids[0]) == 2 and pids[0] == pids[1] == pids[2]
    assert torch.equal(first, expected[0]) and torch.equal(second, expected[1]) and torch.equal(third, first)


def test_one_image_at_two_indices_is_not_cropped_alike(folders):
    train, val = datasets_of(folders)
    i, j = SAME
    assert (train[i]["labels"], train[j]["labels"]) == (0, 1)
    assert torch.equal(val[i]["pixel_values"], val[j]["pixel_values"])  # the same content, unaugmented
    for epoch in (0, 1, 2):
        train.set_epoch(epoch)
        assert not torch.equal(train[i]["pixel_values"], train[j]["pixel_values"])  # the seed holds the index


def test_reading_samples_leaves_the_callers_rng_alone(folders):
    train, _ = datasets_of(folders)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = train[2]["pixel_values"]
    train.__getitems__([0, 2, 5])
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(456)  # the caller's RNG does not leak into the augmentation either
    assert torch.equal(train[2]["pixel_values"], a)


def progressive(folders, *extra):
    return ["--train_dir", str(folders / "train"), "--val_dir", str(folders / "val"), "--image_size", "16",
            "--progressive_resize", "8", "24", "1", "3", "--progressive_resize_step", "8", *extra]


def test_progressive_resizing_reaches_persistent_workers_epoch_by_epoch(folders):
    # 8 px up to epoch 1, 16 at epoch 2 (the middle of the ramp), 24 from epoch 3; val stays at 16
    train, val, _, notes = datasets_for(parse_args(progressive(folders)))
    assert notes[-1] == "progressive resizing: train crops 8 px in epochs 0-1, 16 px in epoch 2, 24 px in epochs 3-17"
    expected = {}
    for epoch in range(5):
        train.set_epoch(epoch)
        expected[epoch] = read(loader(train, 0))
    assert [expected[e].shape[-1] for e in range(5)] == [8, 8, 16, 24, 24]
    persistent, pids = loader(train, 2, persistent_workers=True), set()
    for epoch in (0, 2, 3, 1):  # the same two worker processes throughout
        train.set_epoch(epoch)
        assert torch.equal(read(persistent, pids), expected[epoch])
    assert len(pids) == 2 and read(loader(val, 2)).shape[-1] == 16


def test_an_undecodable_image_keeps_the_epochs_size(folders, tmp_path):
    import shutil

    shutil.copytree(folders, tmp_path / "data")
    (tmp_path / "data" / "train" / "a" / "0.png").write_bytes(b"not a png")
    train, _, _, _ = datasets_for(parse_args(progressive(tmp_path / "data", "--skip_bad_images")))
    train.set_epoch(3)
    batch = read(loader(train, 0))  # one collated tensor: the placeholder has the epoch's side too
    assert batch.shape == (8, 3, 24, 24) and not batch[0].any()


@pytest.mark.slow
def test_a_run_trains_at_each_epochs_size_and_validates_at_the_val_size(folders, tmp_path, monkeypatch):
    import train_classification
    from utils.data.transforms.batch import BatchInput

    seen, original = [], BatchInput.__call__

    def recording(self, pixels):
        seen.append(pixels.shape[-1])
        return original(self, pixels)

    monkeypatch.setattr(BatchInput, "__call__", recording)
    results = train_classification.main(progressive(folders, "--epochs", "4", "--batch_size", "4", "--num_workers",
                                                    "1", "--warmup_epochs", "0", "--output_dir", str(tmp_path / "run")))
    # per epoch: 2 train batches (8 images), then validation's 2 batches at the val crop
    assert seen == [8, 8, 16, 16] * 2 + [16, 16, 16, 16] + [24, 24, 16, 16]
    assert results["epochs_completed"] == 4
