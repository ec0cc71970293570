"""Transforms: output sizes, flips, eval resize-then-crop pixels, decoded values, and normalisation on the device."""

import pytest
import torch

from utils.config.options import parse_args
from utils.config.settings import typed_options
from utils.data.transforms import images as presets
from utils.config.settings import input_for
from utils.data.datasets.label_kinds import ClassIndex, MultiHot
from utils.data.decoding.images import decode_rgb
from utils.data.transforms.batch import BatchInput

# torchvision 0.29 deprecates its decoders; utils/data/decoding/images.py still uses them on purpose
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")


def train_preset(args):
    """The train preset of the run `args` describes (its Input resolved as the run resolves it)."""
    return presets.train_preset(input_for(args), ClassIndex())


def eval_preset(args):
    return presets.eval_preset(input_for(args))


@pytest.mark.parametrize("extra", [[], ["--no_hflip"], ["--auto_augment", "imagenet"], ["--rand_augment", "9"]])
def test_train_preset_gives_uint8_square_crops(extra):
    args = parse_args(["--train_dir", "x", "--image_size", "48", *extra])
    image = torch.randint(0, 256, (3, 75, 100), dtype=torch.uint8)
    out = train_preset(args)(image)
    assert out.shape == (3, 48, 48) and out.dtype == torch.uint8  # a quarter of float32's bytes to the main process


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


def preset_args(*extra):
    return parse_args(["--train_dir", "x", *map(str, extra)])


def test_no_hflip_builds_no_flip_step():
    from torchvision.transforms import v2

    def flips(args):
        return [t for t in train_preset(args).transforms if isinstance(t, v2.RandomHorizontalFlip)]

    assert flips(preset_args("--no_hflip")) == []
    assert [t.p for t in flips(preset_args())] == [0.5]


def test_no_hflip_never_puts_the_bright_half_on_the_left():
    image = torch.zeros(3, 40, 40, dtype=torch.uint8)
    image[:, :, 20:] = 255  # dark left half, bright right half

    def sides(*extra):
        preset, out = train_preset(preset_args("--image_size", "16", *extra)), []
        for seed in range(50):
            torch.manual_seed(seed)
            pixels = preset(image).float()
            out.append((pixels[:, :, :8].mean().item(), pixels[:, :, 8:].mean().item()))
        return out

    unflipped = sides("--no_hflip")
    assert all(left <= right + 1e-6 for left, right in unflipped)
    assert sum(left < right - 0.5 for left, right in unflipped) >= 5  # crops across the edge do show it
    assert sum(left > right + 0.5 for left, right in sides()) >= 5


@pytest.mark.parametrize("landscape", [True, False])
def test_eval_resizes_the_shorter_side_to_int_size_over_crop_pct_then_crops_the_centre(landscape):
    # 50 / 0.3 = 166.67: int() gives 166, the image's shorter side, so no resampling happens and the
    # crop's border pixels can be read exactly (round() would resize to 167 and blur them).
    image = torch.zeros(3, 166, 200, dtype=torch.uint8)
    for col, value in [(74, 10), (75, 20), (124, 30), (125, 40)]:
        image[0, :, col] = value
    for row, value in [(57, 50), (58, 60), (107, 70), (108, 80)]:
        image[1, row, :] = value
    if not landscape:
        image = image.transpose(1, 2)
    pixels = eval_preset(preset_args("--image_size", "50", "--crop_pct", "0.3"))(image)
    if not landscape:
        pixels, image = pixels.transpose(1, 2), image.transpose(1, 2)
    assert torch.equal(pixels, image[:, 58:108, 75:125])
    assert set(pixels[0, :, 0].tolist()) == {20} and set(pixels[0, :, -1].tolist()) == {30}
    assert set(pixels[1, 0, :].tolist()) == {60} and set(pixels[1, -1, :].tolist()) == {70}
    assert not {10, 40} & set(pixels[0].unique().tolist()) and not {50, 80} & set(pixels[1].unique().tolist())


def test_eval_matches_an_explicit_resize_and_centre_crop():
    from torchvision.transforms.v2 import functional as F

    from utils.data.sources.protocol import IMAGENET_MEAN, IMAGENET_STD

    image = torch.randint(0, 256, (3, 300, 400), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = eval_preset(preset_args("--image_size", "224"))(image)  # crop_pct 0.875: shorter side to 256

    def explicit(resize_to):
        resized = F.resize(image, [resize_to], antialias=True)
        return resized.shape, F.center_crop(resized, [224, 224])

    shape, expected = explicit(256)
    assert shape == (3, 256, 341) and torch.equal(out, expected)
    assert not torch.equal(out, explicit(224)[1])  # the comparison tells crop_pct apart
    # The normalisation that follows on the device gives what v2.ToDtype + v2.Normalize give per image, bit for bit.
    at_224 = preset_args("--image_size", "224")
    on_device = BatchInput.for_training(typed_options(at_224)["batch"], 10, 0, input_for(at_224).mean_std)
    on_device = on_device(out[None])[0]
    assert torch.equal(on_device, F.normalize(F.to_dtype(expected, torch.float32, scale=True), IMAGENET_MEAN,
                                              IMAGENET_STD))


def write_image(path, array, **save):
    from PIL import Image

    Image.fromarray(array).save(path, **save)
    return {"bytes": None, "path": str(path)}


def test_png_decodes_to_its_exact_rgb_values(tmp_path):
    import numpy as np

    rgb = np.random.default_rng(0).integers(0, 256, (7, 10, 3), dtype=np.uint8)
    assert torch.equal(decode_rgb(write_image(tmp_path / "rgb.png", rgb)), torch.from_numpy(rgb).permute(2, 0, 1))
    rgba = np.concatenate([rgb, np.full((7, 10, 1), 9, np.uint8)], axis=2)  # alpha dropped, colours kept
    assert torch.equal(decode_rgb(write_image(tmp_path / "rgba.png", rgba)), torch.from_numpy(rgb).permute(2, 0, 1))
    gray = rgb[:, :, 0]
    assert torch.equal(decode_rgb(write_image(tmp_path / "gray.png", gray)), torch.from_numpy(gray).expand(3, 7, 10))
    embedded = {"bytes": (tmp_path / "rgb.png").read_bytes(), "path": None}  # as Hub datasets store images
    assert torch.equal(decode_rgb(embedded), torch.from_numpy(rgb).permute(2, 0, 1))


def test_jpeg_decodes_close_to_its_rgb_values(tmp_path):
    import numpy as np

    colours = [(200, 40, 40), (30, 90, 220), (10, 250, 128), (255, 255, 0)]
    blocks = np.zeros((32, 32, 3), np.uint8)
    for i, colour in enumerate(colours):
        blocks[i // 2 * 16:i // 2 * 16 + 16, i % 2 * 16:i % 2 * 16 + 16] = colour
    pixels = decode_rgb(write_image(tmp_path / "x.jpg", blocks, quality=95)).int()
    assert pixels.shape == (3, 32, 32)
    for i, colour in enumerate(colours):  # block centres: away from the edges chroma subsampling blurs
        y, x = i // 2 * 16 + 4, i % 2 * 16 + 4
        assert (pixels[:, y:y + 8, x:x + 8] - torch.tensor(colour)[:, None, None]).abs().max() <= 2


@pytest.mark.parametrize("extra, mean, std", [
    ([], (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    (["--mean", 0.5, 0.25, 0.1, "--std", 0.2, 0.3, 0.4], (0.5, 0.25, 0.1), (0.2, 0.3, 0.4)),
])
def test_eval_pixels_are_value_over_255_normalised(extra, mean, std):
    image = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    image[:, 3, 5] = torch.tensor([200, 0, 255], dtype=torch.uint8)
    args = preset_args("--image_size", "16", "--crop_pct", "1", *extra)
    # no resize, no crop; normalised
    out = BatchInput.for_training(typed_options(args)["batch"], 10, 0,
                                  input_for(args).mean_std)(eval_preset(args)(image)[None])[0]
    expected = (image.double() / 255 - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    assert torch.allclose(out.double(), expected, atol=1e-5)
    assert out[:, 3, 5].tolist() == pytest.approx([(200 / 255 - mean[0]) / std[0], (0 - mean[1]) / std[1],
                                                   (1 - mean[2]) / std[2]], abs=1e-5)


def test_ta_wide_and_interpolation_change_the_pixels_as_they_claim():
    image = torch.randint(0, 256, (3, 60, 80), dtype=torch.uint8)
    base = ["--train_dir", "x", "--image_size", "32", "--no_hflip"]

    def train(*extra, seed=0):
        torch.manual_seed(seed)
        return train_preset(parse_args([*base, *extra]))(image)

    ta = [train("--auto_augment", "ta_wide", seed=s) for s in range(4)]
    assert any(not torch.equal(t, train(seed=s)) for s, t in enumerate(ta))  # some draws change the image
    args = ["--train_dir", "x", "--image_size", "24"]
    bilinear = eval_preset(parse_args(args))(image)
    bicubic = eval_preset(parse_args([*args, "--interpolation", "bicubic"]))(image)
    assert bilinear.shape == bicubic.shape and not torch.equal(bilinear, bicubic)
    assert torch.equal(bilinear, eval_preset(parse_args([*args, "--interpolation", "bilinear"]))(image))


def test_train_crop_val_resize_and_val_crop_sizes_are_their_own():
    from torchvision.transforms.v2 import functional as F

    image = torch.randint(0, 256, (3, 60, 80), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    args = preset_args("--image_size", "32", "--train_crop_size", "24", "--val_resize_size", "40",
                       "--val_crop_size", "36")
    assert train_preset(args)(image).shape == (3, 24, 24)  # torchvision's recipe: train at 176, test at 232 -> 224
    assert torch.equal(eval_preset(args)(image), F.center_crop(F.resize(image, [40], antialias=True), [36, 36]))
    default = eval_preset(preset_args("--image_size", "32"))(image)  # 32 / 0.875 -> 36, crop 32
    assert torch.equal(default, F.center_crop(F.resize(image, [36], antialias=True), [32, 32]))
    for bad in (["--val_resize_size", "30"], ["--dataset", "moving_digits", "--train_crop_size", "16"]):
        with pytest.raises(SystemExit) as e:
            parse_args(["--image_size", "32", *bad])
        assert e.value.code == 2


def test_progressive_resizing_follows_ffcvs_ramp():
    import numpy as np

    from utils.data.transforms.input import progressive_size

    def ffcv(epoch, low, high, start, end):  # FFCV's get_resolution, with numpy as it is written there
        if epoch <= start:
            return low
        if epoch >= end:
            return high
        return int(np.round(np.interp([epoch], [start, end], [low, high])[0] / 32)) * 32

    # (128, 160, 0, 2) and (192, 256, 0, 4) meet an even .5 at epoch 1 (144 / 32 = 4.5, 208 / 32 = 6.5): half
    # to even gives 128 and 192 there, rounding half up would give 160 and 224.
    for ramp in ((160, 192, 11, 13), (160, 192, 65, 76), (128, 256, 0, 10), (160, 160, 3, 3), (96, 288, 2, 20),
                 (128, 160, 0, 2), (192, 256, 0, 4)):
        args = preset_args("--progressive_resize", *map(str, ramp))
        assert [progressive_size(args, e) for e in range(90)] == [ffcv(e, *ramp) for e in range(90)]
    assert progressive_size(preset_args("--progressive_resize", "128", "160", "0", "2"), 1) == 128
    assert progressive_size(preset_args("--progressive_resize", "192", "256", "0", "4"), 1) == 192
    args = preset_args("--progressive_resize", "160", "192", "11", "13")  # FFCV's 16-epoch ResNet-50
    assert [input_for(args).train_crop(e) for e in range(16)] == [160] * 12 + [192] * 4
    for bad in (["--progressive_resize", "160", "190", "1", "3"], ["--progressive_resize", "192", "160", "1", "3"],
                ["--progressive_resize", "160", "192", "3", "1"], ["--progressive_resize", "16", "32", "0", "1",
                                                                   "--train_crop_size", "16"]):
        with pytest.raises(SystemExit) as e:
            preset_args(*bad)
        assert e.value.code == 2


def crop_areas(preset, side, draws=400):
    """The share of a side x side image's area of each of `draws` crops the train preset's random crop makes."""
    crop = preset.transforms[0]
    image = torch.zeros(3, side, side, dtype=torch.uint8)
    torch.manual_seed(0)
    boxes = [crop.make_params([image]) for _ in range(draws)]
    return torch.tensor([box["height"] * box["width"] / side ** 2 for box in boxes]), \
        torch.tensor([box["width"] / box["height"] for box in boxes])


@pytest.mark.parametrize("extra, multi_label, low", [
    (["--image_size", "224"], False, 0.08),  # timm's and torchvision's ImageNet crop
    (["--image_size", "128"], False, 0.08),
    (["--image_size", "96"], False, 0.85),  # small images keep most of themselves
    (["--image_size", "32"], False, 0.85),
    (["--image_size", "224"], True, 0.85),  # multi-label data keeps its labelled objects, at any size
    (["--image_size", "32"], True, 0.85),
    (["--image_size", "32", "--train_crop_scale", "0.2", "0.9"], True, 0.2),  # the option wins
    (["--image_size", "224", "--train_crop_scale", "0.5", "0.5"], False, 0.5),
    (["--image_size", "224", "--train_crop_size", "96"], False, 0.08),  # the model's input size says what is small
    (["--image_size", "96", "--train_crop_size", "160"], False, 0.85),
])
def test_the_train_crop_keeps_the_share_of_the_area_its_data_needs(extra, multi_label, low):
    """The random crop's area share (drawn as RandomResizedCrop draws it, the workers' and --decode_on_device's
    alike) stays within --train_crop_scale, else the default for the data's size and kind of labels."""
    args = preset_args(*extra)
    inp = input_for(args)
    high = args.train_crop_scale[1] if args.train_crop_scale else 1.0
    targets = MultiHot(3) if multi_label else ClassIndex()
    areas, _ = crop_areas(presets.train_preset(inp, targets=targets), 200)
    assert areas.min() >= low - 0.02 and areas.max() <= high + 0.01  # the crop's sides are whole pixels
    assert areas.min() < low + 0.1  # the range is drawn from, down to its low end
    assert inp.with_crop_box(targets).train_crop_scale == (low, high)  # what run.json records


def test_the_train_crop_ratio_is_drawn_within_its_option():
    default = crop_areas(presets.train_preset(input_for(preset_args("--image_size", "224")), ClassIndex()), 200)[1]
    assert default.min() >= 3 / 4 - 0.02 and default.max() <= 4 / 3 + 0.02 and default.max() > 1.2
    _, ratios = crop_areas(presets.train_preset(input_for(preset_args("--image_size", "224", "--train_crop_scale",
                                                                         "0.3", "0.6", "--train_crop_ratio", "1.5",
                                                                         "2")), ClassIndex()), 200)
    assert ratios.min() >= 1.5 - 0.05 and ratios.max() <= 2 + 0.05


@pytest.mark.parametrize("argv, message", [
    (["--train_dir", "x", "--train_crop_scale", "0", "1"],
     "train_crop_scale: must be MIN MAX with 0 < MIN <= MAX <= 1"),
    (["--train_dir", "x", "--train_crop_scale", "0.8", "0.5"], "train_crop_scale: must be MIN MAX"),
    (["--train_dir", "x", "--train_crop_scale", "0.5", "1.2"], "train_crop_scale: must be MIN MAX"),
    (["--train_dir", "x", "--train_crop_ratio", "2", "1"], "train_crop_ratio: must be MIN MAX with 0 < MIN <= MAX"),
    (["--dataset", "digits", "--train_crop_scale", "0.5", "1"], "train_crop_scale: the embedded digits keep their own"),
    (["--dataset", "spectral_digits", "--train_crop_ratio", "1", "1"], "train_crop_ratio: the embedded digits keep"),
    (["--dataset", "moving_digits", "--train_crop_scale", "0.5", "1"], "train_crop_scale: is for images"),
    (["--dataset", "synthetic", "--train_crop_scale", "0.5", "1"], "train_crop_scale: synthetic data is generated"),
])
def test_a_train_crop_that_cannot_apply_is_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1 and message in err[0], err


def test_a_checkpoint_made_before_the_crop_options_continues_with_the_crop_it_was_made_with(tmp_path):
    """A run folder written before --train_crop_scale existed trained with timm's 0.08-1 crop whatever its data; its
    resumed run keeps that crop (else it would no longer be the run it was), says so, and records it. A checkpoint
    that records the options, or a resume that sets them, keeps what they say."""
    import json

    from utils.config.options import parse
    from utils.config.settings import as_checkpointed

    def state(folder, **options):
        folder.mkdir()
        (folder / "training_state.json").write_text(json.dumps({"options": {"lr": 0.1, **options}}))
        return folder

    old, new = state(tmp_path / "old"), state(tmp_path / "new", train_crop_scale=None, train_crop_ratio=None)
    settings = parse(["--train_dir", "x", "--image_size", "32"])
    said = []
    kept = as_checkpointed(settings, old, said.append)
    assert (kept.input.train_crop_scale, kept.input.train_crop_ratio) == ((0.08, 1.0), (3 / 4, 4 / 3))
    assert kept.input.crop_box(MultiHot(3)) == ((0.08, 1.0), (3 / 4, 4 / 3))  # whatever the labels turn out to be
    assert len(said) == 1 and said[0].startswith(f"resume: {old} was made before --train_crop_scale and "
                                                 f"--train_crop_ratio existed")
    assert as_checkpointed(settings, new, said.append) is settings  # it records them: its options hold
    assert as_checkpointed(settings, None, said.append) is settings  # a fresh start
    settings = parse(["--train_dir", "x", "--image_size", "32", "--train_crop_scale", "0.5", "1"])
    kept = as_checkpointed(settings, old, said.append)  # the scale given, the ratio as it was
    assert (kept.input.train_crop_scale, kept.input.train_crop_ratio) == ((0.5, 1.0), (3 / 4, 4 / 3))
    settings = parse(["--dataset", "digits"])  # no random-resized crop to keep
    assert as_checkpointed(settings, old, said.append) is settings and len(said) == 2
