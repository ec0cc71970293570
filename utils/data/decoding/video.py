"""Video frames decoded: a file (PyAV, whose wheels bundle FFmpeg; or torchcodec's VideoDecoder), or a folder of
frame images (mmaction2's rawframes, GluonCV's frame lists). `choose(frame count)` says which frames: only those
are decoded. A file is opened inside the worker that loads the item, one container per item (decoders must not be
shared across forked workers), and seeked to the clip: only the frames from the keyframe before the clip to its
last frame are decoded."""

import os

import numpy as np
import torch

from utils.data.decoding.images import decode_rgb


VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".webm", ".mov"}

FRAME_SUFFIXES = {".jpg", ".jpeg", ".png"}


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
        # The same for the conversion to RGB (to_ndarray's threads=1, the same bits): PyAV keeps one swscale
        # context per Python thread, and by default its slice threads would not survive a fork. A process forked
        # after decoding (a DataLoader worker, the report's drawing child, any library's multiprocessing child)
        # then hangs for ever, converting its first frame or freeing another thread's context.
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
                decoded[i] = frame.to_ndarray(format="rgb24", threads=1)
            if i >= last:
                break
        if i is not None and i < last and i not in decoded:  # the stream ended early: its last frame stands in
            decoded[i] = frame.to_ndarray(format="rgb24", threads=1)
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


# --video_decoder: who decodes a video file (a folder of frames is read by utils/data/decoding/images.decode_rgb)
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
