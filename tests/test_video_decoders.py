"""--video_decoder torchcodec: where FFmpeg's shared libraries are on the machine, torchcodec's VideoDecoder gives
PyAV's frame counts and frames for MP4, WebM and AVI (past the stream's end: its last frame), and the same clips;
where they are not, the option is one line naming what is missing. (Nothing is installed or faked here: without
FFmpeg the comparison is skipped, saying why.)"""

import numpy as np
import pytest
import torch
from conftest import make_video
from PIL import Image

from utils.config.options import parse_args
from utils.core.seeding import sample_rng
from utils.data.sources import video_files as video_sources
from utils.data.decoding.video import VIDEO_READERS, read_video_file, read_video_torchcodec, torchcodec_video_problem

PROBLEM = torchcodec_video_problem()


@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
@pytest.mark.parametrize("suffix, codec", [(".mp4", "libx264"), (".webm", "libvpx"), (".avi", "mpeg4")])
def test_torchcodec_reads_pyavs_counts_and_frames(tmp_path, suffix, codec):
    path = make_video(tmp_path / f"v{suffix}", frames=30, codec=codec)
    for wanted in ([0, 1, 2], [11, 13, 15, 17], [29, 29, 29], [4, 20]):
        counts = {}
        frames = {name: read(str(path), lambda n, name=name, counts=counts, wanted=wanted:
                             counts.setdefault(name, n) and wanted)
                  for name, read in VIDEO_READERS.items()}
        assert counts == {"pyav": 30, "torchcodec": 30}
        assert torch.equal(frames["pyav"], frames["torchcodec"]), (suffix, wanted)
    # asked past the end (a count that overstates the video): the last frame, as PyAV's reader gives it
    past = [27, 31, 40]
    assert torch.equal(read_video_torchcodec(str(path), lambda n: past), read_video_file(str(path), lambda n: past))


@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
def test_the_same_training_and_validation_clips_through_either_decoder(videos):
    from utils.config.settings import datasets_for

    items = {}
    for decoder in ("pyav", "torchcodec"):
        args = parse_args(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--image_size", "16",
                           "--clip_len", "4", "--video_decoder", decoder])
        train, val, _, _ = datasets_for(args)
        train.set_epoch(2)
        items[decoder] = [train[i]["pixel_values"] for i in range(len(train))] + \
                         [val[i]["pixel_values"] for i in range(len(val))]
    assert all(torch.equal(a, b) for a, b in zip(items["pyav"], items["torchcodec"])) and len(items["pyav"]) == 13


def test_torchcodec_where_it_cannot_load_is_one_line(videos, monkeypatch, capsys):
    missing = "torchcodec's video decoder needs FFmpeg's shared libraries (versions 4 to 9), which this machine lacks"
    monkeypatch.setattr(video_sources, "torchcodec_video_problem", lambda: missing)
    with pytest.raises(SystemExit) as e:
        parse_args(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"),
                    "--video_decoder", "torchcodec"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == f"train_classification.py: error: video_decoder: {missing}, got " \
                                                "'torchcodec'"
    assert PROBLEM is None or "FFmpeg" in PROBLEM or "not installed" in PROBLEM  # the probe says which, when it fails


@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
@pytest.mark.parametrize("no_hflip", [False, True])
def test_clips_decoded_on_the_device_are_the_workers_clips(videos, tmp_path, no_hflip):
    """--decode_on_device with torchcodec: a worker hands over the file, the clip's frame indices and the preset's
    draws (its generator left where the preset leaves it); the main process's decoder (here the CPU) gives the
    workers' pixels bit for bit, train (epoch 2) and validation; a folder of frames comes decoded from the worker;
    a file the main process cannot decode is marked invalid with its path."""
    from utils.config.settings import datasets_for
    from utils.data.decoding.on_device import DeviceDecoder, PIXELS, VIDEO

    frames_dir = tmp_path / "frames"  # a video as a folder of frame images, listed beside the files
    frames_dir.mkdir()
    for t in range(6):
        Image.fromarray(np.full((24, 32, 3), 40 * t, dtype=np.uint8)).save(frames_dir / f"img_{t:05d}.jpg")
    for split in ("tr", "va"):
        files = sorted((videos / split).glob("*/*.mp4"))
        lines = [f"{f} {int(f.parent.name == 'right')}" for f in files] + ([f"{frames_dir} 0"] if split == "tr" else [])
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n")
    items, after = {}, {}
    for on_device in (False, True):
        args = parse_args(["--train_list", str(tmp_path / "tr.txt"), "--val_list", str(tmp_path / "va.txt"),
                           "--image_size", "16", "--clip_len", "4", "--video_decoder", "torchcodec",
                           *(["--decode_on_device"] if on_device else []), *(["--no_hflip"] if no_hflip else [])])
        train, val, _, _ = datasets_for(args)
        train.set_epoch(2)
        items[on_device] = [train[i] for i in range(len(train))] + [val[i] for i in range(len(val))]
        clips = train.dataset
        with sample_rng(args.seed, 2, 3):  # as VideoClips draws for (seed, epoch, key): offsets, then the preset
            clips._load(3, torch.rand(clips.segments).tolist())
            after[on_device] = torch.rand(1)  # the generator's next draw: as many taken either way
    assert torch.equal(after[False], after[True])
    decoder = DeviceDecoder("bilinear", torch.device("cpu"))
    kinds = [item["pixel_values"]["params"][0].item() for item in items[True]]
    assert kinds.count(PIXELS) == 1 and kinds.count(VIDEO) == len(kinds) - 1 == 13
    batch = torch.utils.data.default_collate(items[True])
    decoded = decoder(batch)
    assert all(torch.equal(a["pixel_values"], b) for a, b in zip(items[False], decoded["pixel_values"]))
    assert decoded["valid"].all()
    # a file that goes bad between the worker's look and the device's decoding
    broken = torch.utils.data.default_collate(items[True][:2])
    broken["pixel_values"]["encoded"][1] = b"not a video"
    out = decoder(broken)
    assert out["valid"].tolist() == [True, False] and "Error" in out["error"][1]
    assert out["source"][1] == str(sorted((videos / "tr").glob("*/*.mp4"))[1])  # named as the worker names it
    assert torch.equal(out["pixel_values"][0], items[False][0]["pixel_values"]) and not out["pixel_values"][1].any()


@pytest.mark.slow
@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
def test_sigkill_then_resume_with_clips_decoded_on_the_device_is_bitwise_the_run_decoded_in_the_workers(
        videos, tmp_path):
    """r3d_18, 2 processes with a worker each, torchcodec: a --decode_on_device run SIGKILLed after step 7 and resumed
    from step_6 (mid-epoch) ends with the weights and validation of the run whose workers decoded the clips."""
    from ranks import ranks_killed, ranks_ok
    from conftest import assert_same_weights, read_json, resumed_from

    def job(out, *extra):
        return ["--train_dir", videos / "tr", "--val_dir", videos / "va", "--model", "r3d_18", "--image_size", "16",
                "--clip_len", "4", "--frame_interval", "2", "--batch_size", "1", "--epochs", "2", "--lr", "0.001",
                "--video_decoder", "torchcodec", "--num_workers", "1", "--output_dir", out, *extra]

    ranks_ok(job(tmp_path / "workers"), nproc=2)
    argv = job(tmp_path / "device", "--decode_on_device", "--checkpoint_every_steps", "1", "--keep_last", "2")
    ranks_killed(argv, "step:7", nproc=2)
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert "decode_on_device: the workers read each video file's index" in proc.stdout
    assert resumed_from(proc.stdout) == tmp_path / "device" / "checkpoints" / "step_6"
    assert_same_weights(tmp_path / "device", tmp_path / "workers")
    one, two = read_json(tmp_path / "device" / "results.json"), read_json(tmp_path / "workers" / "results.json")
    assert (one["val_loss"], one["val_top1"], one["val_samples"]) == (two["val_loss"], two["val_top1"], 5)
