"""--decode_on_device: the heavy part of loading an image, decoding and resizing it, moved from the DataLoader
workers to the device, with every random draw left where it was.

A worker reads a JPEG's bytes and its size (the header only), and draws the sample's crop and flip from the
per-sample generator exactly as the train preset would (utils/core/seeding.sample_rng: the same calls of
RandomResizedCrop.make_params and the flip's coin, in the same order); it hands over the bytes and those draws.
The main process decodes the batch with torchcodec's `decode_jpeg` on its device (nvJPEG on CUDA, in one call)
and applies the drawn crop, resize and flip there with torchvision's own kernels: on the CPU, the very pixels
the workers made before, so a run and its resume are bitwise those of a run without the flag; on a GPU, the same
crops to the resize kernels' rounding. Validation's resize and centre crop go the same way.

What a worker cannot leave to the device it does itself and hands over as pixels: files that are not JPEG (PNG,
WebP...), JPEGs that EXIF turns (decoded as before, utils/data/decoding/images.decode_rgb), and images that cannot be
read. The random-augmentation policies that need whole pixels in the workers (--auto_augment, --rand_augment) are
refused with the flag (check_options).

Video files go the same way with --video_decoder torchcodec (DeferredVideo): a worker reads the file's index only
(torchcodec's exact scan, no frame decoded) for its frame count and size, chooses the clip's frames and draws the
short-side resize, crop and flip as the preset would; the main process decodes those frames with torchcodec's
VideoDecoder on its device (NVDEC on CUDA) and resizes, crops and flips them there. Folders of frame images are
decoded in the workers and handed over as pixels; the multi-view test set is always decoded in the workers.
"""

import io

import torch
from torchvision.transforms import v2

from utils.data.decoding.images import decode_rgb, read_bytes, turned_by_exif
from utils.data.decoding.video import video_index


JPEG, PIXELS, VIDEO = 0, 1, 2  # what a sample's `encoded` holds: a JPEG's bytes, its finished uint8 pixels, or a

# video file (its path, or its bytes when a dataset stores them)
TRAIN, EVAL = 0, 1

# One row of int64 per sample: [what, preset, a, b, c, d, flip, side]: TRAIN a-d = top, left, height, width of the
# crop; EVAL a = the resize of the shorter side, b = the centre crop. A video's row: [what, preset, resize, top,
# left, flip, side, interpolation], its frames' indices beside it (`frames`): TRAIN resize = the shorter side's
# random size, then the crop at (top, left); EVAL the shorter side's size, then the centre crop.
INTERPOLATIONS = list(v2.InterpolationMode)


class Deferred:
    """A preset (utils/data/transforms/images.py: RandomResizedCrop with or without a flip, or Resize then CenterCrop)
    applied to a file's bytes in a worker: its draws now, its pixels on the device (decode_batch). Call it under the
    sample's generator, as the preset itself is called."""

    def __init__(self, transform, size):
        self.transform, self.size = transform, size
        steps = list(transform.transforms)
        kinds = [type(step) for step in steps]
        if kinds[:1] == [v2.RandomResizedCrop] and kinds[1:] in ([], [v2.RandomHorizontalFlip]):
            self.crop, self.flip = steps[0], steps[1] if len(steps) > 1 else None
            self.preset = TRAIN
        elif kinds == [v2.Resize, v2.CenterCrop]:
            self.preset = EVAL
            self.resize, self.center = steps[0].size[0], steps[1].size[0]
        else:
            raise ValueError(f"decode_on_device: the preset {[k.__name__ for k in kinds]} needs pixels in the workers")

    def __call__(self, image):
        """`image`: an undecoded `datasets.Image` value ({"bytes", "path"})."""
        data = read_bytes(image)
        if data[:2] == b"\xff\xd8" and not turned_by_exif(data):
            from PIL import Image

            with Image.open(io.BytesIO(data)) as img:  # the header: its size, nothing decoded
                width, height = img.size
            return {"encoded": data, "params": self._draws(height, width), "path": image["path"] or ""}
        pixels = self.transform(decode_rgb({"bytes": data, "path": None}))
        return as_pixels(pixels, self.size, self.preset)

    def _draws(self, height, width):
        if self.preset == EVAL:
            return torch.tensor([JPEG, EVAL, self.resize, self.center, 0, 0, 0, self.size])
        # An image of that size, nothing allocated: make_params asks for its size only.
        box = self.crop.make_params([torch.empty((1, 1, 1), dtype=torch.uint8).expand(3, height, width)])
        flip = self.flip is not None and bool(torch.rand(1) < self.flip.p)  # as RandomHorizontalFlip draws it
        return torch.tensor([JPEG, TRAIN, box["top"], box["left"], box["height"], box["width"], flip, self.size])


def as_pixels(pixels, size, preset=TRAIN):
    """A sample handed over as its finished (3, size, size) uint8 pixels."""
    return {"encoded": pixels.contiguous().numpy().tobytes(), "params": torch.tensor([PIXELS, preset, 0, 0, 0, 0, 0,
                                                                                       size]), "path": ""}


def blank(size):
    """A sample that could not be read: zeros, as utils/data/datasets/images.load_item makes them."""
    return as_pixels(torch.zeros(3, size, size, dtype=torch.uint8), size)


class DeferredVideo:
    """A video preset (utils/data/transforms/video.py: RandomResize, RandomCrop and maybe a flip; or Resize then
    CenterCrop) applied to a video file in a worker: which frames and the draws now, decoding and pixels on the device.
    Call it under the clip's generator, after the clip's offsets are drawn, as the preset itself is called."""

    def __init__(self, transform, size):
        steps = list(transform.transforms)
        kinds = [type(step) for step in steps]
        self.size, self.steps = size, steps
        # What _clip does: an antialiased short-side resize, then a crop of `size` (no padding, no max_size)
        plain = steps and getattr(steps[0], "antialias", None) is True and (
            kinds[0] is not v2.Resize or steps[0].max_size is None)  # RandomResize's max_size is its size's bound
        if plain and kinds[:2] == [v2.RandomResize, v2.RandomCrop] and kinds[2:] in ([], [v2.RandomHorizontalFlip]) \
                and steps[1].padding is None and not steps[1].pad_if_needed:
            self.preset = TRAIN
        elif plain and kinds == [v2.Resize, v2.CenterCrop] and list(steps[1].size) == [size, size]:
            self.preset = EVAL
        else:
            raise ValueError(f"decode_on_device: the video preset {[k.__name__ for k in kinds]} needs pixels in the "
                             f"workers")
        self.interpolation = INTERPOLATIONS.index(v2.InterpolationMode(steps[0].interpolation))

    def __call__(self, source, choose, name):
        """`source`: a video file's path or bytes; `choose(frame count)`: the clip's frame indices; `name`: what a
        failure to decode it names."""
        indices, height, width = video_index(source, choose)
        if self.preset == EVAL:
            resize = self.steps[0].size[0]
            top = left = flip = 0
        else:
            from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

            # RandomResize's draw, then RandomCrop's on the size the resize gives (torchvision's own rule, private:
            # the public resize would compute the pixels), then the flip's coin: the preset's calls, in its order.
            resize = self.steps[0].make_params([])["size"][0]
            resized = _compute_resized_output_size((height, width), [resize])
            box = self.steps[1].make_params([torch.empty((1, 1, 1), dtype=torch.uint8).expand(3, *resized)])
            top, left = box["top"], box["left"]
            flip = len(self.steps) > 2 and bool(torch.rand(1) < self.steps[2].p)
        return {"encoded": source, "params": torch.tensor([VIDEO, self.preset, resize, top, left, flip, self.size,
                                                           self.interpolation]),
                "frames": torch.tensor(indices), "path": name}

    def as_pixels(self, clip):
        """A clip handed over as its finished (3, T, S, S) uint8 pixels (a folder of frames, or zeros)."""
        return {"encoded": clip.contiguous().numpy().tobytes(),
                "params": torch.tensor([PIXELS, self.preset, 0, 0, 0, 0, self.size, self.interpolation]),
                "frames": torch.zeros(clip.shape[1], dtype=torch.int64), "path": ""}


class DeviceDecoder:
    """Turns a batch whose `pixel_values` are workers' Deferred (or DeferredVideo) output into uint8 pixels on
    `device`; a batch of pixels passes unchanged. A JPEG or video the decoder cannot read becomes a blank marked
    invalid, with its error, as a worker marks one (the loop then stops or skips it: --skip_bad_images)."""

    def __init__(self, interpolation, device):
        self.interpolation, self.device = v2.InterpolationMode(interpolation), device

    def __call__(self, batch):
        payload = batch["pixel_values"]
        if not isinstance(payload, dict):
            return batch
        if "frames" in payload:
            return self._videos(batch, payload)
        params = payload["params"].tolist()
        side = params[0][7]
        out = torch.empty(len(params), 3, side, side, dtype=torch.uint8, device=self.device)
        jpegs = [i for i, row in enumerate(params) if row[0] == JPEG]
        for i, decoded in zip(jpegs, self._decode([payload["encoded"][i] for i in jpegs])):
            if isinstance(decoded, Exception):
                out[i] = 0
                batch["valid"][i] = False
                batch["source"][i] = payload["path"][i] or "<embedded image bytes>"
                batch["error"][i] = f"{type(decoded).__name__}: {decoded}"
            else:
                out[i] = self._finish(decoded, params[i])
        for i, row in enumerate(params):
            if row[0] == PIXELS:
                pixels = torch.frombuffer(bytearray(payload["encoded"][i]), dtype=torch.uint8).view(3, side, side)
                out[i] = pixels.to(self.device, non_blocking=True)
        batch["pixel_values"] = out
        return batch

    def _videos(self, batch, payload):
        """Each clip's frames decoded on the device by torchcodec (NVDEC on CUDA), the preset's geometry applied
        there: (B, 3, T, S, S) uint8."""
        params, frames = payload["params"].tolist(), payload["frames"].tolist()  # once: no sync a clip on a GPU
        side, length = params[0][6], len(frames[0])
        out = torch.empty(len(params), 3, length, side, side, dtype=torch.uint8, device=self.device)
        for i, row in enumerate(params):
            if row[0] == PIXELS:
                pixels = torch.frombuffer(bytearray(payload["encoded"][i]), dtype=torch.uint8)
                out[i] = pixels.view(3, length, side, side).to(self.device, non_blocking=True)
                continue
            try:
                out[i] = self._clip(payload["encoded"][i], frames[i], row)
            except torch.OutOfMemoryError:  # the device's fault, not the video's
                raise
            except Exception as e:  # noqa: BLE001 - FFmpeg raises many kinds; each is this video's fault
                out[i] = 0
                batch["valid"][i] = False
                batch["source"][i] = payload["path"][i] or "<embedded video bytes>"
                batch["error"][i] = f"{type(e).__name__}: {e}"
        batch["pixel_values"] = out
        return batch

    def _clip(self, source, indices, row):
        """(3, T, S, S): the frames at `indices`, resized, cropped and flipped as the row says."""
        from torchcodec.decoders import VideoDecoder

        _, preset, resize, top, left, flip, side, interpolation = row
        decoder = VideoDecoder(source, seek_mode="exact", num_ffmpeg_threads=1, dimension_order="NCHW",
                               device=self.device)
        clip = decoder.get_frames_at(indices).data  # (T, 3, H, W)
        mode = INTERPOLATIONS[interpolation]
        clip = v2.functional.resize(clip, [resize], interpolation=mode, antialias=True)
        if preset == EVAL:
            clip = v2.functional.center_crop(clip, [side, side])
        else:
            clip = v2.functional.crop(clip, top, left, side, side)
            clip = v2.functional.horizontal_flip(clip) if flip else clip
        return clip.transpose(0, 1)

    def _decode(self, files):
        """The decoded (3, H, W) images, in one call; when it fails, one by one, so that the failing file is
        named (its exception in its place)."""
        from torchcodec.decoders import decode_jpeg

        if not files:
            return []
        try:
            return decode_jpeg(files, mode="RGB", device=self.device)
        except (RuntimeError, ValueError):
            decoded = []
            for data in files:
                try:
                    decoded.append(decode_jpeg(data, mode="RGB", device=self.device))
                except (RuntimeError, ValueError) as e:
                    decoded.append(e)
            return decoded

    def _finish(self, image, row):
        """The preset's geometry on the decoded image, with the kernels its transforms call."""
        _, preset, a, b, c, d, flip, side = row
        if preset == EVAL:
            image = v2.functional.resize(image, [a], interpolation=self.interpolation, antialias=True)
            return v2.functional.center_crop(image, [b, b])
        image = v2.functional.resized_crop(image, a, b, c, d, size=[side, side], interpolation=self.interpolation,
                                           antialias=True)
        return v2.functional.horizontal_flip(image) if flip else image


def check_options(asked, need):
    """What --decode_on_device can take of the input InputOptions `asked` describe: presets without whole-pixel
    policies. (Data without files refuses it: its source's `unused`; video files need torchcodec: video_files.py's.)"""
    if not asked.decode_on_device:
        return
    need(not asked.auto_augment and asked.rand_augment is None, "decode_on_device", "with --auto_augment or "
         "--rand_augment: their policies need whole pixels in the workers; drop one of them")
