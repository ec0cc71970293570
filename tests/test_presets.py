"""Transforms: output sizes, RGB from any mode, augmentation options, eval resize-then-crop."""

import pytest
import torch

from utils.config import parse_args
from utils.data import decode_rgb
from utils.presets import eval_preset, train_preset


@pytest.mark.parametrize("extra", [[], ["--no_hflip"], ["--auto_augment", "imagenet"], ["--rand_augment", "9"]])
def test_train_preset_gives_normalised_square_crops(extra):
    args = parse_args(["--train_dir", "x", "--image_size", "48", *extra])
    image = torch.randint(0, 256, (3, 75, 100), dtype=torch.uint8)
    out = train_preset(args)(image)
    assert out.shape == (3, 48, 48) and out.dtype == torch.float32


def test_eval_preset_resizes_by_crop_pct_then_crops_the_centre():
    args = parse_args(["--train_dir", "x", "--image_size", "224"])
    image = torch.zeros(3, 300, 400, dtype=torch.uint8)
    image[:, 150, 200] = 255  # a bright centre pixel survives the centre crop
    out = eval_preset(args)(image)
    assert out.shape == (3, 224, 224) and out.max() > out.min()


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "RGB"])
def test_any_mode_decodes_to_rgb(tmp_path, mode):
    from PIL import Image

    path = tmp_path / "x.png"
    Image.new("RGB", (10, 7), (10, 200, 30)).convert(mode).save(path)
    pixels = decode_rgb({"bytes": None, "path": str(path)})
    assert pixels.shape == (3, 7, 10) and pixels.dtype == torch.uint8


def test_pil_decodes_what_torchvision_does_not(tmp_path):
    from PIL import Image

    path = tmp_path / "x.bmp"
    Image.new("RGB", (5, 4), (1, 2, 3)).save(path)
    assert decode_rgb({"bytes": None, "path": str(path)})[:, 0, 0].tolist() == [1, 2, 3]
