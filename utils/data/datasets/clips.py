"""Video clips: which frames make a clip, and the dataset that serves them, from videos in memory (moving digits),
stored by `datasets`, or named by path (utils/data/decoding/video.py decodes them)."""

import copy
import io
import os

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors

from utils.core.seeding import sample_rng
from utils.data.datasets.label_kinds import ClassIndex
from utils.data.decoding.on_device import DeferredVideo
from utils.data.decoding.video import read_frame_folder, read_video_file


def frame_indices(num_frames, clip_len, interval, offsets):
    """The frame indices of one clip: `clip_len` frames `interval` apart in each of len(offsets) segments.

    The video is cut into len(offsets) equal segments (1: the whole video; more: TSN's segments); in
    each, the clip starts at `offset` (in [0, 1)) of the room it has: 0 is the segment's start, 0.5
    its centre. Frames past the end repeat the last frame (a video shorter than a clip).
    """
    span = (clip_len - 1) * interval + 1
    segments = len(offsets)
    indices = []
    for s, offset in enumerate(offsets):
        first = num_frames * s // segments
        room = max(num_frames * (s + 1) // segments - first - span, 0)
        start = first + min(int(offset * (room + 1)), room)
        indices += [min(start + t * interval, max(num_frames - 1, 0)) for t in range(clip_len)]
    return indices


class ArrayFrames:
    """Videos held in memory: a uint8 array [videos, frames, H, W] (grayscale) or [..., H, W, 3]."""

    def __init__(self, array):
        self.array = array

    def read(self, video, choose):
        frames = self.array[video]
        picked = torch.from_numpy(np.ascontiguousarray(frames[choose(len(frames))]))
        if picked.dim() == 3:  # grayscale: the models take RGB
            return picked[:, None].expand(-1, 3, -1, -1).contiguous()
        return picked.permute(0, 3, 1, 2).contiguous()

    def source(self, video):
        return None  # frames in memory: never a file to decode elsewhere


class StoredFrames:
    """Videos stored by `datasets`: a split whose Video column is cast to decode=False, read one row at a time
    ({"bytes", "path"}: the arrow file stays memory-mapped, no video is held in memory), decoded from the bytes
    when stored, else from the file, by `reader` (VIDEO_READERS)."""

    def __init__(self, rows, column, reader=None):
        self.rows, self.column, self.reader = rows, column, reader or read_video_file

    def read(self, video, choose):
        source = self.source(video)
        return self.reader(io.BytesIO(source) if isinstance(source, bytes) else source, choose)

    def source(self, video):
        """The video's bytes when stored, else its file (what a decoder opens, here or in the main process)."""
        value = self.rows[video][self.column]
        return value["bytes"] if value.get("bytes") else value["path"]


class PathFrames:
    """Videos named by path: video files (read by `reader`, VIDEO_READERS) or folders of frame images."""

    def __init__(self, paths, reader=None):
        self.paths, self.reader = paths, reader or read_video_file

    def read(self, video, choose):
        path = self.paths[video]
        return read_frame_folder(path, choose) if os.path.isdir(path) else self.reader(path, choose)

    def source(self, video):
        """A video file's path (--decode_on_device); None for a folder of frames, decoded in the worker."""
        path = self.paths[video]
        return None if os.path.isdir(path) else path


class VideoClips(Dataset):
    """Clips of videos, one item per (video, clip): train, val or multi-view test, by the arguments.

    - train (`seed` given): one clip per video, placed at random in each segment; the position and
      the transform's random draws come from (seed, epoch, video index) alone, so a resumed run, or
      one on other hardware, sees the same clips (set the epoch through EpochSeeded).
    - val (no seed, clips=1): the centre clip of each segment, the transform deterministic.
    - test (clips=N): N clips spread evenly over each video, item i = clip i % N of video i // N; the
      transform returns the clip's crops stacked (views, C, T, H, W), and the item names its video.

    An item is {"pixel_values": (C, T, H, W) uint8, "labels", "valid", "source", "error"} like an image's
    (normalised on the device: utils/data/transforms/batch.py), and "video", the video's index. A video that cannot
    be read becomes zeros with valid=False and its path in `source`.
    """

    def __init__(self, frames, labels, *, clip_len, interval, segments, transform, shape, seed=None, clips=1,
                 names=None, on_device=False, targets=ClassIndex()):
        self.frames, self.labels = frames, list(labels)
        self.targets = targets  # a class index a video, or (lists of classes in a label CSV) a multi-hot row
        self.clip_len, self.interval, self.segments = clip_len, interval, segments
        self.transform, self.shape, self.seed, self.clips = transform, shape, seed, clips
        self.names = names  # what `source` says of a broken video
        # --decode_on_device: a video file's frame indices and draws, for the device to decode (device_decode.py)
        self.deferred = None
        if on_device:
            self.deferred = DeferredVideo(transform, shape[-1])
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # set through EpochSeeded
        self.look = None  # the audit's record of each decoded clip (utils/audit/look.py)

    def evaluated_like(self, val, look=None):
        """These videos as the VideoClips `val` reads its own: its transform, the centre clip of each segment; each
        item with what `look` makes of the clip's decoded frames (the audit's), when given."""
        clips = copy.copy(self)
        clips.transform, clips.seed, clips.clips, clips.deferred = val.transform, None, 1, val.deferred
        clips.look = look
        return clips

    def __len__(self):
        return len(self.labels) * self.clips

    def __getitem__(self, key):
        # A key past the end is another copy of video key % len (repeated augmentation): its own draws.
        index = key % len(self)
        video, clip = divmod(index, self.clips)
        item = {"labels": self.targets.target(self.labels[video]), "valid": True, "source": "", "error": ""}
        if self.clips > 1 or self.seed is None:
            pixels = self._load(video, [(clip + 0.5) / self.clips] * self.segments)
        else:
            with sample_rng(self.seed, int(self.epoch), key):
                pixels = self._load(video, torch.rand(self.segments).tolist())
        if self.look is not None:
            pixels, item["look"] = pixels if not isinstance(pixels, Exception) else (pixels, self.look.empty())
        if isinstance(pixels, Exception):
            item.update(valid=False, source=self.names[video] if self.names else f"video {video}",
                        error=f"{type(pixels).__name__}: {pixels}")
            pixels = torch.zeros(self.shape, dtype=torch.uint8)
        if self.deferred is not None and not isinstance(pixels, dict):  # decoded here after all: its pixels
            pixels = self.deferred.as_pixels(pixels)
        item["pixel_values"] = pixels
        item["video"] = video  # the multi-view test gathers a video's clips by it
        return item

    def _load(self, video, offsets):
        """The transformed clip (or, decoded on the device, what the device needs), or the exception that reading
        it raised; with the audit's `look`, the clip and what it makes of the decoded frames."""
        def choose(count):
            return frame_indices(count, self.clip_len, self.interval, offsets)

        try:
            source = self.frames.source(video) if self.deferred is not None else None
            if source is not None:  # a failure on the device names it as here: the file, or a stored video's place
                return self.deferred(source, choose, str(self.names[video]) if self.names else "")
            frames = self.frames.read(video, choose)
        except Exception as e:  # PyAV, PIL and torchvision raise many kinds; each is this video's fault
            return e
        out = self.transform(tv_tensors.Video(frames))  # (T, C, H, W), or (views, T, C, H, W)
        out = out.transpose(-4, -3).as_subclass(torch.Tensor)  # models take (C, T, H, W)
        return out if self.look is None else (out, self.look(torch.as_tensor(frames)))
