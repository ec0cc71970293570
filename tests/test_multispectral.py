"""Any number of channels, any bit depth: files read as they are (utils/data/decoding/bands.py), --bands, --pixel_max,
--mean auto (utils/data/loading/statistics.py), stems built and adapted (utils/models/stem.py), predict.py and ONNX on
the same files, and the embedded spectral digits.

Folders of 6-band uint16 TIFFs (the spectral digits' own files, three classes) and of 1-channel 16-bit PNGs (one of
their digit bands) train on 2 processes with a worker each; validation splits of 7 images (odd: 2 processes pad)."""

import io
import json

import numpy as np
import pytest
import torch

from conftest import assert_same_weights, main_fails, read_json, resumed_from, run_main
from ranks import ranks_killed, ranks_ok

CLASSES = (0, 1, 7)
TRAIN_EACH = 6


@pytest.fixture(scope="module")
def bands(tmp_path_factory):
    """root/tif/{tr,va}/<digit>/<i>.tif: 6-band uint16 TIFFs; root/png/{tr,va}/<digit>/<i>.png: band 3 of the same
    as 1-channel 16-bit PNGs. 6 training images a class, validation 3, 2 and 2."""
    from PIL import Image

    from utils.data.decoding.bands import read_array
    from utils.data.sources.spectral_digits import load_spectral_digits

    root = tmp_path_factory.mktemp("bands")
    splits = load_spectral_digits()
    for split, folder, counts in (("train", "tr", {c: TRAIN_EACH for c in CLASSES}),
                                  ("validation", "va", dict(zip(CLASSES, (3, 2, 2))))):
        rows = splits[split].cast_column("image", __import__("datasets").Image(decode=False))
        taken = {c: 0 for c in CLASSES}
        for row in rows:
            label = row["label"]
            if label not in taken or taken[label] == counts[label]:
                continue
            data, name = row["image"]["bytes"], f"{taken[label]:02d}"
            taken[label] += 1
            for kind in ("tif", "png"):
                (root / kind / folder / str(label)).mkdir(parents=True, exist_ok=True)
            (root / "tif" / folder / str(label) / f"{name}.tif").write_bytes(data)
            Image.fromarray(read_array(data)[..., 3]).save(root / "png" / folder / str(label) / f"{name}.png")
    return root


def job(root, kind, out, workers, *extra):
    return ["--train_dir", root / kind / "tr", "--val_dir", root / kind / "va", "--image_size", "32",
            "--batch_size", "6", "--epochs", "2",
            "--warmup_epochs", "0.5", "--num_workers", workers, "--output_dir", out, "--lr", "0.05", *extra]


def pixels_of(folder, pick=None):
    """Every file's pixels under `folder` (sorted), as float64 (N, C, H*W) scaled to 0..1 by their type's maximum."""
    from utils.data.decoding.bands import read_array

    arrays = [read_array(path.read_bytes()) for path in sorted(folder.rglob("*.*"))]
    stacked = np.stack([a if pick is None else a[..., list(pick)] for a in arrays]).astype(np.float64)
    return stacked.reshape(len(arrays), -1, stacked.shape[-1]).transpose(0, 2, 1) / np.iinfo(arrays[0].dtype).max


def numpy_statistics(folder, pick=None):
    x = pixels_of(folder, pick)
    return x.mean(axis=(0, 2)), x.std(axis=(0, 2))


def with_a_broken_tiff(bands, root):
    """root/tif: a copy of the 6-band folders with root/tif/tr/7/zz.tif, a TIFF header and nothing readable after
    it. It sorts last, so --mean auto's pass (a contiguous block of the sorted files a process) meets it on the last
    process only. Returns its path."""
    import shutil

    shutil.copytree(bands / "tif", root / "tif")
    path = root / "tif" / "tr" / "7" / "zz.tif"
    path.write_bytes(b"II*\x00" + b"\x07" * 40)
    return path


def test_files_keep_their_bits_and_bands(tmp_path):
    """16-bit PNG (gray and RGB), TIFF (interleaved and planar, 6 bands), .npy and an 8-bit gray PNG are read to their
    exact values; --bands picks and orders; a file of other bands or type is a ValueError naming both."""
    import tifffile
    from PIL import Image

    from utils.data.decoding.bands import BandDecoder, PixelFormat, probe

    rng = np.random.default_rng(0)
    wide = rng.integers(0, 65536, (9, 7, 6), dtype=np.uint16)
    files = {}
    buffer = io.BytesIO()
    Image.fromarray(wide[..., 0]).save(buffer, format="PNG")
    files["gray16.png"] = (buffer.getvalue(), wide[..., :1])
    import torchvision

    rgb16 = torch.from_numpy(wide[..., :3].astype(np.int32)).permute(2, 0, 1)
    files["rgb16.png"] = (None, wide[..., :3])  # written below, by torchvision's encoder (PIL cannot write 48-bit)
    for layout, array in (("contig", wide), ("separate", wide.transpose(2, 0, 1))):
        buffer = io.BytesIO()
        tifffile.imwrite(buffer, array, photometric="minisblack", planarconfig=layout)
        files[f"{layout}.tif"] = (buffer.getvalue(), wide)
    buffer = io.BytesIO()
    np.save(buffer, wide[..., :4])
    files["four.npy"] = (buffer.getvalue(), wide[..., :4])
    narrow = (wide[..., 0] >> 8).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(narrow).save(buffer, format="PNG")
    files["gray8.png"] = (buffer.getvalue(), narrow[..., None])
    try:
        files["rgb16.png"] = (torchvision.io.encode_png(rgb16.to(torch.uint16)).numpy().tobytes(), wide[..., :3])
    except (RuntimeError, TypeError):  # an encoder without 16 bits: the gray one stands for both
        del files["rgb16.png"]
    for name, (data, expected) in files.items():
        fmt = probe(data, name)
        assert (fmt.channels, fmt.dtype) == (expected.shape[2], expected.dtype.name), name
        got = BandDecoder(fmt)({"bytes": data, "path": name})
        assert got.dtype == torch.float32 and torch.equal(got, torch.from_numpy(
            expected.transpose(2, 0, 1).astype(np.float32))), name
    tif = files["contig.tif"][0]
    assert torch.equal(BandDecoder(PixelFormat(6, "uint16"), (4, 0, 2))({"bytes": tif, "path": None}),
                       torch.from_numpy(wide[..., [4, 0, 2]].transpose(2, 0, 1).astype(np.float32)))
    with pytest.raises(ValueError, match="4 channels of uint16, the training data's first file 6 channels of uint16"):
        BandDecoder(PixelFormat(6, "uint16"))({"bytes": files["four.npy"][0], "path": "four.npy"})
    assert not PixelFormat(3, "uint16").rgb and not PixelFormat(1, "uint16").rgb and not PixelFormat(5, "uint8").rgb
    assert PixelFormat(3, "uint8").rgb and PixelFormat(1, "uint8").rgb and not PixelFormat(3, "uint8", True).rgb


def test_statistics_are_the_whole_splits_on_one_process(bands, tmp_path):
    """--mean auto on one process (in this one): numpy's mean and std over every pixel of the training files, with
    --bands and --pixel_max as the run reads them."""
    from accelerate import Accelerator

    from utils.config.options import parse
    from utils.data.loading.statistics import channel_statistics

    settings = parse([str(a) for a in job(bands, "tif", tmp_path / "o", 0, "--mean", "auto", "--bands", "5", "2", "3",
                                          "--pixel_max", "40000")])
    inp = settings.input
    assert inp.mean_std == "auto" and inp.channels == 3 and inp.bands == (5, 2, 3) and inp.pixel_max == 40000
    train, _, _, _ = settings.source.datasets(settings.data, inp)
    mean, std = channel_statistics(Accelerator(cpu=True), train, inp)
    expected_mean, expected_std = numpy_statistics(bands / "tif" / "tr", (5, 2, 3))
    scale = 65535 / 40000
    assert np.allclose(mean, expected_mean * scale, rtol=1e-12) and np.allclose(std, expected_std * scale, rtol=1e-10)


@pytest.mark.slow
def test_six_bands_train_on_two_processes_predict_and_export_as_validated_and_resume_bitwise(bands, tmp_path, capsys):
    """6-band uint16 TIFFs, --bands 3 4 5 1 --mean auto, 2 processes with a worker each: the statistics are the whole
    split's (numpy's); predict.py on the validation folder gives the run's val top-1 and loss's labels, and so does the
    ONNX graph fed the files' raw bands; a SIGKILL mid-epoch 1 and --resume latest end with the same bits.
    With --skip_bad_images, a training file that cannot be read, met by the statistics pass on process 1 only: it is
    left out of the statistics, which rank 0 says naming it; in training it stands as a blank of the 4 bands the
    model sees (not of the file's 6: a batch holding it would not stack) and is listed."""
    import onnxruntime
    import predict

    from utils.inference import eval_dataset, load_run

    broken = with_a_broken_tiff(bands, tmp_path)
    out = tmp_path / "whole"
    extra = ("--bands", "3", "4", "5", "1", "--mean", "auto", "--checkpoint_every_steps", "1", "--skip_bad_images")
    proc = ranks_ok(job(tmp_path, "tif", out, 1, *extra), nproc=2)
    assert "pixels: 6 channels of uint16 in each file" in proc.stdout and "4 channels into the model" in proc.stdout
    left_out = [line for line in proc.ranks[0].stdout.splitlines() if "left out" in line]
    assert len(left_out) == 1 and left_out[0].startswith(
        f"statistics: 1 unreadable training file(s) left out, e.g. {broken} ("), proc.report()
    results, record = read_json(out / "results.json"), read_json(out / "run.json")
    assert results["skipped_images"] == [str(broken)]
    mean, std = numpy_statistics(bands / "tif" / "tr", (3, 4, 5, 1))  # the folder without the broken file
    assert np.allclose(record["input"]["mean_std"][0], mean, rtol=1e-12)
    assert np.allclose(record["input"]["mean_std"][1], std, rtol=1e-10)
    assert results["val_samples"] == 7
    rows = predict.main([str(out), str(bands / "tif" / "va"), "--num_workers", "1"])
    truth = [row["path"].split("/")[-2] for row in rows]
    correct = sum(row["labels"][0] == label for row, label in zip(rows, truth))
    assert correct == round(results["val_top1"] * 7)
    predict.main([str(out), "--export_onnx", str(tmp_path / "m.onnx")])
    files = sorted((bands / "tif" / "va").rglob("*.tif"))
    run, _ = load_run(out)
    dataset, _ = eval_dataset(run, files)  # the run's bands of each file, raw, through its eval resize and crop
    raw = torch.stack([dataset[i]["pixel_values"] for i in range(len(files))]).numpy()
    assert raw.shape == (7, 4, 32, 32) and raw.max() > 255  # raw 16-bit values: the graph divides them
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"pixels": raw})[0]
    names = json.loads((out / "labels.json").read_text())
    onnx_correct = sum(names[str(i)] == f.parent.name for i, f in zip(logits.argmax(1), files))
    assert onnx_correct == correct
    config = read_json(out / "model" / "config.json")
    assert config["pretrained_cfg"]["in_chans"] == 4 if "pretrained_cfg" in config else \
        config["input"]["pixel_max"] == 65535 and config["input"]["bands"] == [3, 4, 5, 1]
    killed = tmp_path / "killed"
    argv = job(tmp_path, "tif", killed, 1, *extra)
    ranks_killed(argv, "step:3", nproc=2)  # epoch 1, its first step (3 steps an epoch on each process)
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) is not None and "statistics: mean and std as" in proc.stdout
    assert_same_weights(killed, out)


@pytest.mark.slow
def test_sixteen_bit_grayscale_pngs_train_on_two_processes_as_one_channel(bands, tmp_path):
    """1-channel 16-bit PNGs: one channel into the model (its stem built for it), statistics by default (not
    ImageNet's RGB ones), numpy's over the split."""
    out = tmp_path / "gray"
    proc = ranks_ok([*job(bands, "png", out, 1), "--epochs", "1"], nproc=2)
    assert "pixels: 1 channel of uint16 in each file" in proc.stdout and "built for 1 input channels" in proc.stdout
    mean, std = numpy_statistics(bands / "png" / "tr")
    record = read_json(out / "run.json")["input"]
    assert record["channels"] == 1 and record["pixel_max"] == 65535
    assert np.allclose(record["mean_std"], [mean, std], rtol=1e-10)
    results = read_json(out / "results.json")
    assert results["val_samples"] == 7 and 0 <= results["val_loss"] < 10


@pytest.mark.slow
def test_the_spectral_digits_are_learnt_from_the_bands_beyond_rgb(tmp_path):
    """Every band: the digit (bands 3-5) is learnt; bands 0-2 alone hold a decoy of another class, drawn at random:
    no better than chance."""
    every = run_main(["--dataset", "spectral_digits", "--epochs", "3", "--output_dir", tmp_path / "all"])
    decoys = run_main(["--dataset", "spectral_digits", "--epochs", "2", "--bands", "0", "1", "2",
                       "--output_dir", tmp_path / "decoys"])  # 2 epochs: enough to show nothing is learnt (3: 0.12)
    assert every["val_top1"] >= 0.95, every["val_top1"]
    assert decoys["val_top1"] <= 0.2, decoys["val_top1"]


def fake_pretrained(model, path):
    """`model`'s weights saved where a library looks for its pretrained ones, made distinct from a fresh build (its own
    initialisation moved, so that its outputs keep their scale)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    state = model.state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return state


@pytest.mark.parametrize("name", ["resnet18", "timm/resnet18.a1_in1k"])
def test_a_pretrained_stem_is_adapted_so_a_gray_image_scores_as_its_rgb_copy(name, tmp_path, monkeypatch):
    """torchvision's weights (from the torch hub cache) and timm's (its pretrained config's file), loaded into a
    1-channel and a 6-channel model: the gray model on an image scores what the RGB one does on it repeated three
    times; the 6-band one on an image's RGB twice what the RGB one does on it."""
    from utils.config.options import parse
    from utils.models.libraries import build_model, initialise

    timm = name.startswith("timm/")
    rgb = build_model(name, 1000)  # the classes of both libraries' ImageNet weights: the head is kept
    if timm:
        import dataclasses

        from timm.models import _registry, get_pretrained_cfg

        file = tmp_path / "timm.pth"
        fake_pretrained(rgb, file)
        local = dataclasses.replace(get_pretrained_cfg(name[5:]), file=str(file), source="", hf_hub_id=None, url="")
        monkeypatch.setitem(_registry._model_pretrained_cfgs, name[5:], local)  # a file of its own, not the Hub
    else:
        import torchvision

        monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
        url = torchvision.models.get_model_weights(name).DEFAULT.url
        fake_pretrained(rgb, tmp_path / "torch" / "hub" / "checkpoints" / url.rsplit("/", 1)[1])
    chosen = parse(["--model", name, "--pretrained"]).model
    lines = []
    image = torch.rand(2, 1, 64, 64)
    rgb_image = image.expand(-1, 3, -1, -1)
    for channels, x in ((1, image), (6, torch.cat([rgb_image] * 2, 1))):
        model = build_model(name, 1000, pretrained=timm, in_chans=channels)
        initialise(model, chosen, lines.append)
        model.eval(), rgb.eval()
        with torch.no_grad():
            ours, theirs = model(x), rgb(rgb_image)
        assert theirs.std() > 0.1, theirs.std()  # outputs of a size that a stem left fresh would change
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    assert all("adapted" in line for line in lines), lines


@pytest.mark.parametrize("extra, message", [
    (["--auto_augment", "imagenet"],
     "auto_augment: its colour operations are defined on RGB; this data has 6 channels"),
    (["--bands", "0", "6"], "bands: picks channels 0..5 of files holding 6 channels of uint16; got 0 6"),
    (["--mean", "0.5", "0.5", "0.5"], "mean: give 6 values, one for each channel the model sees"),
    (["--mean", "auto", "0.5"], "mean: give numbers, one a channel, or auto"),
    (["--decode_on_device"], "decode_on_device: decodes 8-bit RGB JPEGs on the device; these files hold 6 channels"),
])
def test_what_cannot_apply_to_these_bands_is_refused_in_one_line(bands, extra, message, tmp_path, capsys):
    code, err = main_fails(job(bands, "tif", tmp_path / "run", 0, *extra), capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, message", [
    (["--bands", "0"], "bands: reads the channels and bit depth of image files"),
    (["--mean", "auto"], "mean: auto computes the statistics of image files' pixels"),
])
def test_rgb_data_refuses_the_options_of_bands_in_one_line(extra, message, tmp_path, capsys):
    code, err = main_fails(["--output_dir", tmp_path / "run", *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("odd, stats, says", [
    ("bands", ["--mean", *"000000", "--std", *"111111"], "4 channels of uint16, the training data's first file 6 "
                                                          "channels of uint16"),
    ("garbage", ["--mean", "auto"], "mean: auto reads every training file, and 1 could not be read"),
])
def test_a_file_of_other_bands_stops_the_run_in_one_line_naming_it(bands, odd, stats, says, tmp_path, capsys):
    """A 4-band file among 6-band ones (met in training), or a broken TIFF (met by --mean auto's pass): it is named,
    the run stops (exit 2), one line (tifffile's own complaints silenced)."""
    import shutil

    import tifffile

    folder = tmp_path / "mixed"
    shutil.copytree(bands / "tif", folder)
    path = folder / "tr" / "7" / "zz.tif"
    if odd == "bands":
        tifffile.imwrite(path, np.zeros((32, 32, 4), np.uint16), photometric="minisblack", planarconfig="contig")
    else:
        path.write_bytes(b"II*\x00" + b"\x07" * 40)
    code, err = main_fails(job(tmp_path, "mixed", tmp_path / "run", 0, *stats), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "zz.tif" in err and says in err


@pytest.mark.slow
def test_a_file_the_statistics_pass_cannot_read_on_one_process_stops_every_process_in_one_line(bands, tmp_path):
    """Without --skip_bad_images, a broken TIFF in process 1's share of --mean auto's pass (2 forked ranks): the
    processes pool what they could not read, so every one stops there, exit 2, with the one line naming it (none
    trains on alone, none waits in a collective for the others to be torn down)."""
    from ranks import run_ranks

    broken = with_a_broken_tiff(bands, tmp_path)
    ranks = run_ranks(job(tmp_path, "tif", tmp_path / "run", 0, "--mean", "auto", "--bands", "3", "4"), nproc=2,
                      timeout=120)
    assert not ranks.timed_out and [r.returncode for r in ranks.ranks] == [2, 2], ranks.report()
    for rank in ranks.ranks:
        lines = [line for line in rank.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("train_classification.py: error: mean: auto reads every "
                                                       f"training file, and 1 could not be read: {broken} ("), \
            ranks.report()


def test_a_save_to_disk_folder_of_tiff_bytes_keeps_its_bands(tmp_path):
    """An Image column holding 6-band TIFF bytes (what a Hub dataset of GeoTIFFs saved to disk holds): its first row
    says what every row holds, and items come out as raw 16-bit values of the bands asked for."""
    import datasets

    from utils.config.options import parse
    from utils.data.decoding.bands import read_array
    from utils.data.sources.spectral_digits import load_spectral_digits

    splits = load_spectral_digits()
    small = datasets.DatasetDict({name: split.select(range(12)) for name, split in splits.items()})
    small.save_to_disk(tmp_path / "ds")
    settings = parse(["--dataset", str(tmp_path / "ds"), "--image_size", "32", "--bands", "4", "1"])
    assert (settings.input.channels, settings.input.file_format, settings.input.mean_std) == (2, (6, "uint16"), "auto")
    train, _, _, _ = settings.source.datasets(settings.data, settings.input)
    first = small["train"].cast_column("image", datasets.Image(decode=False))[0]["image"]["bytes"]
    item = train[0]  # a random crop, resized: between the extremes of the raw values
    raw = read_array(first)[..., [4, 1]].astype(np.float32)
    assert item["valid"] and item["pixel_values"].shape == (2, 32, 32) and item["pixel_values"].max() > 255
    for band in range(2):
        assert raw[..., band].min() - 1 <= item["pixel_values"][band].min() <= item["pixel_values"][band].max() \
            <= raw[..., band].max() + 1


def test_every_library_builds_for_the_data_s_channels(tmp_path):
    """transformers (from its config's num_channels; a pretrained folder's patch embedding adapted: a gray image
    scores as its RGB copy), pytorchvideo and a torchvision model whose stem is nested (the first convolution
    replaced) take C channels."""
    import transformers

    from utils.models.libraries import build_model

    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=64, num_labels=5)
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    name = f"hf/{tmp_path / 'vit'}"
    assert build_model(name, 5, in_chans=6).eval()(torch.rand(2, 6, 32, 32)).shape == (2, 5)
    rgb, gray = (build_model(name, 5, pretrained=True, in_chans=c).eval() for c in (3, 1))
    image = torch.rand(2, 1, 32, 32)
    with torch.no_grad():
        gray.classifier.load_state_dict(rgb.classifier.state_dict())  # the new heads drawn apart: the same one
        torch.testing.assert_close(gray(image), rgb(image.expand(-1, 3, -1, -1)), rtol=1e-4, atol=1e-5)
    assert build_model("pv/x3d_xs", 5, video=True, in_chans=4).eval()(torch.rand(1, 4, 4, 64, 64)).shape == (1, 5)
    assert build_model("mobilenet_v3_small", 5, in_chans=2).eval()(torch.rand(1, 2, 64, 64)).shape == (1, 5)


def test_dashboards_show_the_first_three_bands_or_the_gray_one():
    from utils.reporting.trackers import displayable

    raw = torch.rand(2, 6, 8, 8) * 65535
    shown = displayable(raw)
    assert shown.dtype == torch.uint8 and shown.shape == (2, 3, 8, 8)
    assert torch.equal(shown, displayable(raw[:, :3]))
    gray = displayable(raw[:, :1])
    assert gray.shape == (2, 3, 8, 8) and torch.equal(gray[:, 0], gray[:, 2]) and gray.amax() == 255


def test_an_array3d_column_trains_as_its_bands(tmp_path):
    """A save_to_disk dataset whose pixels are an Array3D column of (H, W, 5) uint16 (no files at all): five channels
    into the model, its statistics numpy's, one epoch trained and validated in this process."""
    import datasets

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 4000, (16, 16, 16, 5), dtype=np.uint16)
    labels = np.arange(16) % 2
    pixels[labels == 1, :, :, 2] += 30000  # band 2 tells the classes apart
    features = datasets.Features(pixels=datasets.Array3D((16, 16, 5), "uint16"),
                                 label=datasets.ClassLabel(names=["a", "b"]))
    split = datasets.Dataset.from_dict({"pixels": pixels, "label": labels}, features=features)
    datasets.DatasetDict(train=split.select(range(10)), validation=split.select(range(10, 16))).save_to_disk(
        tmp_path / "ds")
    results = run_main(["--dataset", tmp_path / "ds", "--image_column", "pixels", "--image_size", "16",
                        "--batch_size", "5", "--epochs", "1", "--num_workers", "1", "--output_dir", tmp_path / "run"])
    record = read_json(tmp_path / "run" / "run.json")["input"]
    assert record["channels"] == 5 and record["file_format"] == [5, "uint16"] and results["val_samples"] == 6
    x = pixels[:10].astype(np.float64).reshape(-1, 5) / 65535
    assert np.allclose(record["mean_std"], [x.mean(0), x.std(0)], rtol=1e-10)
