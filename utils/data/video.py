"""Video clips: which frames make a clip, reading just those frames, and the dataset that serves them.

Three kinds of video: a file (decoded with PyAV, whose wheels bundle FFmpeg), a folder of frame
images (mmaction2's rawframes, GluonCV's frame lists), and frames already in memory (moving digits).
A file is opened inside the worker that loads the item, one container per item (decoders must not be
shared across forked workers), and seeked to the clip: only the frames from the keyframe before the
clip to its last frame are decoded.
"""

import os

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors

from utils.core.seeding import sample_rng
from utils.data.images import decode_rgb

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".webm", ".mov"}
FRAME_SUFFIXES = {".jpg", ".jpeg", ".png"}


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
        import io

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


def read_frame_folder(folder, choose):
    """(T, 3, H, W) uint8 frames of a folder of images (sorted names: img_00001.jpg, ...)."""
    names = sorted(n for n in os.listdir(folder)
                   if not n.startswith(".") and os.path.splitext(n)[1].lower() in FRAME_SUFFIXES)
    if not names:
        raise ValueError(f"no frame images ({', '.join(sorted(FRAME_SUFFIXES))}) in the folder")
    indices = choose(len(names))
    read = {i: decode_rgb({"bytes": None, "path": os.path.join(folder, names[i])}) for i in set(indices)}
    return torch.stack([read[i] for i in indices])


def _frame_count(container, stream, rate):
    """Frames in the stream: the container's count when it has one (MP4, AVI), else duration x rate."""
    if stream.frames:
        return stream.frames
    if stream.duration is not None:
        return max(int(round(float(stream.duration * stream.time_base * rate))), 1)
    if container.duration is not None:  # microseconds (WebM/MKV often have only this)
        return max(int(round(container.duration / 1e6 * float(rate))), 1)
    raise ValueError("the container gives neither a frame count nor a duration")


def read_video_file(path, choose, seek=True):
    """(T, 3, H, W) uint8 frames of a video file: `choose(frame count)` says which.

    Seeks to the keyframe before the first chosen frame and decodes up to the last one. A frame
    the stream does not deliver (a count or duration that overstates the video) is replaced by the
    nearest one decoded before it. `seek=False` decodes from the start (the naive way; benchmarks).
    """
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        # One decoding thread: the DataLoader's workers are the parallelism. FFmpeg's default (as many
        # threads as cores, for every file opened) oversubscribes the cores once there are several workers.
        stream.thread_count = 1
        rate = stream.average_rate or stream.guessed_rate
        if not rate:
            raise ValueError("the video stream has no frame rate")
        indices = choose(_frame_count(container, stream, rate))
        wanted, last = set(indices), max(indices)
        start = stream.start_time or 0
        # Frame i sits at pts = start + i / rate, in units of the stream's time base.
        if seek and min(indices) > 0:
            container.seek(start + int(min(indices) / rate / stream.time_base), stream=stream, backward=True)
        decoded, i, frame = {}, None, None
        for frame in container.decode(stream):
            i = round(float((frame.pts - start) * stream.time_base * rate)) if frame.pts is not None else None
            if i is None:
                raise ValueError("frames without timestamps")
            if i in wanted:
                decoded[i] = frame.to_ndarray(format="rgb24")
            if i >= last:
                break
        if i is not None and i < last and i not in decoded:  # the stream ended early: its last frame stands in
            decoded[i] = frame.to_ndarray(format="rgb24")
    if not decoded:
        raise ValueError("no frame could be decoded")
    known = sorted(decoded)
    frames = [decoded[known[max(np.searchsorted(known, i, side="right") - 1, 0)]] for i in indices]
    return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).contiguous()


def read_video_torchcodec(source, choose):
    """read_video_file's frames through torchcodec's VideoDecoder (FFmpeg's shared libraries; one thread, as PyAV's):
    the same frame count (the header's, else duration x rate), the same frames, a frame past the stream's end
    replaced by its last."""
    decoder, indices = _torchcodec_clip(source, choose)
    return decoder.get_frames_at(indices).data.contiguous()


def _torchcodec_clip(source, choose):
    """(torchcodec's VideoDecoder on the CPU, the clip's frame indices): the file's index is read (an exact scan:
    no frame decoded yet)."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(source, seek_mode="exact", num_ffmpeg_threads=1, dimension_order="NCHW", device="cpu")
    meta = decoder.metadata
    count = meta.num_frames_from_header or (
        max(int(round(meta.duration_seconds_from_header * meta.average_fps_from_header)), 1)
        if meta.duration_seconds_from_header and meta.average_fps_from_header else len(decoder))
    indices = choose(count)
    if not len(decoder):
        raise ValueError("no frame could be decoded")
    return decoder, [min(i, len(decoder) - 1) for i in indices]


def video_index(source, choose):
    """(frame indices of the clip, height, width) of a video file, read_video_torchcodec's frames without decoding
    any (--decode_on_device: the main process decodes them)."""
    decoder, indices = _torchcodec_clip(source, choose)
    return indices, decoder.metadata.height, decoder.metadata.width


# --video_decoder: who decodes a video file (a folder of frames is read by utils/data/images.decode_rgb)
VIDEO_READERS = {"pyav": read_video_file, "torchcodec": read_video_torchcodec}


def torchcodec_video_problem():
    """None when torchcodec's video decoder loads here, else what is missing, in one line."""
    try:
        from torchcodec.decoders import VideoDecoder
    except (ImportError, OSError, RuntimeError) as e:
        return f"torchcodec is not installed ({type(e).__name__}): pip install torchcodec"
    try:
        VideoDecoder(b"")  # loads the libraries first, then finds nothing to decode
    except RuntimeError as e:
        if "Could not load libtorchcodec" in str(e):
            return ("torchcodec's video decoder needs FFmpeg's shared libraries (versions 4 to 9), which this machine "
                    "lacks: install FFmpeg (e.g. apt install ffmpeg), or keep --video_decoder pyav")
    except Exception:  # noqa: BLE001 - an empty video is refused one way or another: the libraries loaded
        pass
    return None


class VideoClips(Dataset):
    """Clips of videos, one item per (video, clip): train, val or multi-view test, by the arguments.

    - train (`seed` given): one clip per video, placed at random in each segment; the position and
      the transform's random draws come from (seed, epoch, video index) alone, so a resumed run, or
      one on other hardware, sees the same clips (set the epoch through EpochSeeded).
    - val (no seed, clips=1): the centre clip of each segment, the transform deterministic.
    - test (clips=N): N clips spread evenly over each video, item i = clip i % N of video i // N; the
      transform returns the clip's crops stacked (views, C, T, H, W), and the item names its video.

    An item is {"pixel_values": (C, T, H, W) uint8, "labels", "valid", "source", "error"} like an image's
    (normalised on the device: utils/data/on_device.py), and "video", the video's index. A video that cannot
    be read becomes zeros with valid=False and its path in `source`.
    """

    def __init__(self, frames, labels, *, clip_len, interval, segments, transform, shape, seed=None, clips=1,
                 names=None, on_device=False):
        self.frames, self.labels = frames, list(labels)
        self.clip_len, self.interval, self.segments = clip_len, interval, segments
        self.transform, self.shape, self.seed, self.clips = transform, shape, seed, clips
        self.names = names  # what `source` says of a broken video
        # --decode_on_device: a video file's frame indices and draws, for the device to decode (device_decode.py)
        self.deferred = None
        if on_device:
            from utils.data.device_decode import DeferredVideo

            self.deferred = DeferredVideo(transform, shape[-1])
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # set through EpochSeeded

    def __len__(self):
        return len(self.labels) * self.clips

    def __getitem__(self, key):
        # A key past the end is another copy of video key % len (repeated augmentation): its own draws.
        index = key % len(self)
        video, clip = divmod(index, self.clips)
        item = {"labels": self.labels[video], "valid": True, "source": "", "error": ""}
        if self.clips > 1 or self.seed is None:
            pixels = self._load(video, [(clip + 0.5) / self.clips] * self.segments)
        else:
            with sample_rng(self.seed, int(self.epoch), key):
                pixels = self._load(video, torch.rand(self.segments).tolist())
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
        it raised."""
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
        return out.transpose(-4, -3).as_subclass(torch.Tensor)  # models take (C, T, H, W)


def write_video(path, frames, fps=25, codec="libx264", options=None):
    """Write uint8 frames (T, H, W, 3) to a video file with PyAV (tests and benchmarks make their own
    videos; no system FFmpeg needed). H.264 wants even sides."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.options = options or {}
        for image in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")))
        container.mux(stream.encode())
