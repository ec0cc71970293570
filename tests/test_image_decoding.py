"""Image files are decoded by torchcodec (torchvision's decoders, deprecated, are no longer called), to the same
uint8 RGB pixels torchvision and PIL gave: every colour mode, progressive and CMYK JPEGs, GIF and WebP; the first
frame of an animated file; 16-bit PNGs scaled to 8 bits; a JPEG's EXIF orientation not applied (as before); PIL
for BMP and TIFF; a broken file raises (the loader marks it invalid)."""

import io

import numpy as np
import pytest
import torch
from PIL import Image

from utils.data.decoding import images
from utils.data.decoding.images import decode_rgb

pytestmark = pytest.mark.skipif(images.decode_image is None, reason="torchcodec is not installed")
RNG = np.random.default_rng(0)
BASE = Image.fromarray(RNG.integers(0, 255, (37, 53, 3), dtype=np.uint8))


def encoded(img, fmt, **save):
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


def as_pil_reads_it(data):
    """What PIL gives: the reference for lossless formats and for libjpeg-turbo's JPEGs alike (PIL decodes JPEG
    with libjpeg-turbo too: the same bytes as torchvision's decoder gave)."""
    with Image.open(io.BytesIO(data)) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


@pytest.fixture
def through_torchcodec(monkeypatch):
    """Count the files torchcodec decodes."""
    calls = []

    def spy(source, **kwargs):
        calls.append(kwargs)
        return decode(source, **kwargs)
    decode = images.decode_image
    monkeypatch.setattr(images, "decode_image", spy)
    return calls


@pytest.mark.parametrize("name, data", [
    ("rgb png", encoded(BASE, "PNG")), ("grey jpeg", encoded(BASE.convert("L"), "JPEG")),
    ("rgba png", encoded(BASE.convert("RGBA"), "PNG")), ("rgb jpeg", encoded(BASE, "JPEG", quality=90)),
    ("palette png", encoded(BASE.convert("P"), "PNG")), ("grey+alpha png", encoded(BASE.convert("LA"), "PNG")),
    ("cmyk jpeg", encoded(BASE.convert("CMYK"), "JPEG")), ("progressive jpeg", encoded(BASE, "JPEG", progressive=True)),
    ("gif", encoded(BASE.convert("P"), "GIF")), ("lossless webp", encoded(BASE, "WEBP", lossless=True)),
])
def test_torchcodec_decodes_each_kind_to_the_pixels_it_had(name, data, through_torchcodec):
    pixels = decode_rgb({"bytes": data, "path": None})
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 37, 53)
    assert torch.equal(pixels, as_pil_reads_it(data)), name
    assert len(through_torchcodec) == 1  # not PIL's fallback


def test_an_animated_image_gives_its_first_frame_and_16_bit_png_scales_to_8_bits(through_torchcodec):
    second = BASE.rotate(90)
    animated = encoded(BASE.convert("P"), "GIF", save_all=True, append_images=[second.convert("P")])
    assert torch.equal(decode_rgb({"bytes": animated, "path": None}),
                       as_pil_reads_it(encoded(BASE.convert("P"), "GIF")))
    deep = (np.arange(20 * 30, dtype=np.uint32).reshape(20, 30) * 109).astype(np.uint16)
    pixels = decode_rgb({"bytes": encoded(Image.fromarray(deep), "PNG"), "path": None})
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 20, 30)
    assert (pixels[0].int() - torch.from_numpy(deep.astype(np.int64) * 255 // 65535).int()).abs().max() <= 1


def test_a_jpegs_exif_orientation_is_not_applied_and_pil_reads_what_torchcodec_does_not(tmp_path, through_torchcodec):
    turned = BASE.copy()
    exif = turned.getexif()
    exif[0x0112] = 6  # "rotate 90 degrees to display": torchcodec would turn it, torchvision never did
    data = encoded(turned, "JPEG", exif=exif)
    pixels = decode_rgb({"bytes": data, "path": None})
    assert pixels.shape == (3, 37, 53) and torch.equal(pixels, as_pil_reads_it(data)) and not through_torchcodec
    plain = encoded(BASE, "JPEG", exif=BASE.getexif())  # EXIF without an orientation: torchcodec's
    assert torch.equal(decode_rgb({"bytes": plain, "path": None}), as_pil_reads_it(plain)) and through_torchcodec
    for fmt in ("BMP", "TIFF"):
        path = tmp_path / f"x.{fmt.lower()}"
        BASE.save(path, fmt)
        assert torch.equal(decode_rgb({"bytes": None, "path": str(path)}), as_pil_reads_it(path.read_bytes()))


@pytest.mark.parametrize("data", [encoded(BASE, "JPEG")[:300], b"not an image at all"])
def test_a_broken_file_raises_for_the_loader_to_mark(data):
    with pytest.raises((OSError, ValueError, RuntimeError, SyntaxError)):
        decode_rgb({"bytes": data, "path": None})
