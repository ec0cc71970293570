"""Images: decoded from the bytes `datasets` stores, then transformed with the randomness of one sample."""

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import torch

from utils.core.seeding import sample_rng

# torchvision 0.29 marks its decoders deprecated in favour of torchcodec; they are still the fastest
# decoder we can count on here (libjpeg-turbo, no PIL round trip). PIL takes over if they go away.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision")
try:
    from torchvision.io import ImageReadMode, decode_image
except ImportError:  # pragma: no cover - a future torchvision without decoders
    decode_image = None


def decode_rgb(image):
    """A (3, H, W) uint8 tensor from an undecoded `datasets.Image` value ({"bytes", "path"})."""
    data = image["bytes"] if image["bytes"] is not None else Path(image["path"]).read_bytes()
    if decode_image is not None:
        try:
            return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
        except RuntimeError:
            pass  # a format torchvision does not read (BMP, TIFF...), or a broken file: PIL decides
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1).contiguous()


def load_item(image, label, key, epoch, transform, size, seed, decode, classes=None):
    """One training or validation item: the image decoded and transformed with the randomness of
    (seed, epoch, key) when seeded; one that fails (or a label outside [0, classes)) becomes a zero
    image with valid=False and its path in `source`."""
    try:
        if classes is not None and not 0 <= label < classes:
            raise ValueError(f"label {label} is not one of the {classes} classes (0..{classes - 1})")
        rng = sample_rng(seed, epoch, key) if seed is not None else contextlib.nullcontext()
        with rng:
            pixels = transform(decode(image))
        source, error = "", ""
    # PIL raises all of the first four; TypeError/KeyError: a row without an image or label (None)
    except (OSError, ValueError, RuntimeError, SyntaxError, TypeError, KeyError) as e:
        pixels, label = torch.zeros(3, size, size, dtype=torch.uint8), 0
        path = image.get("path") if isinstance(image, dict) else None
        source, error = path or "<embedded image bytes>", f"{type(e).__name__}: {e}"
    return {"pixel_values": pixels, "labels": label, "valid": not source, "source": source, "error": error}
