"""--video_decoder torchcodec: where FFmpeg's shared libraries are on the machine, torchcodec's VideoDecoder gives
PyAV's frame counts and frames for MP4, WebM and AVI (past the stream's end: its last frame), and the same clips;
where they are not, the option is one line naming what is missing. (Nothing is installed or faked here: without
FFmpeg the comparison is skipped, saying why.)"""

import pytest
import torch
from conftest import make_video

from utils.config.options import parse_args
from utils.data import video_sources
from utils.data.video import VIDEO_READERS, read_video_file, read_video_torchcodec, torchcodec_video_problem

PROBLEM = torchcodec_video_problem()


@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
@pytest.mark.parametrize("suffix, codec", [(".mp4", "libx264"), (".webm", "libvpx"), (".avi", "mpeg4")])
def test_torchcodec_reads_pyavs_counts_and_frames(tmp_path, suffix, codec):
    path = make_video(tmp_path / f"v{suffix}", frames=30, codec=codec)
    for wanted in ([0, 1, 2], [11, 13, 15, 17], [29, 29, 29], [4, 20]):
        counts = {}
        frames = {name: read(str(path), lambda n, name=name: counts.setdefault(name, n) and wanted)
                  for name, read in VIDEO_READERS.items()}
        assert counts == {"pyav": 30, "torchcodec": 30}
        assert torch.equal(frames["pyav"], frames["torchcodec"]), (suffix, wanted)
    # asked past the end (a count that overstates the video): the last frame, as PyAV's reader gives it
    past = [27, 31, 40]
    assert torch.equal(read_video_torchcodec(str(path), lambda n: past), read_video_file(str(path), lambda n: past))


@pytest.mark.skipif(PROBLEM is not None, reason=f"torchcodec's video decoder does not load here: {PROBLEM}")
def test_the_same_training_and_validation_clips_through_either_decoder(videos):
    from utils.data.catalog import resolve_input, source_for

    items = {}
    for decoder in ("pyav", "torchcodec"):
        args = parse_args(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--image_size", "16",
                           "--clip_len", "4", "--video_decoder", decoder])
        train, val, _, _ = source_for(args).datasets(args, resolve_input(args))
        train.set_epoch(2)
        items[decoder] = [train[i]["pixel_values"] for i in range(len(train))] + \
                         [val[i]["pixel_values"] for i in range(len(val))]
    assert all(torch.equal(a, b) for a, b in zip(items["pyav"], items["torchcodec"])) and len(items["pyav"]) == 13


def test_torchcodec_where_it_cannot_load_is_one_line(videos, monkeypatch, capsys):
    missing = "torchcodec's video decoder needs FFmpeg's shared libraries (versions 4 to 9), which this machine lacks"
    monkeypatch.setattr(video_sources, "torchcodec_video_problem", lambda: missing)
    with pytest.raises(SystemExit) as e:
        parse_args(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--video_decoder", "torchcodec"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == f"train_classification.py: error: video_decoder: {missing}, got " \
                                                "'torchcodec'"
    assert PROBLEM is None or "FFmpeg" in PROBLEM or "not installed" in PROBLEM  # the probe says which, when it fails
