"""Data sources and bad data: real files in temporary folders, a save_to_disk dataset, the offline Hub path."""

from pathlib import Path

import numpy as np
import pytest
from conftest import cache_hub_dataset, main_fails, make_folder, offline_env, read_json, run_main, runs_in_one_process
from PIL import Image
from ranks import ranks_ok

from utils.config.options import parse_args
from utils.data.errors import DataError
from utils.data.sources.image_files import load_splits

FAST = ["--image_size", "16", "--batch_size", "4", "--num_workers", "0", "--epochs", "1", "--warmup_epochs", "0",
        "--no_plots"]


def splits(argv):
    return load_splits(parse_args(argv))


def test_image_folders_with_sorted_class_order(tmp_path):
    make_folder(tmp_path / "train", {"eel": 3, "cat": 4, "dog": 2})
    make_folder(tmp_path / "val", {"cat": 2, "eel": 1})
    train, val, names, _ = splits(["--train_dir", str(tmp_path / "train"), "--val_dir", str(tmp_path / "val")])
    assert names == ["cat", "dog", "eel"]
    assert sorted(train["label"]) == [0] * 4 + [1] * 2 + [2] * 3
    assert sorted(val["label"]) == [0, 0, 2]  # val's own folders mapped by name, not position


def nested_folder(root):
    """Class folders with images at two nesting depths, plus hidden files and folders to ignore."""
    make_folder(root, {"cat": 2, "dog": 1})
    for rel in ["cat/sub/a.png", "cat/sub/deeper/b.jpg", "dog/x/y/c.png", "cat/.ipynb_checkpoints/0-checkpoint.png",
                "dog/.hidden/d.png", "dog/._0.png"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((root / rel.split("/")[0] / "0.png").read_bytes())
    return root


@pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")  # torchvision 0.29
def test_nested_image_folders_are_labelled_by_their_top_folder(tmp_path):
    import datasets

    from utils.data.decoding.images import decode_rgb

    tr, va = nested_folder(tmp_path / "tr"), nested_folder(tmp_path / "va")
    (va / "cat" / "1.jpg").unlink()
    train, val, names, notes = splits(["--train_dir", str(tr), "--val_dir", str(va)])
    assert names == ["cat", "dog"] and notes == ["validation split: 'validation'"]
    rows = [(str(Path(image["path"]).relative_to(tr)), label)
            for image, label in zip(train.data.column("image").to_pylist(), train["label"])]
    assert rows == [("cat/0.png", 0), ("cat/1.jpg", 0), ("cat/sub/a.png", 0), ("cat/sub/deeper/b.jpg", 0),
                    ("dog/0.png", 1), ("dog/x/y/c.png", 1)]  # hidden files and folders skipped
    assert sorted(val["label"]) == [0, 0, 0, 1, 1]
    stored = train.data.column("image").to_pylist()
    assert all(value["bytes"] is None for value in stored)  # paths only: no image bytes copied into memory
    undecoded = train.cast_column("image", datasets.Image(decode=False))
    assert undecoded[2]["image"] == {"bytes": None, "path": str(tr / "cat" / "sub" / "a.png")}
    assert decode_rgb(undecoded[5]["image"])[:, 0, 0].tolist() == [40, 200, 40]  # dog's PNG colour


def test_a_relative_folder_is_stored_as_absolute_paths(tmp_path, monkeypatch):
    make_folder(tmp_path / "tr", {"cat": 2})
    make_folder(tmp_path / "va", {"cat": 1})
    monkeypatch.chdir(tmp_path)
    train, val, _, _ = splits(["--train_dir", "tr", "--val_dir", "va"])
    paths = [image["path"] for ds in (train, val) for image in ds.data.column("image").to_pylist()]
    assert paths == [str(tmp_path / "tr" / "cat" / "0.png"), str(tmp_path / "tr" / "cat" / "1.jpg"),
                     str(tmp_path / "va" / "cat" / "0.png")]


@pytest.mark.slow
def test_a_run_on_nested_image_folders(tmp_path):
    tr, va = nested_folder(tmp_path / "tr"), nested_folder(tmp_path / "va")
    (va / "cat" / "sub" / "deeper" / "b.jpg").unlink()
    out = tmp_path / "run"
    run_main(["--train_dir", tr, "--val_dir", va, *FAST, "--output_dir", out])
    results = read_json(out / "results.json")
    assert (results["train_samples"], results["val_samples"]) == (6, 5)
    assert read_json(out / "labels.json") == {"0": "cat", "1": "dog"}


def test_a_file_moved_to_another_class_is_other_training_data_for_a_resume(tmp_path, fresh_accelerate_state):
    """The same count of images in the same classes, one of them relabelled: a resume must refuse it (the
    labels in order are part of the data's signature, not only the counts)."""
    from utils.data.sources.catalog import source_for
    from utils.config.settings import datasets_for
    from utils.training.run_folder import FolderError, check_data

    make_folder(tmp_path / "tr", {"cat": 3, "dog": 3})
    make_folder(tmp_path / "va", {"cat": 1, "dog": 1})
    argv = ["--train_dir", str(tmp_path / "tr"), "--val_dir", str(tmp_path / "va")]
    def signature():  # what the run records, from its source (utils/data/sources/protocol.py)
        args = parse_args(argv)
        return source_for(args).signature(datasets_for(args)[0], 2)

    before = signature()
    (tmp_path / "tr" / "cat" / "2.png").rename(tmp_path / "tr" / "dog" / "moved.png")  # still 6 images
    after = signature()
    assert (after["train_samples"], after["classes"]) == (before["train_samples"], before["classes"]) == (6, 2)
    with pytest.raises(FolderError, match=r"the training data changed since the checkpoint \(other labels or order\)"):
        check_data(None, {"data": before}, after)
    check_data(None, {"data": before}, before)  # the same data: accepted


def test_data_dir_layout_and_carving(tmp_path):
    make_folder(tmp_path / "d" / "train", {"cat": 10, "dog": 10})
    make_folder(tmp_path / "d" / "validation", {"cat": 1, "dog": 1})
    _, val, _, notes = splits(["--dataset", "imagefolder", "--data_dir", str(tmp_path / "d")])
    assert len(val) == 2 and notes == ["validation split: 'validation'"]
    make_folder(tmp_path / "e" / "train", {"cat": 10, "dog": 10})
    train, val, _, notes = splits(["--dataset", "imagefolder", "--data_dir", str(tmp_path / "e"),
                                   "--val_fraction", "0.2"])
    assert (len(train), len(val)) == (16, 4) and sorted(val["label"]) == [0, 0, 1, 1]  # stratified
    assert "carved 4 images (20%)" in notes[0]


@pytest.fixture
def saved_dataset(tmp_path):
    import datasets

    g = np.random.default_rng(0)
    images = [Image.fromarray(g.integers(0, 255, (10, 12, 3), dtype=np.uint8)) for _ in range(40)]
    features = datasets.Features(img=datasets.Image(), fine_label=datasets.ClassLabel(names=list("abcd")),
                                 extra=datasets.Value("string"))
    ds = datasets.Dataset.from_dict({"img": images, "fine_label": [i % 4 for i in range(40)],
                                     "extra": ["x"] * 40}, features=features)
    path = tmp_path / "saved"
    datasets.DatasetDict(train=ds.select(range(30)), test=ds.select(range(30, 40))).save_to_disk(str(path))
    return path


def test_save_to_disk_round_trip_and_column_detection(saved_dataset):
    train, val, names, notes = splits(["--dataset", str(saved_dataset)])
    assert (len(train), len(val), names) == (30, 10, list("abcd"))
    assert train.column_names == ["image", "label"] and notes == ["validation split: 'test'"]
    train, val, _, _ = splits(["--dataset", str(saved_dataset), "--max_train_samples", "7", "--max_val_samples", "3"])
    assert (len(train), len(val)) == (7, 3)
    again, _, _, _ = splits(["--dataset", str(saved_dataset), "--max_train_samples", "7"])
    assert again["label"] == train["label"]  # a seeded subset


def test_the_digits_take_seeded_subsets_too():
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    train, val, names, _ = datasets_for(parse_args(["--max_train_samples", "100", "--max_val_samples", "30"]))
    whole, whole_val, _, _ = datasets_for(parse_args([]))
    assert (len(train), len(val), len(whole), len(whole_val), len(names)) == (100, 30, 1437, 360, 10)
    again, _, _, _ = datasets_for(parse_args(["--max_train_samples", "100"]))
    assert again.dataset.rows["label"][:] == train.dataset.rows["label"][:]  # seeded: the same 100


def test_missing_column_lists_the_columns(saved_dataset):
    with pytest.raises(DataError, match=r"label_column: no column 'nope'; columns are: img, fine_label, extra"):
        splits(["--dataset", str(saved_dataset), "--label_column", "nope"])


def script_error(argv, tmp_path, capsys):
    """Run the script (in this process); return its one error line (and assert exit code 2 and that nothing was
    written)."""
    out = tmp_path / "run"
    code, err = main_fails([*map(str, argv), "--output_dir", str(out)], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1, err[-2000:]
    assert not (out / "results.json").exists()
    return errors[0]


def bad_labels(t):
    import datasets

    feats = datasets.Features(image=datasets.Image(), label=datasets.Value("int64"))
    ds = datasets.Dataset.from_dict({"image": [Image.new("RGB", (4, 4))] * 4, "label": [0, 1, 2, 1]}, features=feats)
    datasets.DatasetDict(train=ds, validation=ds.map(lambda r: {"label": 5})).save_to_disk(str(t / "a"))
    datasets.DatasetDict(train=ds, validation=ds.filter(lambda r: False)).save_to_disk(str(t / "b"))
    datasets.DatasetDict(train=ds.filter(lambda r: False), validation=ds).save_to_disk(str(t / "c"))


@pytest.mark.parametrize("setup, argv, message", [
    (lambda t: make_folder(t / "tr", {"cat": 2}) and (t / "tr" / "dog").mkdir(),
     ["--train_dir", "{t}/tr"], "train_dir: class folder {t}/tr/dog holds no images"),
    (lambda t: make_folder(t / "tr", {"cat": 2}) and make_folder(t / "va", {"cat": 1, "eel": 1}),
     ["--train_dir", "{t}/tr", "--val_dir", "{t}/va"], "val_dir: classes not in train_dir: eel"),
    (lambda t: None, ["--train_dir", "{t}/missing"], "train_dir: {t}/missing is not a readable folder"),
    (lambda t: (t / "empty").mkdir(), ["--train_dir", "{t}/empty"], "train_dir: {t}/empty has no class sub-folders"),
    (lambda t: (t / "d").mkdir(), ["--dataset", "imagefolder", "--data_dir", "{t}/d"], "data_dir: {t}/d has no train/"),
    (bad_labels, ["--dataset", "{t}/a"], "label_column: 4 labels outside [0, 3), e.g. 5"),
    (bad_labels, ["--dataset", "{t}/b"], "val_split: the validation split 'validation' is empty"),
    (bad_labels, ["--dataset", "{t}/c"], "train_split: split 'train' is empty"),
    (bad_labels, ["--dataset", "{t}/a", "--label_column", "nope"],
     "label_column: no column 'nope'; columns are: image, label"),
    (lambda t: make_folder(t / "tr", {"cat": 3, "dog": 3, "eel": 3}), ["--train_dir", "{t}/tr"],
     "val_fraction: cannot carve a stratified 10% of 9 images in 3 classes"),
], ids=["empty-class", "unknown-val-class", "missing", "no-classes", "no-train", "labels", "empty-val",
        "empty-train", "no-column", "carve-too-small"])
def test_bad_data_is_one_line_exit_2_before_training(tmp_path, capsys, setup, argv, message):
    setup(tmp_path)
    error = script_error([a.format(t=tmp_path) for a in argv], tmp_path, capsys)
    assert message.format(t=tmp_path) in error
    assert not (tmp_path / "run").exists()  # not even the folder it would have written to


def make_cached_hub_dataset(cache_dir, name):
    """3 colours as a Hub dataset in the local cache: 9 train / 3 test images."""
    import datasets

    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=["red", "green", "blue"]))
    colors = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    cache_hub_dataset(cache_dir, name, {split: datasets.Dataset.from_dict(
        {"image": [Image.new("RGB", (8, 8), colors[i % 3]) for i in range(n)], "label": [i % 3 for i in range(n)]},
        features=features) for split, n in {"train": 9, "test": 3}.items()})


@pytest.mark.slow
def test_a_hub_dataset_trains_from_the_local_cache_offline_and_one_not_cached_is_one_line(tmp_path):
    # One fresh interpreter for both runs: `datasets` reads its cache folder from the environment at import.
    env = offline_env(tmp_path)
    make_cached_hub_dataset(Path(env["HF_DATASETS_CACHE"]), "tester/tiny-images")
    out, missing = tmp_path / "run", tmp_path / "missing"
    cached, not_cached = runs_in_one_process([["--dataset", "tester/tiny-images", *FAST, "--output_dir", out],
                                              ["--dataset", "tester/not-cached", "--output_dir", missing]],
                                             env, tmp_path)
    assert cached["code"] == 0, cached["stderr"][-3000:]
    assert cached["imported"] == []  # a run pays only for what it uses: evaluate (seconds) is --metrics' alone
    results = read_json(out / "results.json")
    assert (results["dataset"], results["train_samples"], results["val_samples"]) == ("tester/tiny-images", 9, 3)
    assert read_json(out / "labels.json") == {"0": "red", "1": "green", "2": "blue"}

    assert not_cached["code"] == 2
    errors = [line for line in not_cached["stderr"].splitlines() if "error:" in line]
    assert len(errors) == 1 and "could not reach 'tester/not-cached' on the Hub" in errors[0]
    assert "HF_DATASETS_CACHE" in errors[0] and "HF_HUB_OFFLINE=1" in errors[0]
    assert not missing.exists()


def test_corrupt_image_stops_with_the_file_named(tmp_path, capsys):
    make_folder(tmp_path / "tr", {"cat": 3, "dog": 3})
    (tmp_path / "tr" / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    out = tmp_path / "run"
    code, err = main_fails(["--train_dir", tmp_path / "tr", "--val_fraction", "0.3", *FAST, "--output_dir", out],
                           capsys)
    assert code == 2, err[-2000:]
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert f"cannot decode {tmp_path}/tr/dog/broken.jpg" in errors[0] and "--skip_bad_images" in errors[0]
    assert not (out / "results.json").exists()


@pytest.mark.slow
def test_skipped_images_are_reported_exactly_on_2_processes(tmp_path):
    make_folder(tmp_path / "tr", {"cat": 6, "dog": 5})
    make_folder(tmp_path / "va", {"cat": 4, "dog": 3})  # 7 val images: odd, and batch 4
    good = tmp_path / "tr" / "cat" / "0.png"
    (tmp_path / "tr" / "cat" / "truncated.jpg").write_bytes(
        (tmp_path / "tr" / "cat" / "1.jpg").read_bytes()[:60])
    (tmp_path / "va" / "dog" / "empty.png").write_bytes(b"")
    out = tmp_path / "run"
    ranks_ok(["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", *FAST, "--skip_bad_images",
              "--output_dir", out], nproc=2)
    results = read_json(out / "results.json")
    expected = sorted([str(tmp_path / "tr" / "cat" / "truncated.jpg"), str(tmp_path / "va" / "dog" / "empty.png")])
    assert results["skipped_images"] == expected
    assert [line.split("\t")[0] for line in (out / "bad_images.txt").read_text().splitlines()] == expected
    assert (results["val_samples"], results["train_samples"], results["world_size"]) == (7, 12, 2)
    assert good.exists()


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_folder_run_counts_every_val_image_once(tmp_path, nproc):
    make_folder(tmp_path / "tr", {"cat": 5, "dog": 4, "eel": 3})
    make_folder(tmp_path / "va", {"cat": 3, "dog": 2, "eel": 2})  # 7: divides by neither 2 nor 4
    out = tmp_path / "run"
    ranks_ok(["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", *FAST, "--output_dir", out], nproc=nproc)
    results = read_json(out / "results.json")
    assert (results["val_samples"], results["train_samples"], results["world_size"]) == (7, 12, nproc)
    assert results["dataset"] == f"imagefolder:{tmp_path / 'tr'}" and results["skipped_images"] == []
    assert read_json(out / "labels.json") == {"0": "cat", "1": "dog", "2": "eel"}
