"""--decode_on_device on the CPU: the workers hand over JPEG bytes with the crop and flip drawn from the per-sample
generator, the main process decodes and crops them; the draws are the workers' own and the pixels the same bit for
bit, so a run, its SIGKILL + resume on 2 processes and its validation on 1 and 2 are those without the flag; other
files are decoded in the workers; a JPEG the device cannot decode is named or skipped; what it cannot take is one
line."""

import io

import numpy as np
import pytest
import torch
from conftest import (TINY, assert_same_weights, main_fails, parse_fails, read_json, resume_job, resumed_from,
                      run_main)
from PIL import Image
from ranks import ranks_killed, ranks_ok

from utils.config.settings import typed_options
from utils.core.seeding import sample_rng
from utils.data.decoding.on_device import Deferred, DeviceDecoder, JPEG, PIXELS
from utils.data.datasets.label_kinds import ClassIndex
from utils.data.decoding.images import decode_rgb


@pytest.fixture
def decoded_jpegs(monkeypatch):
    """How many JPEGs the main process decoded, counted."""
    seen = []
    decode = DeviceDecoder._decode

    def counted(self, files):
        seen.extend(files)
        return decode(self, files)
    monkeypatch.setattr(DeviceDecoder, "_decode", counted)
    return seen


@pytest.mark.parametrize("no_hflip", [False, True])
def test_a_workers_draws_and_the_devices_pixels_are_the_train_presets_own(no_hflip):
    from utils.config.options import parse_args
    from utils.config.settings import input_for
    from utils.data.transforms.images import eval_preset, train_preset

    args = parse_args(["--train_dir", "x", "--image_size", "24", *(["--no_hflip"] if no_hflip else [])])
    inp = input_for(args)
    decoder = DeviceDecoder(inp.interpolation, torch.device("cpu"))
    rng = np.random.default_rng(1)
    for key, (height, width) in enumerate([(37, 53), (64, 40), (24, 24), (90, 31)]):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(out, "JPEG", quality=90)
        image = {"bytes": out.getvalue(), "path": None}
        for preset, size in ((train_preset(inp, ClassIndex(), 24), 24), (eval_preset(inp), inp.val_crop_size)):
            with sample_rng(0, 3, key):  # as ImageRows draws for (seed, epoch, key)
                expected = preset(decode_rgb(image))
                after = torch.rand(1)  # the generator's next draw: the preset took as many as before
            with sample_rng(0, 3, key):
                payload = Deferred(preset, size)(image)
                assert torch.equal(torch.rand(1), after)
            assert payload["params"][0] == JPEG
            batch = {"pixel_values": {k: [v] if k != "params" else v[None] for k, v in payload.items()},
                     "valid": torch.ones(1, dtype=torch.bool), "source": [""], "error": [""]}
            assert torch.equal(decoder(batch)["pixel_values"][0], expected)


@pytest.mark.slow
def test_a_run_is_bitwise_the_one_decoded_in_the_workers(images, reference, tmp_path, decoded_jpegs):
    """One process, 2 epochs of the reference job (workers 0: the main process reads, the decoder runs alike)."""
    run_main(resume_job(images, tmp_path / "run", 0, "--decode_on_device"))
    assert_same_weights(tmp_path / "run", reference[1])
    ran, whole = read_json(tmp_path / "run" / "results.json"), read_json(reference[1] / "results.json")
    assert (ran["val_loss"], ran["val_top1"]) == (whole["val_loss"], whole["val_top1"])
    # half of the fixture's files are JPEGs (decoded here), the PNGs come decoded from the workers: 3 epochs of the
    # 18 train JPEGs, 3 validations of the 3 val JPEGs
    assert len(decoded_jpegs) == 3 * 18 + 3 * 3


@pytest.mark.slow
def test_sigkill_then_resume_with_decoding_on_the_device_is_bitwise_the_run_without(images, reference, tmp_path):
    """2 processes with a worker each, killed after step 7, resumed from step_6: the reference 2-process run's weights
    (decoded in its workers); its validation too, and on 1 and 2 processes alike with --eval_only."""
    out = tmp_path / "run"
    argv = resume_job(images, out, 1, "--decode_on_device", "--checkpoint_every_steps", "1", "--keep_last", "2")
    ranks_killed(argv, "step:7", nproc=2)
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_6"
    assert_same_weights(out, reference[2])
    whole = read_json(reference[2] / "results.json")
    assert read_json(out / "results.json")["val_loss"] == whole["val_loss"]
    scored = {}
    for nproc in (1, 2):
        evaluation = tmp_path / f"eval{nproc}"
        ranks_ok([*resume_job(images, evaluation, 1, "--decode_on_device", "--eval_only", "--init_from", out)],
                 nproc=nproc)
        scored[nproc] = read_json(evaluation / "results.json")
    assert scored[1]["val_samples"] == scored[2]["val_samples"] == 7
    assert ((scored[1]["val_top1"], scored[1]["per_class_accuracy"])
            == (scored[2]["val_top1"], scored[2]["per_class_accuracy"]))
    assert scored[1]["val_loss"] == pytest.approx(scored[2]["val_loss"], abs=1e-6) == whole["val_loss"]


def test_a_jpeg_the_device_cannot_decode_is_named_or_skipped(tmp_path, capsys):
    from conftest import make_folder

    make_folder(tmp_path / "tr", {"cat": 4, "dog": 4})
    make_folder(tmp_path / "va", {"cat": 2, "dog": 2})
    data = bytearray((tmp_path / "tr" / "dog" / "3.jpg").read_bytes())
    at = data.find(b"\xff\xc4")
    data[at + 5:at + 21] = b"\xff" * 16  # an impossible Huffman table: the header reads, the image does not
    (tmp_path / "tr" / "dog" / "3.jpg").write_bytes(bytes(data))
    job = ["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", "--image_size", "16", "--batch_size", "4",
           "--epochs", "1", "--num_workers", "0", "--decode_on_device"]
    code, err = main_fails([*job, "--output_dir", tmp_path / "stops"], capsys)
    assert code == 2 and f"cannot decode {tmp_path / 'tr' / 'dog' / '3.jpg'} (RuntimeError" in err, err
    run_main([*job, "--skip_bad_images", "--output_dir", tmp_path / "skips"])
    assert read_json(tmp_path / "skips" / "results.json")["skipped_images"] == [str(tmp_path / "tr" / "dog" / "3.jpg")]


def test_non_jpeg_files_and_jpegs_that_exif_turns_come_decoded_from_the_workers():
    from utils.config.options import parse_args
    from utils.config.settings import input_for
    from utils.data.transforms.images import train_preset

    inp = input_for(parse_args(["--train_dir", "x", "--image_size", "16"]))
    picture = Image.fromarray(np.random.default_rng(2).integers(0, 255, (20, 30, 3), dtype=np.uint8))
    turned = picture.getexif()
    turned[0x0112] = 6
    for fmt, save in (("PNG", {}), ("JPEG", {"exif": turned})):
        out = io.BytesIO()
        picture.save(out, fmt, **save)
        image = {"bytes": out.getvalue(), "path": None}
        with sample_rng(0, 0, 5):
            payload = Deferred(train_preset(inp, ClassIndex(), 16), 16)(image)
        with sample_rng(0, 0, 5):
            expected = train_preset(inp, ClassIndex(), 16)(decode_rgb(image))  # not turned, as the workers decode it
        assert payload["params"][0] == PIXELS, fmt
        assert torch.equal(torch.frombuffer(bytearray(payload["encoded"]), dtype=torch.uint8).view(3, 16, 16), expected)


@pytest.mark.parametrize("argv, message", [
    ([*TINY, "--decode_on_device"], "decode_on_device: decodes image files (JPEG) and video files on the device; "
                                    "this data (synthetic) has none"),
    (["--dataset", "moving_digits", "--decode_on_device"], "this data (moving_digits) has none"),
    (["--train_dir", "VIDEOS/tr", "--val_dir", "VIDEOS/va", "--decode_on_device"],
     "decode_on_device: decodes videos with torchcodec (NVDEC on CUDA): add --video_decoder torchcodec"),
    (["--train_dir", "TRAIN", "--val_dir", "VAL", "--decode_on_device", "--auto_augment", "ta_wide"],
     "decode_on_device: with --auto_augment or --rand_augment"),
])
def test_what_decoding_on_the_device_cannot_take_is_one_line(argv, message, images, videos, capsys):
    argv = [str(images / "tr") if a == "TRAIN" else str(images / "va") if a == "VAL" else a for a in argv]
    argv = [a.replace("VIDEOS", str(videos)) for a in argv]
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def test_a_stream_of_jpeg_shards_gives_the_same_batches_decoded_on_the_device(tmp_path, decoded_jpegs):
    """--streaming's loader (utils/data/streaming/loader.py), 2 shards of JPEG bytes, a worker: every batch of an epoch
    holds the pixels the workers made without the flag."""
    import datasets

    from utils.config.options import parse_args
    from utils.core.preemption import worker_init_fn
    from utils.config.settings import input_for
    from utils.data.streaming.loader import StreamLoader
    from utils.data.sources.streamed import Streamed

    rng = np.random.default_rng(3)
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=["a", "b"]))
    for name, count in (("train-00000-of-00002", 10), ("train-00001-of-00002", 10), ("validation-00000-of-00001", 4)):
        files = []
        for _ in range(count):
            out = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (24, 30, 3), dtype=np.uint8)).save(out, "JPEG")
            files.append({"bytes": out.getvalue(), "path": None})
        datasets.Dataset.from_dict({"image": files, "label": [i % 2 for i in range(count)]},
                                   features=features).to_parquet(tmp_path / f"{name}.parquet")
    epochs = {}
    for on_device in (False, True):
        args = parse_args(["--dataset", str(tmp_path), "--streaming", "--image_size", "16", "--batch_size", "4",
                           "--num_workers", "1", *(["--decode_on_device"] if on_device else [])])
        inp = input_for(args)
        rows, _, _, _ = Streamed().datasets(typed_options(args)["data"], inp)  # as the run builds it
        decode = DeviceDecoder(inp.interpolation, torch.device("cpu")) if on_device else None
        loader = StreamLoader(rows, 4, 1, rows.micro_batches, torch.device("cpu"), worker_init_fn(), decode)
        epochs[on_device] = list(loader.batches(1))
    assert len(epochs[True]) == len(epochs[False]) == 5 and len(decoded_jpegs) == 20
    for plain, decoded in zip(epochs[False], epochs[True]):
        assert torch.equal(plain["labels"], decoded["labels"]) and torch.equal(plain["pixel_values"],
                                                                               decoded["pixel_values"])


@pytest.mark.slow
def test_the_device_resizes_with_the_runs_interpolation(tmp_path):
    """On textured JPEGs with --interpolation bicubic (as a timm model's input says): the run decoded on the device
    is bitwise the run decoded in the workers, training and validation alike (flat colours resize alike with any
    kernel, so the reference runs cannot tell)."""
    from conftest import assert_same_weights, make_folder

    for split, counts in (("tr", {"cat": 4, "dog": 4}), ("va", {"cat": 2, "dog": 2})):
        make_folder(tmp_path / split, counts, size=(40, 30), noise=60)
    for name in list((tmp_path / "tr").rglob("*.png")) + list((tmp_path / "va").rglob("*.png")):
        name.unlink()  # JPEGs alone: every one decoded on the device
    job = ["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", "--image_size", "16", "--batch_size", "2",
           "--epochs", "1", "--warmup_epochs", "0", "--num_workers", "0", "--interpolation", "bicubic"]
    workers = run_main([*job, "--output_dir", tmp_path / "workers"])
    device = run_main([*job, "--decode_on_device", "--output_dir", tmp_path / "device"])
    assert_same_weights(tmp_path / "device", tmp_path / "workers")
    assert device["val_loss"] == workers["val_loss"]
