"""What the audit keeps of each decoded sample, computed in the DataLoader's workers from the pixels the file holds
(before any resize or crop): a digest of them (exact copies), a perceptual hash and a small grey thumbnail (near
copies), and their brightness and contrast (unusable images).

Every value is on the 0..1 scale of the file's own range: 8-bit pixels over 255, a run of --bands over its --pixel_max
(16-bit files are judged on their 16 bits, not as if 8). A video is judged by the clip validation reads (the centre
clip): the digest covers its frames, the hash and thumbnail are of its first, middle and last frames side by side,
the statistics its frames'.
"""

import hashlib

import numpy as np
import torch

THUMB = 32  # the side of the grey thumbnail a near copy is verified on (utils/audit/copies.py)
DIGEST_BYTES = 16


class Look:
    """`look(decoded)`: the record of one decoded sample (a PIL image, a (C, H, W) tensor of uint8 pixels or of raw
    band values, or a clip's (T, C, H, W) frames), as tensors a DataLoader batches. `pixel_max`: the files' range
    (None: 8-bit). A class, not a closure: workers started by spawn receive it pickled."""

    def __init__(self, pixel_max=None):
        self.pixel_max = pixel_max

    def __call__(self, decoded):
        if not isinstance(decoded, torch.Tensor):  # a PIL image (the embedded digits are decoded PIL images)
            decoded = torch.from_numpy(np.array(decoded.convert("RGB"))).permute(2, 0, 1)
        raw = decoded.contiguous().numpy()
        digest = hashlib.blake2b(repr((raw.shape, raw.dtype.str)).encode() + raw.tobytes(), digest_size=DIGEST_BYTES)
        scaled = raw.astype(np.float32) / (self.pixel_max or 255.0)
        grey = np.clip(scaled.mean(axis=-3), 0, 1)  # (H, W), or a clip's (T, H, W)
        if grey.ndim == 3:  # a clip: its first, middle and last frames side by side (a copy played backwards is not)
            grey = np.concatenate([grey[0], grey[len(grey) // 2], grey[-1]], axis=1)
        return {"digest": torch.frombuffer(bytearray(digest.digest()), dtype=torch.uint8),
                "phash": torch.tensor(perceptual_hash(grey), dtype=torch.int64),
                "thumb": torch.from_numpy(thumbnail(grey)),
                "stats": torch.tensor([scaled.mean(), scaled.std()], dtype=torch.float32)}

    @staticmethod
    def empty():
        """What an undecodable sample's record holds: zeros (its `valid` says it was not read)."""
        return {"digest": torch.zeros(DIGEST_BYTES, dtype=torch.uint8), "phash": torch.zeros((), dtype=torch.int64),
                "thumb": torch.zeros(THUMB, THUMB, dtype=torch.uint8), "stats": torch.zeros(2)}


def grey_image(grey):
    from PIL import Image

    return Image.fromarray(np.round(grey * 255).astype(np.uint8), "L")


def perceptual_hash(grey):
    """imagehash's pHash (64 bits) of a (H, W) grey image on 0..1, as a signed int64."""
    import imagehash

    bits = imagehash.phash(grey_image(grey)).hash.flatten()
    value = int("".join("1" if b else "0" for b in bits), 2)
    return value - (1 << 64) if value >= 1 << 63 else value


def thumbnail(grey):
    """The (THUMB, THUMB) uint8 grey thumbnail of a (H, W) grey image on 0..1 (its aspect not kept: a near copy keeps
    its original's, near enough)."""
    from PIL import Image

    return np.asarray(grey_image(grey).resize((THUMB, THUMB), Image.BILINEAR), dtype=np.uint8).copy()
