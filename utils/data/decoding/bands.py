"""Images of any channel count and bit depth (multispectral TIFFs, 16-bit PNGs, grayscale scans, .npy arrays) read as
they are: never turned into 8-bit RGB. What a file holds is read from its header (`probe`); `BandDecoder` reads a
file to a float32 (C, H, W) tensor of its raw values, checks it against what the run's first training file held,
and keeps the channels `--bands` picks. Scaling by --pixel_max and the normalisation come later, on whole batches
(utils/data/transforms/batch.py), with one arithmetic for training, predict.py and the ONNX graph.

Readers: tifffile for TIFF (any band count, planar or interleaved; no GDAL), torchvision's PNG decoder (it keeps
16 bits; torchcodec's gives 8, PIL turns a 16-bit RGB PNG into 8 bits), numpy for .npy, PIL for the rest (8-bit
formats: a gray JPEG keeps its one channel here)."""

import io
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from utils.data.decoding.images import read_bytes

TIFF_SUFFIXES = (".tif", ".tiff")
ARRAY_SUFFIXES = {".npy"}
PNG_MAGIC, TIFF_MAGICS, NPY_MAGIC = b"\x89PNG\r\n\x1a\n", (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"), b"\x93NUMPY"
PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}  # by the IHDR colour type: grey, RGB, palette, grey+alpha, RGBA
logging.getLogger("tifffile").setLevel(logging.CRITICAL)  # its own lines on a broken file: our one error says it
DTYPE_MAX = {"uint8": 255.0, "uint16": 65535.0, "int16": 32767.0, "uint32": 4294967295.0, "int32": 2147483647.0}


@dataclass(frozen=True)
class PixelFormat:
    """What one file holds: its channel count and its pixels' type (a numpy dtype name)."""

    channels: int
    dtype: str
    array: bool = False  # a .npy array, which only BandDecoder reads

    @property
    def rgb(self):
        """An 8-bit image file of up to four channels (gray, RGB, a palette, with alpha): read as RGB, as every image
        was before (utils/data/decoding/images.decode_rgb), so that a folder of RGB files with gray ones among them
        (ImageNet's) reads as it always did, whichever comes first; --bands 0 keeps 8-bit gray files one channel."""
        return self.dtype == "uint8" and self.channels <= 4 and not self.array

    @property
    def type_max(self):
        """The largest value of its type, what integer pixels are divided by (float data: 1, taken as it is)."""
        return DTYPE_MAX.get(self.dtype, 1.0)

    def __str__(self):
        return f"{self.channels} channel{'s' * (self.channels != 1)} of {self.dtype}"


def _as_hwc(array, name):
    """(H, W, C) from a (H, W) or (H, W, C) array, or a (C, H, W) one whose first axis is clearly the bands."""
    if array.ndim == 2:
        return array[..., None]
    if array.ndim == 3:
        return array
    raise ValueError(f"{name}: an array of shape {array.shape}; give (H, W) or (H, W, C) pixels")


def _tiff_series(data, read):
    """(the first series' pixels when `read`, else None; its shape, axes and dtype); a TIFF that tifffile cannot read
    (it raises several kinds of errors, IndexError for a file without pages) is a ValueError."""
    import tifffile

    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tif:
            series = tif.series[0]
            return series.asarray() if read else None, series.shape, series.axes, series.dtype
    except Exception as e:  # noqa: BLE001 - one kind of error for the caller: an unreadable file
        raise ValueError(f"not a TIFF tifffile can read ({type(e).__name__}: {e})") from None


def _tiff(data, name):
    array, _, axes, _ = _tiff_series(data, read=True)
    if array.ndim == 3 and axes.index("Y") == 1:  # bands first (SYX, CYX, QYX...): planar layout
        array = np.moveaxis(array, 0, -1)
    return _as_hwc(array, name)


def read_array(data, name=""):
    """A file's pixels as an (H, W, C) numpy array of its own type: TIFF, PNG (8 or 16 bits), .npy, what PIL reads."""
    if data[:4] in TIFF_MAGICS:
        return _tiff(data, name)
    if data[:6] == NPY_MAGIC:
        return _as_hwc(np.load(io.BytesIO(data), allow_pickle=False), name)
    if data[:8] == PNG_MAGIC:
        # torchvision's PNG decoder keeps 16 bits; torchcodec's (which 0.29 deprecates it for) and PIL's RGB do not.
        from torchvision.io import ImageReadMode, decode_png

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pixels = decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.UNCHANGED)
        wide = pixels.dtype == torch.uint16  # torch's uint16 has few operations: numpy's has them all
        array = pixels.view(torch.int16).numpy().view(np.uint16) if wide else pixels.numpy()
        return array.transpose(1, 2, 0)
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return _as_hwc(np.asarray(img), name)


def probe(data, name=""):
    """The PixelFormat of a file's bytes, from its header where it says (PNG, TIFF, .npy), else decoded."""
    if data[:8] == PNG_MAGIC and len(data) > 25:
        depth, colour = data[24], data[25]
        return PixelFormat(PNG_CHANNELS.get(colour, 3), "uint16" if depth == 16 else "uint8")
    if data[:4] in TIFF_MAGICS:
        _, shape, axes, dtype = _tiff_series(data, read=False)
        if len(shape) not in (2, 3):
            raise ValueError(f"{name}: a TIFF of shape {shape} ({axes}); give one image of (H, W) or (H, W, C)")
        return PixelFormat(1 if len(shape) == 2 else shape[0] if axes.index("Y") == 1 else shape[2], dtype.name)
    if data[:6] == NPY_MAGIC:
        array = read_array(data, name)
        return PixelFormat(array.shape[2], array.dtype.name, array=True)
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        if img.mode in ("L", "1"):
            return PixelFormat(1, "uint8")
        if img.mode.startswith("I;16"):
            return PixelFormat(1, "uint16")
        if img.mode in ("I", "F"):
            return PixelFormat(1, "int32" if img.mode == "I" else "float32")
    return PixelFormat(3, "uint8")  # RGB, palette, CMYK, YCbCr...: read as RGB


def array_format(feature):
    """The PixelFormat of a `datasets` Array2D/Array3D column of (H, W[, C]) pixels; None for another feature."""
    import datasets

    if not isinstance(feature, (datasets.Array2D, datasets.Array3D)):
        return None
    return PixelFormat(feature.shape[2] if len(feature.shape) == 3 else 1, feature.dtype, array=True)


class BandDecoder:
    """A `datasets.Image` value ({"bytes", "path"}), or an array column's row -> float32 (C, H, W) of its raw values,
    the channels `bands` picks (all when None), after checking that it holds what the run's first training file held
    (`expected`): a file of other bands or another type raises ValueError naming both (the run's bad-file handling
    names the file in one line). A class, not a closure: DataLoader workers started by spawn receive it pickled."""

    def __init__(self, expected, bands=None):
        self.expected, self.bands = expected, bands

    def __call__(self, image):
        if isinstance(image, np.ndarray):  # a row of an Array2D/Array3D column
            array = _as_hwc(image, "<array>")
        else:
            array = read_array(read_bytes(image), image.get("path") or "<image bytes>")
        found = PixelFormat(array.shape[2], array.dtype.name)
        if (found.channels, found.dtype) != (self.expected.channels, self.expected.dtype):
            raise ValueError(f"{found}, the training data's first file {self.expected}: give files of one kind")
        if self.bands is not None:
            array = array[..., list(self.bands)]
        return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1), dtype=np.float32))

    def blank(self, size):
        """What a file that cannot be read stands as: zeros of the run's channels (utils/data/datasets/images.py)."""
        return torch.zeros(len(self.bands) if self.bands is not None else self.expected.channels, size, size)


def file_decoder(inp):
    """The decoder of a run's image files, by its Input: a BandDecoder where they keep their channels and bits (its
    pixel_max set), None for 8-bit RGB (utils/data/decoding/images.decode_rgb)."""
    if inp.pixel_max is None:
        return None
    return BandDecoder(PixelFormat(*inp.file_format), inp.bands)
