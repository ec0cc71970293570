"""Video data without training: list files, folders and frame folders, clip positions, seeking, test views."""

import numpy as np
import pytest
import torch
from conftest import make_video
from torchvision import tv_tensors

from utils.config.options import parse_args
from utils.core.seeding import EpochSeeded
from utils.config.settings import input_for
from utils.config.settings import datasets_for
from utils.data.errors import DataError
from utils.data.datasets.clips import ArrayFrames, VideoClips, frame_indices
from utils.data.decoding.video import read_video_file
from utils.data.transforms.video import video_eval, video_test
from utils.data.sources.video_files import parse_list


def grey_level(frames):
    """The frame indices make_video wrote: grey level 8 * t (the median of a row: the bar is 4 of 32 pixels)."""
    return (frames[:, 0, 0].float().median(dim=1).values / 8).round().long().tolist()


def test_list_files_in_both_formats_space_or_comma(tmp_path):
    for name in ("a.mp4", "b.avi"):
        (tmp_path / name).touch()
    (tmp_path / "frames" / "c").mkdir(parents=True)
    (tmp_path / "two.txt").write_text("a.mp4 3\n\n# a comment\nb.avi,0\n")
    (tmp_path / "three.txt").write_text("frames/c 120 2\na.mp4, 30, 1\n")  # GluonCV: path num_frames label
    assert parse_list(tmp_path / "two.txt") == ([str(tmp_path / "a.mp4"), str(tmp_path / "b.avi")], [3, 0])
    assert parse_list(tmp_path / "three.txt") == ([str(tmp_path / "frames/c"), str(tmp_path / "a.mp4")], [2, 1])
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rel.txt").write_text("a.mp4 1\n")  # relative to --data_root, not the list's folder
    assert parse_list(tmp_path / "sub" / "rel.txt", data_root=tmp_path) == ([str(tmp_path / "a.mp4")], [1])


@pytest.mark.parametrize("text, line, says", [
    ("a.mp4 1\nb.mp4\n", 2, "expected 'path label' or 'path num_frames label', got 1 fields"),
    ("a.mp4 1 2 3\n", 1, "got 4 fields"),
    ("a.mp4 1\na.mp4 10 1\n", 2, "3 fields where the lines above have 2"),
    ("a.mp4 cat\n", 1, "must be integers"),
    ("a.mp4 1\n\nmissing.mp4 0\n", 3, "missing.mp4 does not exist"),
])
def test_a_bad_list_line_is_one_line_with_file_and_number(tmp_path, text, line, says):
    (tmp_path / "a.mp4").touch()
    (tmp_path / "list.txt").write_text(text)
    with pytest.raises(DataError) as e:
        parse_list(tmp_path / "list.txt")
    assert str(e.value).startswith(f"{tmp_path / 'list.txt'}:{line}: ") and says in str(e.value)
    assert "\n" not in str(e.value)


def test_clip_positions_stay_inside_and_short_videos_repeat_their_last_frame():
    assert frame_indices(100, 4, 2, [0.0]) == [0, 2, 4, 6]
    assert frame_indices(100, 4, 2, [0.999]) == [93, 95, 97, 99]  # the last start that fits
    assert frame_indices(100, 4, 2, [0.5]) == [47, 49, 51, 53]  # the centre clip
    assert frame_indices(5, 4, 2, [0.5]) == [0, 2, 4, 4]  # shorter than a clip: the last frame repeats
    assert frame_indices(1, 3, 1, [0.3]) == [0, 0, 0]
    # 3 segments of 30 frames, a 2-frame clip in each
    assert frame_indices(90, 2, 1, [0.0, 0.5, 0.999]) == [0, 1, 44, 45, 88, 89]
    for n in range(1, 60):
        for offset in np.linspace(0, 0.999, 7):
            got = frame_indices(n, 4, 3, [offset, offset])
            assert all(0 <= i < n for i in got)


def clips_of(seed=0, clips=1, segments=1):
    """Videos of 40 frames whose frame t is filled with t: the clip's values are its frame indices."""
    array = np.broadcast_to(np.arange(40, dtype=np.uint8)[None, :, None, None], (6, 40, 4, 4)).copy()
    return VideoClips(ArrayFrames(array), [0, 1] * 3, clip_len=4, interval=3, segments=segments, clips=clips,
                      transform=lambda v: v.as_subclass(torch.Tensor), shape=(3, 4 * segments, 4, 4), seed=seed)


def picked(item):
    return item["pixel_values"][0, :, 0, 0].long().tolist()


def test_training_clips_follow_seed_epoch_and_index_alone():
    ds = clips_of()
    epoch = EpochSeeded(ds, ds.epoch)
    first = [picked(ds[i]) for i in range(6)]
    assert [picked(ds[i]) for i in reversed(range(6))] == first[::-1]  # not of the order of reading
    assert len({tuple(c) for c in first}) > 1  # each video its own position
    for clip in first:
        assert clip == list(range(clip[0], clip[0] + 10, 3)) and 0 <= clip[0] <= 30
    epoch.set_epoch(1)
    assert [picked(ds[i]) for i in range(6)] != first  # another epoch, other clips
    epoch.set_epoch(0)
    assert [picked(ds[i]) for i in range(6)] == first
    assert [picked(clips_of(seed=1)[i]) for i in range(6)] != first
    # Keys past the end are repeated-augmentation copies (--ra_reps): each copy draws its own clip.
    copies = [picked(ds[i + len(ds)]) for i in range(6)]
    assert sum(copy != clip for copy, clip in zip(copies, first)) >= 5, (copies, first)


def test_val_takes_the_centre_clip_and_test_spreads_clips_evenly():
    val = clips_of(seed=None)
    assert picked(val[0]) == [15, 18, 21, 24]  # 15 frames before it, 15 after
    test = clips_of(seed=None, clips=3)
    assert len(test) == 18 and [test[i]["video"] for i in range(6)] == [0, 0, 0, 1, 1, 1]
    assert [picked(test[i])[0] for i in range(3)] == [5, 15, 25]  # centres of 3 equal parts of the room (0..30)


@pytest.mark.parametrize("suffix, codec", [(".mp4", "libx264"), (".webm", "libvpx"), (".avi", "mpeg4")])
def test_seeking_reads_the_same_frames_as_decoding_everything(tmp_path, suffix, codec):
    path = make_video(tmp_path / f"v{suffix}", frames=30, codec=codec)
    for wanted in ([0, 1, 2], [11, 13, 15, 17], [29, 29, 29], [4, 20]):
        seeked = read_video_file(str(path), lambda n, wanted=wanted: wanted)
        whole = read_video_file(str(path), lambda n, wanted=wanted: wanted, seek=False)
        assert torch.equal(seeked, whole)
        if suffix == ".mp4":  # near-lossless grey levels: the very frames asked for
            assert grey_level(seeked) == wanted


@pytest.mark.parametrize("suffix, codec", [(".mp4", "libx264"), (".webm", "libvpx"), (".avi", "mpeg4")])
def test_the_frame_count_is_right_in_every_container(tmp_path, suffix, codec):
    """MP4 and AVI store a count; WebM only a duration, in microseconds: 30 frames at 25 fps are 30 frames."""
    path = make_video(tmp_path / f"v{suffix}", frames=30, codec=codec)
    counts = []
    read_video_file(str(path), lambda n: counts.append(n) or [0])
    assert counts == [30]


def test_a_frame_the_stream_does_not_deliver_is_the_nearest_earlier_one(tmp_path):
    """A count or duration that overstates the video asks for frames past its end: they repeat the last
    one decoded before them, and the video is read (not marked bad)."""
    path = make_video(tmp_path / "v.mp4", frames=30)
    for seek in (True, False):
        assert grey_level(read_video_file(str(path), lambda n: [28, 29, 35], seek=seek)) == [28, 29, 29]
        assert grey_level(read_video_file(str(path), lambda n: [3, 40, 41], seek=seek)) == [3, 29, 29]


def test_a_process_forked_after_threads_decoded_decodes_too(tmp_path):
    """A DataLoader worker, the report's drawing child or a library's multiprocessing child is forked from a process
    whose threads may have decoded videos (PyAV keeps a conversion context per thread): the child decodes the same
    frames and ends, instead of waiting for ever on the parent's conversion threads, which a fork does not copy."""
    import os
    import threading
    import time

    path = str(make_video(tmp_path / "v.mp4", frames=12))
    first = read_video_file(path, lambda n: [0, 5, 11])
    leave = threading.Event()
    decoded = threading.Event()
    other = threading.Thread(target=lambda: (read_video_file(path, lambda n: [1]), decoded.set(), leave.wait(60)))
    other.start()  # alive during the fork, its context with it
    assert decoded.wait(60)
    pid = os.fork()
    if pid == 0:  # the child: one torch thread, as DataLoader workers and the drawing child set
        code = 1
        try:
            torch.set_num_threads(1)
            code = 0 if torch.equal(read_video_file(path, lambda n: [0, 5, 11]), first) else 2
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 60
        while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ended[0] == pid, "the forked child still decodes after 60 s: it hangs"
        assert os.waitstatus_to_exitcode(ended[1]) == 0
    finally:
        leave.set()
        other.join()
        if not ended[0]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def test_video_folders_and_frame_folder_lists(videos, tmp_path):
    args = parse_args(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--image_size", "16",
                       "--clip_len", "4", "--frame_interval", "2"])
    assert args.model == "r2plus1d_18"  # the default for video data
    train, val, names, _ = datasets_for(args)
    assert names == ["left", "right"] and len(train) == 8 and len(val) == 5
    item = val[0]
    assert item["pixel_values"].shape == (3, 4, 16, 16) and item["valid"] and item["labels"] == 0
    # A list whose entries are a folder of frames (mmaction2 rawframes) and a video file.
    frames = tmp_path / "rawframes" / "v1"
    frames.mkdir(parents=True)
    from PIL import Image
    for t in range(9):
        Image.new("RGB", (32, 24), (8 * t,) * 3).save(frames / f"img_{t + 1:05d}.jpg", quality=100)
    (tmp_path / "list.txt").write_text(f"rawframes/v1 9 1\n{videos / 'va' / 'left' / '0.mp4'} 12 0\n")
    (tmp_path / "names.txt").write_text("left\nright\n")
    args = parse_args(["--train_list", str(tmp_path / "list.txt"), "--val_list", str(tmp_path / "list.txt"),
                       "--class_names", str(tmp_path / "names.txt"), "--image_size", "16", "--clip_len", "3",
                       "--frame_interval", "2", "--model", "r3d_18"])
    train, val, names, _ = datasets_for(args)
    assert names == ["left", "right"] and val.labels == [1, 0]
    grey = val[0]["pixel_values"][0, :, 8, 8]  # the frame folder's centre clip: frames 2, 4, 6
    assert (grey.float() / 8).round().tolist() == [2, 4, 6]


def test_three_test_crops_are_left_centre_right_and_one_crop_is_the_val_view():
    inp = input_for(parse_args(["--dataset", "moving_digits", "--image_size", "8"]))  # resized to 8, no crop
    # A 2-frame clip, 8 high and 16 wide, whose pixel values are their column numbers.
    frames = tv_tensors.Video(torch.arange(16, dtype=torch.uint8).expand(2, 3, 8, 16).clone())
    views = video_test(inp, 3)(frames)  # (crops, T, C, H, W)
    assert views.shape == (3, 2, 3, 8, 8)
    left_columns = [int(v[0, 0, 0, 0]) for v in views]
    assert left_columns == [0, 4, 8]
    assert torch.equal(video_test(inp, 1)(frames)[0], video_eval(inp)(frames))
    # A portrait clip (16 high, 8 wide), pixel values its row numbers: top, centre, bottom.
    portrait = tv_tensors.Video(torch.arange(16, dtype=torch.uint8)[:, None].expand(2, 3, 16, 8).clone())
    views = video_test(inp, 3)(portrait)
    assert views.shape == (3, 2, 3, 8, 8)
    assert [int(v[0, 0, 0, 0]) for v in views] == [0, 4, 8] and all(int(v[0, 0, 0, -1]) == int(v[0, 0, 0, 0])
                                                                     for v in views)


def test_a_frame_model_scores_a_moving_digit_and_its_time_reversal_alike_which_moves_the_other_way():
    """Why a frame model (TSN) cannot tell the direction of the moving digits: a clip played backwards is a clip
    of the opposite direction (the path is symmetric in time about its centre), and a model that averages its
    frames' scores gives the two the same logits. The trained gap: tests/test_video_train.py."""
    from utils.data.sources import moving_digits
    from utils.models.libraries import build_model

    clips, labels = moving_digits.load()["validation"]
    names = moving_digits.CLASS_NAMES
    for clip, label in zip(clips[:12], labels[:12]):
        corners = [tuple(int(v.min()) for v in reversed(np.nonzero(frame))) for frame in clip]  # (x, y) per frame
        steps = {(b[0] - a[0], b[1] - a[1]) for a, b in zip(corners, corners[1:])}
        assert steps == {moving_digits.DIRECTIONS[names[label]]}
        back = [corners[::-1][t + 1][k] - corners[::-1][t][k] for t in range(len(corners) - 1) for k in (0, 1)]
        opposite = tuple(-v for v in moving_digits.DIRECTIONS[names[label]])
        assert set(zip(back[::2], back[1::2])) == {opposite} and opposite in moving_digits.DIRECTIONS.values()
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=8, video=True).eval()
    x = torch.from_numpy(clips[:4]).float().div(255)[:, None].expand(4, 3, 8, 24, 24)  # (B, C, T, H, W)
    with torch.no_grad():
        forward, backward = model(x), model(x.flip(2))
    assert torch.allclose(forward, backward, atol=1e-5) and forward.std() > 0


def test_moving_digits_brings_its_own_defaults_and_the_command_line_wins(tmp_path):
    args = parse_args(["--dataset", "moving_digits"])
    assert (args.model, args.epochs, args.clip_len, args.frame_interval, args.batch_size) == ("mc3_18", 2, 8, 1, 32)
    assert parse_args(["--dataset", "moving_digits", "--epochs", "3", "--model", "resnet18"]).epochs == 3
    (tmp_path / "r.yaml").write_text("dataset: moving_digits\nlr: 0.02\n")
    args = parse_args(["--config", str(tmp_path / "r.yaml")])  # the dataset named by a recipe counts too
    assert (args.model, args.lr, args.epochs) == ("mc3_18", 0.02, 2)
    assert parse_args([]).model == "resnet18" and parse_args([]).epochs == 18  # images: untouched


def test_a_video_model_on_images_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--model", "r3d_18"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().endswith("model: a video model needs video data (--train_list, a folder "
                                                    "of videos, --dataset moving_digits), got 'r3d_18'")
