"""Video through the one training loop: multi-view test exact on 1 and 2 processes, bad videos, exact resume."""

import pytest
import torch
from conftest import (assert_same_weights, cache_hub_dataset, main_fails, offline_env, read_json,
                      reset_accelerate_state, resumed_from, run_main, runs_in_one_process)
from ranks import ranks_killed, ranks_ok

from utils.models.libraries import build_model

pytestmark = pytest.mark.slow


def video_job(videos, out, *extra):
    """r3d_18 on 4-frame 16x16 clips of the `videos` fixture: 2 classes, 8 train / 5 val videos."""
    return ["--train_dir", videos / "tr", "--val_dir", videos / "va", "--model", "r3d_18", "--image_size", "16",
            "--clip_len", "4", "--frame_interval", "2", "--batch_size", "2", "--epochs", "2", "--warmup_epochs",
            "0.5", "--lr", "0.01", "--log_every", "1", "--no_plots", "--output_dir", out, *extra]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A random r3d_18 for 2 classes, saved: what --eval_only scores."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "r3d.safetensors"
    save_file(build_model("r3d_18", 2).state_dict(), path)
    return path


def test_multiview_test_is_exact_on_1_and_2_processes(videos, weights, tmp_path):
    """5 videos (odd), 3 clips x 2 crops: 15 items, so 2 ranks pad; every video counted once, same figures."""
    results = {}
    for nproc in (1, 2):
        out = tmp_path / f"p{nproc}"
        ranks_ok(video_job(videos, out, "--eval_only", "--init_from", weights, "--test_clips", "3", "--test_crops",
                           "2", "--num_workers", "1", "--dump_rank_metrics"), nproc=nproc)
        results[nproc] = read_json(out / "results.json")
        ranks = [read_json(out / "eval" / "test" / f"rank_{r}.json") for r in range(nproc)]
        total = read_json(out / "eval" / "test" / "global.json")
        assert sum(r["samples"] for r in ranks) == total["samples"] == 5
        for key in ("correct_top1", "correct_topk"):
            assert sum(r[key] for r in ranks) == total[key]
        assert abs(sum(r["loss_sum"] for r in ranks) - total["loss_sum"]) < 1e-9
    one, two = results[1], results[2]
    assert one["test_videos"] == two["test_videos"] == 5
    assert one["test_clips_scored"] == two["test_clips_scored"] == 15
    for key in ("video_top1", "video_topk", "clip_top1", "val_top1", "val_samples"):
        assert one[key] == two[key], key
    assert abs(one["video_loss"] - two["video_loss"]) < 1e-6


def test_bad_video_stops_the_run_or_is_skipped(videos, tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(videos, data)
    broken = data / "tr" / "left" / "broken.mp4"
    broken.write_bytes(b"not a video at all")
    code, err = main_fails(video_job(data, tmp_path / "strict", "--num_workers", "0", "--epochs", "1"), capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and f"cannot decode {broken}" in lines[0] and "--skip_bad_images" in lines[0]
    out = tmp_path / "skip"
    run_main(video_job(data, out, "--num_workers", "0", "--epochs", "1", "--skip_bad_videos"))
    results = read_json(out / "results.json")
    assert results["skipped_images"] == [str(broken)]
    assert str(broken) in (out / "bad_images.txt").read_text()


def test_sigkill_mid_epoch_with_workers_then_resume_is_bitwise_equal(videos, tmp_path):
    """4 steps an epoch; killed (with its 2 workers) after step 6, resumed from step_5."""
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(video_job(videos, whole, "--num_workers", "2"), nproc=1)
    argv = video_job(videos, out, "--num_workers", "2", "--checkpoint_every_steps", "1", "--keep_last", "2")
    ranks_killed(argv, "step:6")
    assert not (out / "results.json").exists()
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=1)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_5"
    assert_same_weights(out, whole)
    assert read_json(out / "results.json")["val_top1"] == read_json(whole / "results.json")["val_top1"]


def test_a_saved_dataset_with_a_video_column_trains_on_two_processes_as_its_video_folders_do(videos, tmp_path):
    """The `videos` fixture's files as a save_to_disk DatasetDict (Video column, ClassLabel), in the folders' order:
    decoded with PyAV from what `datasets` stored, the 2-process run's weights are bitwise the folder run's."""
    import datasets

    from utils.data.sources.folders import folder_files

    features = datasets.Features(video=datasets.Video(), label=datasets.ClassLabel(names=["left", "right"]))
    splits = {}
    for split, folder in (("train", "tr"), ("validation", "va")):
        files = folder_files(videos / folder, split, {".mp4"}, "videos")
        splits[split] = datasets.Dataset.from_dict(
            {"video": [f for fs in files.values() for f in fs],
             "label": [i for i, fs in enumerate(files.values()) for _ in fs]}, features=features)
    datasets.DatasetDict(splits).save_to_disk(tmp_path / "ds")
    job = video_job(videos, tmp_path / "folders", "--num_workers", "1")
    ranks_ok(job, nproc=2)
    at = job.index("--train_dir")
    saved = [*job[:at], "--dataset", tmp_path / "ds", *job[at + 4:]]  # --train_dir/--val_dir out
    saved[saved.index("--output_dir") + 1] = tmp_path / "saved"
    proc = ranks_ok(saved, nproc=2)
    assert "video dataset: 8 train / 5 val videos (split 'validation'), decoded with PyAV" in proc.stdout
    assert_same_weights(tmp_path / "saved", tmp_path / "folders")
    one, two = read_json(tmp_path / "saved" / "results.json"), read_json(tmp_path / "folders" / "results.json")
    assert ((one["val_top1"], one["val_samples"], one["dataset"])
            == (two["val_top1"], 5, f"videodataset:{tmp_path / 'ds'}"))


def test_a_hub_video_dataset_in_the_local_cache_trains_offline_as_its_video_folders_do(videos, tmp_path):
    """The `videos` fixture's files as a Hub dataset in the local cache (parquet, the videos' bytes embedded, a
    Video column), Hub offline: decoded with PyAV in a DataLoader worker, the run's weights are bitwise the
    folder run's (one process each, in one fresh interpreter: `datasets` reads its cache folder at import)."""
    import datasets

    from utils.data.sources.folders import folder_files

    env = offline_env(tmp_path)
    features = datasets.Features(clip=datasets.Video(), label=datasets.ClassLabel(names=["left", "right"]))
    splits = {}
    for split, folder in (("train", "tr"), ("validation", "va")):
        files = folder_files(videos / folder, split, {".mp4"}, "videos")
        splits[split] = datasets.Dataset.from_dict(
            {"clip": [{"path": None, "bytes": open(f, "rb").read()} for fs in files.values() for f in fs],
             "label": [i for i, fs in enumerate(files.values()) for _ in fs]}, features=features)
    cache_hub_dataset(tmp_path / "hf_home" / "datasets", "tester/tiny-videos", splits)
    job = video_job(videos, tmp_path / "folders", "--num_workers", "1", "--epochs", "1")
    at = job.index("--train_dir")
    hub = [*job[:at], "--dataset", "tester/tiny-videos", *job[at + 4:]]
    hub[hub.index("--output_dir") + 1] = tmp_path / "hub"
    from_hub, from_folders = runs_in_one_process([hub, job], env, tmp_path)
    assert from_hub["code"] == 0 and from_folders["code"] == 0, from_hub["stderr"][-3000:]
    assert "video dataset: 8 train / 5 val videos (split 'validation'), decoded with PyAV" in from_hub["stdout"]
    assert_same_weights(tmp_path / "hub", tmp_path / "folders")
    one, two = read_json(tmp_path / "hub" / "results.json"), read_json(tmp_path / "folders" / "results.json")
    assert ((one["val_top1"], one["val_samples"], one["dataset"])
            == (two["val_top1"], 5, "videodataset:tester/tiny-videos"))


def test_moving_digits_needs_time_a_frame_model_cannot_tell_the_direction(tmp_path, fresh_accelerate_state):
    """Moving digits at 8 px (a third of 16 px's time; the motion survives the resize): mc3_18 (3D) with the recipe's
    2 epochs learns the direction (1.000 here with --seed 0 and 1; 0.954 after one epoch, too close to its bound on
    every machine: at 16 px one epoch gave 0.956 on one and 0.842 on another); resnet18 scoring frames one by one (TSN)
    sees at most the axis of motion and stays near chance for its sense (0.293 after one epoch: it cannot do better,
    test_video_data.py shows why)."""
    import train_classification

    top1 = {}
    for model, epochs in (("mc3_18", 2), ("resnet18", 1)):
        out = tmp_path / model
        results = train_classification.main(["--dataset", "moving_digits", "--model", model, "--image_size", "8",
                                             "--epochs", str(epochs), "--num_workers", "0", "--output_dir", str(out)])
        top1[model] = results["val_top1"]
        reset_accelerate_state()  # main() again in this process
    assert top1["mc3_18"] >= 0.9 and top1["resnet18"] <= 0.55, top1
