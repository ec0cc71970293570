"""Images decoded from their bytes (what `datasets` stores, or a file) to (3, H, W) uint8 tensors: torchcodec's
decoders, PIL for what they cannot read."""

import io
from pathlib import Path

import numpy as np
import torch

# torchcodec's image decoders (libjpeg-turbo, libpng, libwebp: no FFmpeg needed for images) replace torchvision's,
# which 0.29 deprecated in their favour. PIL takes what they cannot read (BMP, TIFF...), and what they would read
# otherwise than before (below). Without torchcodec, PIL reads everything.
try:
    from torchcodec.decoders import decode_image
except (ImportError, OSError, RuntimeError):  # pragma: no cover - not installed, or its libraries fail to load
    decode_image = None

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".npy"}  # .npy: (H, W, C) arrays


def decode_rgb(image):
    """A (3, H, W) uint8 tensor from an undecoded `datasets.Image` value ({"bytes", "path"}): the first frame of an
    animated image; 16-bit PNGs scaled to 8 bits; no EXIF orientation applied, as torchvision's decoders and PIL
    decode them (torchcodec turns a JPEG upright by its EXIF tag: such files go to PIL, which gives the bytes
    torchvision gave)."""
    data = image["bytes"] if image["bytes"] is not None else Path(image["path"]).read_bytes()
    if decode_image is not None and not turned_by_exif(data):
        try:
            pixels = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode="RGB")
            return pixels[0] if pixels.dim() == 4 else pixels
        except (RuntimeError, ValueError):
            pass  # a format torchcodec does not read (BMP, TIFF...), or a broken file: PIL decides
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1).contiguous()


def turned_by_exif(data):
    """Whether `data` is a JPEG whose EXIF orientation tag asks for a turn or a flip. The segments before the
    image are walked (a few, each a marker and a length) and PIL reads the tag only when EXIF is there."""
    if data[:2] != b"\xff\xd8":
        return False
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF and 0xE0 <= data[at + 1] <= 0xEF:  # APP0..APP15
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if data[at + 1] == 0xE1 and data[at + 4:at + 10] == b"Exif\x00\x00":
            from PIL import Image

            with Image.open(io.BytesIO(data)) as img:
                return img.getexif().get(0x0112, 1) not in (0, 1)
        at += 2 + length
    return False


def read_bytes(image):
    """The undecoded file of a `datasets.Image` value ({"bytes", "path"})."""
    return image["bytes"] if image["bytes"] is not None else open(image["path"], "rb").read()
