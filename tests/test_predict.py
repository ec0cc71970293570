"""Using a trained run: predict.py reproduces the run's val figures on its val files, keeps input order on
2 processes, refuses to overwrite; the model folder loads with its library alone; ONNX matches PyTorch."""

import csv
import json
import os

import pytest
import torch
from conftest import ROOT
from ranks import ranks_ok

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """A one-epoch digits run (far from perfect, so that agreement means something), with EMA, and
    its 360 val images written as <class>/<n>.png (PNG: lossless, the same pixels)."""
    import train_classification
    from utils.data.sources.digits import load_digits_dataset

    root = tmp_path_factory.mktemp("predict")
    results = train_classification.main(["--epochs", "1", "--model_ema",
                                         "--num_workers", "0", "--output_dir", str(root / "run")])
    for i, row in enumerate(load_digits_dataset()["validation"]):
        (root / "val" / str(row["label"])).mkdir(parents=True, exist_ok=True)
        row["image"].save(root / "val" / str(row["label"]) / f"{i:04d}.png")
    return root, results


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_predict_reproduces_the_runs_val_top1_on_its_val_files(digits_run, capsys):
    import predict

    root, results = digits_run
    assert 0.2 < results["val_top1"] < 0.98  # a run that gets some wrong
    for ema, key in ((False, "val_top1"), (True, "val_ema_top1")):
        out = root / f"preds_{ema}.jsonl"
        rows = predict.main([str(root / "run"), str(root / "val"), "--output", str(out), "--top_k", "3",
                             "--num_workers", "1"] + (["--ema"] if ema else []))
        assert rows_of(out) == rows and len(rows) == 360 and all(len(r["labels"]) == 3 for r in rows)
        correct = sum(r["labels"][0] == os.path.basename(os.path.dirname(r["path"])) for r in rows)
        assert correct == round(results[key] * 360)
        assert f"top-1 against the class folders: {results[key]:.4f}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # an output that exists is kept
        predict.main([str(root / "run"), str(root / "val"), "--output", str(out)])
    assert e.value.code == 2 and "--overwrite" in capsys.readouterr().err and rows_of(out) == rows


@pytest.mark.slow
def test_bad_inputs_are_one_line(digits_run, tmp_path, capsys):
    import predict

    root, _ = digits_run
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    for argv, says in (([str(tmp_path / "nope.png")], "no such file or folder"),
                       ([str(broken)], "cannot decode"), ([str(root / "val")] + ["--checkpoint", str(tmp_path)],
                                                          "does not exist"),
                       ([str(root / "val"), "--ema", "--checkpoint", str(tmp_path)], "--ema: the EMA weights are")):
        with pytest.raises(SystemExit) as e:
            predict.main([str(root / "run"), *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and says in err[0]
    rows = predict.main([str(root / "run"), str(broken), str(root / "val" / "3"), "--skip_bad", "--output",
                         str(tmp_path / "p.csv")])
    assert rows[0]["labels"] == [] and "cannot identify image" in rows[0]["error"]
    table = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(table) == 1 + len(os.listdir(root / "val" / "3")) and table[0]["error"] and not table[1]["error"]


def test_the_temperature_and_tuned_thresholds_belong_to_the_weights_they_were_fitted_to():
    """--calibrate's T and model/thresholds.json fit the weights model/ holds: the final EMA weights of a --model_ema
    run, else the final trained ones; never a checkpoint's. A run recorded before run.json said which (tuned_on
    None) keeps applying them to its final weights, as it did."""
    from utils.run.trained import TrainedRun, tuned_for

    def run(tuned_on):
        return TrainedRun("resnet18", "images", None, ["a", "b"], False, None, None, "pyav", temperature=2.0,
                          tuned_on=tuned_on)

    plain, ema, older = run("model.safetensors"), run("model_ema.safetensors"), run(None)
    assert [tuned_for(plain), tuned_for(plain, ema=True), tuned_for(plain, checkpoint="c")] == [True, False, False]
    assert [tuned_for(ema), tuned_for(ema, ema=True), tuned_for(ema, ema=True, checkpoint="c")] == [False, True, False]
    assert [tuned_for(older), tuned_for(older, ema=True), tuned_for(older, checkpoint="c")] == [True, True, False]


@pytest.mark.slow
def test_two_processes_predict_each_file_once_in_input_order(digits_run, tmp_path):
    root, _ = digits_run
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    inputs = [root / "val" / "7", root / "val" / "1", root / "val" / "0" / "0176.png"]  # not sorted: order kept
    ranks_ok([root / "run", *inputs, "--output", one, "--batch_size", "8"], nproc=1, launcher=False,
             target="predict:main")
    ranks_ok([root / "run", *inputs, "--output", two, "--batch_size", "8"], nproc=2, target="predict:main")
    a, b = rows_of(one), rows_of(two)
    assert [r["path"] for r in a] == [r["path"] for r in b]
    assert a[-1]["path"].endswith("0176.png") and "/7/" in a[0]["path"]
    assert all(x["labels"] == y["labels"] and torch.allclose(torch.tensor(x["probs"]), torch.tensor(y["probs"]),
                                                              atol=1e-5) for x, y in zip(a, b))


def classified(run, vectors):
    """A single-label run's probabilities from feature vectors put through its model's own classifier."""
    from utils.models.libraries import classifier
    from utils.run.trained import load_run, unwrapped

    trained, model = load_run(run)
    with torch.no_grad():
        return classifier(unwrapped(model), trained.model)(vectors).softmax(dim=1)


@pytest.mark.slow
def test_embeddings_are_what_the_classifier_reads_in_input_order_on_one_and_two_processes(digits_run, tmp_path,
                                                                                         capsys):
    """--embeddings: each file's vector put through the run's classifier gives that file's row of probabilities
    (so it is what the classifier read, and in input order); 2 processes write the same rows as 1 (25 files:
    odd, padded); a file that cannot be decoded is a NaN row (.npy) or a null (.parquet)."""
    import numpy as np
    import pyarrow.parquet as pq

    root, _ = digits_run
    (tmp_path / "bad.png").write_bytes(b"not a png")
    files = sorted((root / "val" / "3").glob("*.png"))[:12] + [tmp_path / "bad.png"] + \
        sorted((root / "val" / "8").glob("*.png"))[:12]
    common = ["--batch_size", "4", "--skip_bad", "--top_k", "10", "--output"]
    ranks_ok([root / "run", *files, *common, tmp_path / "one.jsonl", "--embeddings", tmp_path / "one.npy"], nproc=1,
             launcher=False, target="predict:main")
    ranks_ok([root / "run", *files, *common, tmp_path / "two.jsonl", "--embeddings", tmp_path / "two.parquet"],
             nproc=2, target="predict:main")
    rows, one = rows_of(tmp_path / "one.jsonl"), np.load(tmp_path / "one.npy")
    assert one.dtype == np.float32 and one.shape == (25, 512) and "embedding" not in rows[0]
    assert np.isnan(one[12]).all() and not np.isnan(np.delete(one, 12, axis=0)).any() and rows[12]["error"]
    probs = classified(root / "run", torch.from_numpy(np.delete(one, 12, axis=0)))
    table = [dict(zip(r["labels"], r["probs"])) for r in rows if r["labels"]]
    expected = torch.tensor([[row[str(c)] for c in range(10)] for row in table])
    assert torch.allclose(probs, expected, atol=2e-6)
    two = pq.read_table(tmp_path / "two.parquet").to_pydict()
    assert two["path"] == [str(f) for f in files] == [r["path"] for r in rows]
    assert two["embedding"][12] is None
    difference = np.abs(np.array([v for v in two["embedding"] if v is not None]) - np.delete(one, 12, axis=0))
    assert difference.max() <= 1e-4, difference.max()  # other batches: other float sums


def test_a_clips_vector_from_an_image_model_is_its_frames_mean_and_two_passes_give_their_mean():
    """TSN (an image model scoring a clip's frames): the clip's vector is the mean of its frames' pooled features, as
    the plain image model computes them; two forward passes for one batch (--tta flip) give the mean of the two."""
    from utils.models.features import Features
    from utils.models.libraries import build_model

    torch.manual_seed(0)
    names = ["a", "b", "c"]
    model = build_model("resnet18", num_classes=3, video=True, class_names=names).eval()
    image = build_model("resnet18", num_classes=3, class_names=names).eval()
    image.load_state_dict(model.state_dict())
    trunk = torch.nn.Sequential(*list(image.children())[:-1])  # everything before fc: the pooled features
    clips = torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(1))
    per_frame = lambda c: trunk(c.transpose(1, 2).reshape(8, 3, 32, 32)).flatten(1).view(2, 4, -1).mean(dim=1)
    with Features(model, "resnet18") as features, torch.no_grad():
        model(clips)
        one = features.take(2)
        model(clips)
        model(clips.flip(-1))
        both = features.take(2)
        assert torch.allclose(one, per_frame(clips), atol=1e-5)
        assert torch.allclose(both, (per_frame(clips) + per_frame(clips.flip(-1))) / 2, atol=1e-5)
        assert not torch.allclose(one, both, atol=1e-3)


@pytest.mark.slow
def test_a_named_layer_is_embedded_flattened_and_a_wrong_name_is_one_line(digits_run, tmp_path, capsys):
    import numpy as np

    import predict

    root, _ = digits_run
    files = sorted((root / "val" / "5").glob("*.png"))[:3]
    pooled = predict.main([str(root / "run"), *map(str, files), "--embeddings", str(tmp_path / "pool.npy"),
                           "--embedding_layer", "avgpool", "--num_workers", "0"])
    default = predict.main([str(root / "run"), *map(str, files), "--embeddings", str(tmp_path / "fc.npy"),
                            "--num_workers", "0"])
    assert np.array_equal(np.load(tmp_path / "pool.npy"), np.load(tmp_path / "fc.npy"))  # avgpool feeds fc
    assert [r["probs"] for r in pooled] == [r["probs"] for r in default]
    predict.main([str(root / "run"), *map(str, files), "--embeddings", str(tmp_path / "map.npy"),
                  "--embedding_layer", "layer4", "--num_workers", "0"])
    assert np.load(tmp_path / "map.npy").shape == (3, 512 * 1 * 1)  # 32 px in: layer4's 1 x 1 map
    predict.main([str(root / "run"), *map(str, files), "--embeddings", str(tmp_path / "l3.npy"),
                  "--embedding_layer", "layer3.1", "--num_workers", "0"])
    assert np.load(tmp_path / "l3.npy").shape == (3, 256 * 2 * 2)
    capsys.readouterr()
    kept = (tmp_path / "pool.npy").read_bytes()
    for target, argv, line in (
            ("new.npy", ["--embedding_layer", "layer9"], "embedding_layer: resnet18 has no layer 'layer9' (did you "
                                                         "mean"),
            ("pool.npy", [], "pool.npy exists; pass --overwrite to replace it")):
        with pytest.raises(SystemExit) as e:
            predict.main([str(root / "run"), *map(str, files), "--embeddings", str(tmp_path / target), *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and line in err[0], err
    assert not (tmp_path / "new.npy").exists() and (tmp_path / "pool.npy").read_bytes() == kept
    for argv, line in ((["--embeddings", "x.csv"], "must end in .npy or .parquet"),
                       (["--embedding_layer", "fc"], "add --embeddings FILE")):
        with pytest.raises(SystemExit) as e:
            predict.get_args([str(root / "run"), str(files[0]), *argv])
        assert e.value.code == 2 and line in capsys.readouterr().err


def test_an_image_folder_runs_files_are_read_as_its_validation_reads_them(tmp_path):
    """predict.py on a folder run (crop_pct 0.8: resize the short side to 20, centre crop 16) gives each file the
    pixels its validation set gives it, bit for bit; a train transform (random crop, flip) would not."""
    from conftest import make_folder

    from utils.config.options import flat_namespace, parse
    from utils.config.settings import datasets_for
    from utils.data.sources.image_files import load_splits
    from utils.inference import eval_dataset
    from utils.run.trained import trained_run

    for split in ("tr", "va"):
        make_folder(tmp_path / split, {"cat": 3, "dog": 3}, size=(40, 30), noise=60)
    settings = parse(["--train_dir", str(tmp_path / "tr"), "--val_dir", str(tmp_path / "va"), "--image_size", "16",
                      "--crop_pct", "0.8"])
    args = flat_namespace(settings)
    _, val, _, _ = datasets_for(args)
    paths = [image["path"] for image in load_splits(args)[1].data.column("image").to_pylist()]
    files, _ = eval_dataset(trained_run(settings, ["cat", "dog"]), paths)
    assert len(files) == len(val) == 6
    for i in range(6):
        assert files[i]["pixel_values"].shape == (3, 16, 16)
        assert torch.equal(files[i]["pixel_values"], val[i]["pixel_values"]), paths[i]
    # and what its model/config.json tells a user of the folder to feed the model: that eval input
    from utils.reporting.model_folder import input_config

    assert input_config(settings.input) == {"image_size": 16, "resize": 20, "interpolation": "bilinear",
                                  "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


@pytest.mark.slow
def test_the_model_folder_loads_with_torchvision_alone(digits_run):
    import torchvision
    from safetensors.torch import load_file

    root, _ = digits_run
    folder = root / "run" / "model"
    config = json.loads((folder / "config.json").read_text())
    model = torchvision.models.get_model(config["architecture"], num_classes=config["num_classes"],
                                         **config["builder_options"])
    model.load_state_dict(load_file(folder / "model.safetensors"))
    ema = load_file(root / "run" / "model_ema.safetensors")  # EMA on: the folder holds the EMA weights
    assert all(torch.equal(v, ema[k]) for k, v in model.state_dict().items())
    assert config["labels"] == [str(d) for d in range(10)]
    assert config["input"] == {"image_size": 32, "resize": 32, "interpolation": "bilinear",  # digits: no crop
                               "mean": [0.306, 0.306, 0.306], "std": [0.324, 0.324, 0.324]}


@pytest.mark.slow
def test_onnx_export_matches_pytorch(digits_run, tmp_path, capsys):
    import numpy as np
    import onnxruntime

    import predict
    from utils.inference import EvalGraph, load_run

    root, _ = digits_run
    path = tmp_path / "model.onnx"
    predict.main([str(root / "run"), "--export_onnx", str(path)])
    assert "max abs diff" in capsys.readouterr().out
    from utils.data.transforms.batch import BatchInput

    run, model = load_run(root / "run")
    inp = run.input
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (1, 5):  # a dynamic batch
        pixels = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            expected = EvalGraph(model, inp).eval()(pixels).numpy()
            # what training and validation fed the model (utils/data/transforms/batch.py): the graph normalises alike
            # (up to the rounding of x / 255 against to_dtype's scaling)
            normalised = EvalGraph(torch.nn.Identity(), inp)(pixels)
            assert (normalised - BatchInput(inp.mean_std)(pixels)).abs().max() <= 1e-6 and normalised.std() > 0.5
            trained_path = model(BatchInput(inp.mean_std)(pixels)).numpy()
        got = session.run(None, {"pixels": pixels.numpy()})[0]
        assert got.shape == (n, 10) and np.abs(got - expected).max() <= 1e-4
        assert np.abs(got - trained_path).max() <= 1e-4
    with pytest.raises(SystemExit):  # kept, not overwritten
        predict.main([str(root / "run"), "--export_onnx", str(path)])


@pytest.mark.slow
def test_predict_help_runs_without_a_run():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "predict.py"), "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--export_onnx" in proc.stdout  # the runbook is the help


def test_push_to_hub_offline_is_one_line_and_keeps_every_local_file(tmp_path, capsys):
    from conftest import TINY, main_fails, read_json

    out = tmp_path / "run"
    argv = [*TINY, "--epochs", "1", "--warmup_epochs", "0", "--output_dir", str(out), "--push_to_hub", "someone/tiny"]
    code, err = main_fails(argv, capsys)
    err = err.strip().splitlines()
    assert code == 2 and err[-1].startswith("train_classification.py: error: push_to_hub: could not "
                                            "upload") and "hf upload someone/tiny" in err[-1]
    results = read_json(out / "results.json")
    card = (out / "model" / "README.md").read_text()
    assert (out / "model" / "model.safetensors").is_file() and (out / "model.safetensors").is_file()
    assert f"| val top-1 | {results['val_top1']:.4f} |" in card and "--push_to_hub someone/tiny" in card


@pytest.fixture(scope="module")
def video_run(videos, tmp_path_factory):
    """A tiny transformers VideoMAE (a config-only folder: no download) trained 2 epochs on the `videos`
    fixture's 4-frame 16x16 clips, with an EMA, tested with 3 clips x 2 crops."""
    from transformers import VideoMAEConfig, VideoMAEForVideoClassification

    import train_classification

    root = tmp_path_factory.mktemp("predict_video")
    config = VideoMAEConfig(image_size=16, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=32,
                            num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, num_labels=2)
    VideoMAEForVideoClassification(config).save_pretrained(root / "videomae")
    results = train_classification.main([
        "--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--model", f"hf/{root / 'videomae'}",
        "--image_size", "16", "--clip_len", "4", "--frame_interval", "2", "--batch_size", "2", "--epochs", "2",
        "--warmup_epochs", "0.5", "--optimizer", "adamw", "--lr", "0.002", "--weight_decay", "0.05",
        "--num_workers", "0", "--test_clips", "3", "--test_crops", "2", "--model_ema", "--model_ema_decay", "0.9",
        "--no-model_ema_warmup", "--output_dir", str(root / "run")])
    return root, results


def nll(rows):
    """The mean negative log-likelihood of each row's class folder, from its (all-class) probabilities."""
    import math

    true = [os.path.basename(os.path.dirname(r["path"])) for r in rows]
    return sum(-math.log(max(dict(zip(r["labels"], r["probs"]))[t], 1e-12)) for r, t in zip(rows, true)) / len(rows)


@pytest.mark.slow
def test_predict_on_a_video_run_reproduces_its_val_and_multi_view_figures(video_run, videos, tmp_path):
    """The val clip of each file gives the run's val top-1 and loss; --multi_view (3 clips x 2 crops,
    under 2 processes: 15 items, padded) its video top-1 and loss, rows in input order; a folder of
    PNG frames is a video, scored like the file it came from."""
    import predict
    from utils.data.decoding.video import read_video_file

    root, results = video_run
    print({k: results[k] for k in ("val_top1", "val_loss", "video_top1", "video_loss")})
    assert (results["test_clips"], results["test_crops"], results["test_clips_scored"]) == (3, 2, 15)
    assert {"video_ema_top1", "video_ema_loss", "clip_ema_top1"} <= set(results)  # the EMA's multi-view test too
    assert results["val_loss"] < 2 and results["video_loss"] < 2  # probabilities far from 0 and 1: a fair test
    files = sorted((videos / "va").glob("*/*.mp4"))
    rows = predict.main([str(root / "run"), str(videos / "va"), "--top_k", "2", "--num_workers", "1"])
    assert [r["path"] for r in rows] == [str(f) for f in files]
    assert sum(r["labels"][0] == os.path.basename(os.path.dirname(r["path"])) for r in rows) == \
        round(results["val_top1"] * 5)
    assert abs(nll(rows) - results["val_loss"]) < 1e-4 * max(1, results["val_loss"])

    out = tmp_path / "views.jsonl"
    ranks_ok([root / "run", videos / "va", "--multi_view", "--top_k", "2", "--batch_size", "2", "--output", out],
             nproc=2, target="predict:main")
    views = rows_of(out)
    assert [r["path"] for r in views] == [str(f) for f in files]
    assert sum(r["labels"][0] == os.path.basename(os.path.dirname(r["path"])) for r in views) == \
        round(results["video_top1"] * 5)
    assert abs(nll(views) - results["video_loss"]) < 1e-4 * max(1, results["video_loss"])
    assert views != rows  # 6 views averaged are not the one val clip
    # the EMA's weights (which model/ holds): the run scored their views too, and predict --ema agrees
    ema_views = predict.main([str(root / "run"), str(videos / "va"), "--multi_view", "--ema", "--top_k", "2",
                              "--num_workers", "0"])
    assert sum(r["labels"][0] == os.path.basename(os.path.dirname(r["path"])) for r in ema_views) == \
        round(results["video_ema_top1"] * 5)
    assert abs(nll(ema_views) - results["video_ema_loss"]) < 1e-4 * max(1, results["video_ema_loss"])
    assert abs(results["video_ema_loss"] - results["video_loss"]) > 1e-3  # two sets of weights, two figures

    from torchvision.io import write_png

    frames = read_video_file(str(files[0]), lambda n: list(range(n)))
    folder = tmp_path / "frames" / "left" / "clip0"
    folder.mkdir(parents=True)
    for t, frame in enumerate(frames):
        write_png(frame, str(folder / f"img_{t:05d}.png"))
    again = predict.main([str(root / "run"), str(tmp_path / "frames"), "--top_k", "2", "--num_workers", "0"])
    assert [r["path"] for r in again] == [str(folder)]
    assert again[0]["labels"] == rows[0]["labels"]
    assert torch.allclose(torch.tensor(again[0]["probs"]), torch.tensor(rows[0]["probs"]), atol=2e-6)


@pytest.mark.slow
def test_a_video_runs_embeddings_are_what_its_transformers_classifier_reads(video_run, videos, tmp_path):
    """A transformers VideoMAE: the vector is what its `classifier` reads (after its fc_norm); --multi_view averages
    the views' vectors as it averages their probabilities."""
    import numpy as np

    import predict

    root, _ = video_run
    rows = predict.main([str(root / "run"), str(videos / "va"), "--top_k", "2", "--num_workers", "0",
                         "--embeddings", str(tmp_path / "clip.npy")])
    vectors = torch.from_numpy(np.load(tmp_path / "clip.npy"))
    assert vectors.shape == (5, 32)
    expected = torch.tensor([[dict(zip(r["labels"], r["probs"]))[c] for c in ("left", "right")] for r in rows])
    assert torch.allclose(classified(root / "run", vectors), expected, atol=2e-6)
    predict.main([str(root / "run"), str(videos / "va"), "--multi_view", "--num_workers", "0", "--batch_size", "2",
                  "--embeddings", str(tmp_path / "views.npy")])
    views = np.load(tmp_path / "views.npy")
    assert views.shape == (5, 32) and not np.allclose(views, vectors.numpy(), atol=1e-4)
    # by hand: each of the 3 clips x 2 crops of a video through the model alone, their vectors averaged
    from utils.data.transforms.batch import BatchInput
    from utils.inference import eval_dataset, load_run, list_inputs
    from utils.models.features import Features
    from utils.run.trained import unwrapped

    run, model = load_run(root / "run")
    dataset, clips = eval_dataset(run, list_inputs([videos / "va"], video=True), multi_view=True)
    normalise = BatchInput(run.input.mean_std, pixel_max=run.input.pixel_max)
    with Features(unwrapped(model), run.model) as features, torch.no_grad():
        each = []
        for i in range(len(dataset)):
            crops = dataset[i]["pixel_values"]  # (crops, C, T, H, W)
            model(normalise(crops))
            each.append(features.take(len(crops)))
    expected = torch.stack(each).view(5, clips * 2, -1).mean(dim=1)
    assert clips == 3 and torch.allclose(torch.from_numpy(views), expected, atol=1e-5)


@pytest.mark.slow
def test_a_video_run_exports_to_onnx_and_its_model_folder_loads_with_transformers(video_run, tmp_path):
    import numpy as np
    import onnxruntime
    from transformers import AutoModelForVideoClassification

    import predict
    from utils.inference import EvalGraph, load_run

    root, _ = video_run
    path = tmp_path / "video.onnx"
    predict.main([str(root / "run"), "--export_onnx", str(path), "--ema"])

    run, model = load_run(root / "run", ema=True)  # model/ holds the EMA's weights
    inp, names = run.input, run.classes
    clips = torch.randint(0, 256, (3, 3, 4, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = EvalGraph(model, inp).eval()(clips)
        normalised = EvalGraph(torch.nn.Identity(), inp)(clips)
        loaded = AutoModelForVideoClassification.from_pretrained(root / "run" / "model").eval()
        theirs = loaded(pixel_values=normalised.transpose(1, 2)).logits  # transformers' clips: (B, T, C, H, W)
    got = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"pixels": clips.numpy()})[0]
    assert got.shape == (3, 2) and np.abs(got - expected.numpy()).max() <= 1e-4
    assert torch.equal(theirs, expected) and loaded.config.id2label == dict(enumerate(names))


@pytest.mark.slow
def test_a_video_run_is_used_where_its_training_data_is_not(video_run, videos, tmp_path):
    """The run folder copied to a machine without its training videos (its config.yaml names folders that do not
    exist there): predict.py, --export_onnx and a --teacher read what the run recorded, the same rows as on the
    machine it trained on."""
    import shutil

    import predict
    import train_classification

    root, _ = video_run
    moved = tmp_path / "moved"
    shutil.copytree(root / "run", moved)
    config = moved / "config.yaml"
    config.write_text(config.read_text().replace(str(videos), str(tmp_path / "gone")))
    assert str(tmp_path / "gone") in config.read_text()
    here = predict.main([str(root / "run"), str(videos / "va"), "--top_k", "2", "--num_workers", "0"])
    there = predict.main([str(moved), str(videos / "va"), "--top_k", "2", "--num_workers", "0"])
    assert there == here
    views = predict.main([str(moved), str(videos / "va"), "--multi_view", "--top_k", "2", "--num_workers", "0"])
    assert len(views) == 5 and views != there
    predict.main([str(moved), "--export_onnx", str(tmp_path / "m.onnx")])
    assert (tmp_path / "m.onnx").stat().st_size > 0
    results = train_classification.main([
        "--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--model", f"hf/{root / 'videomae'}",
        "--image_size", "16", "--clip_len", "4", "--frame_interval", "2", "--batch_size", "2", "--epochs", "1",
        "--max_train_steps", "1", "--num_workers", "0", "--teacher", str(moved), "--output_dir", str(tmp_path / "s")])
    assert results["global_step"] == 1
    # A run folder written before runs recorded run.json (config.yaml only): read as those versions read it
    (moved / "run.json").unlink()
    config.write_text(config.read_text().replace(str(tmp_path / "gone"), str(videos)))
    assert predict.main([str(moved), str(videos / "va"), "--top_k", "2", "--num_workers", "0"]) == here
