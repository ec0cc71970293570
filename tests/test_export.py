"""export.py: every format written, run by its own runtime and checked against the PyTorch model over the whole
validation split; the record's figures recomputed here from the two models' outputs; the same figures on two
processes; the metadata each runtime reads back; predict.py --backend; the docs' onnxruntime-only example; refusals."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SMALL_MODEL, reset_accelerate_state, run_main
from ranks import ranks_ok

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("onnx", "onnx_fp16", "onnx_int8", "openvino", "openvino_int8", "pt2")


def export_main(argv):
    """export.py in this process (a 1-process launch): its record; Accelerate's singletons reset after."""
    import export

    try:
        return export.main([str(a) for a in argv])
    finally:
        reset_accelerate_state()


def export_fails(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        export_main(argv)
    return stopped.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A 2-epoch digits run of SMALL_MODEL (good, not perfect: int8 may disagree somewhere), and its 360 val images
    as <class>/<n>.png (lossless: the run's own pixels)."""
    from utils.data.sources.digits import load_digits_dataset

    root = tmp_path_factory.mktemp("export")
    run_main(["--model", SMALL_MODEL, "--epochs", "2", "--num_workers", "0", "--no_plots",
              "--output_dir", root / "run"])
    for i, row in enumerate(load_digits_dataset()["validation"]):
        (root / "val" / str(row["label"])).mkdir(parents=True, exist_ok=True)
        row["image"].save(root / "val" / str(row["label"]) / f"{i:04d}.png")
    return root


@pytest.fixture(scope="module")
def exports(digits):
    """{format: its record}, each exported once to digits/run/export/ (the default place)."""
    return {name: export_main([digits / "run", "--format", name, "--num_workers", "0", "--timing_seconds", "0"])
            for name in FORMATS}


def reference(run_dir, path):
    """(PyTorch probabilities, the export's probabilities, labels) of every val sample, computed here apart from
    export.py: the run's model and the file, each on the val pixels, through each runtime's own API."""
    import onnxruntime
    import openvino

    from utils.evaluation.tasks import kind_named
    from utils.export.graph import EvalGraph
    from utils.inference import load_run
    from utils.run.trained import read_settings

    run, model = load_run(run_dir)
    task = kind_named(run.label_kind).of(len(run.classes))
    settings = read_settings(run_dir / "config.yaml")
    _, val, _, _ = settings.source.datasets(settings.data, run.input)
    items = [val[i] for i in range(len(val))]
    pixels = torch.stack([item["pixel_values"] for item in items])
    labels = torch.stack([torch.as_tensor(item["labels"]) for item in items])
    with torch.no_grad():
        eager = EvalGraph(model, run.input, task).eval()(pixels)
    if path.suffix == ".onnx":
        out = onnxruntime.InferenceSession(str(path)).run(None, {"pixels": pixels.numpy()})[0]
    elif path.suffix == ".xml":
        core = openvino.Core()
        hint = {} if "int8" in path.name else {"INFERENCE_PRECISION_HINT": "f32"}  # fp32 asked for, as export.py does
        out = core.compile_model(core.read_model(str(path)), "CPU", hint)(pixels.numpy())[0]
    else:
        out = torch._inductor.aoti_load_package(str(path))(pixels).numpy()
    soft = (lambda t: t.softmax(dim=1)) if run.label_kind == "single_label" else (lambda t: t)
    return soft(eager.float()), soft(torch.from_numpy(out).float()), labels


@pytest.mark.parametrize("name", FORMATS)
def test_each_format_is_checked_on_every_validation_image_and_its_record_holds_the_figures_recomputed(
        exports, digits, name):
    record = exports[name]
    path = digits / "run" / "export" / record["file"]
    eager, exported, labels = reference(digits / "run", path)
    agree = eager.argmax(dim=1) == exported.argmax(dim=1)
    assert record["samples"] == 360 == len(labels)
    assert record["scored"] == "top1"
    assert record["pytorch"] == pytest.approx(float((eager.argmax(dim=1) == labels).double().mean()), abs=1e-12)
    assert record["export"] == pytest.approx(float((exported.argmax(dim=1) == labels).double().mean()), abs=1e-12)
    assert record["agreement"] == pytest.approx(float(agree.double().mean()), abs=1e-12)
    assert record["disagreeing"] == int((~agree).sum())
    assert record["first_disagreeing"] == (~agree).nonzero().flatten()[:20].tolist()
    assert record["max_probability_difference"] == pytest.approx(float((eager - exported).abs().max()), rel=0.05,
                                                                 abs=1e-7)
    sizes = sum(f.stat().st_size for f in (path, path.with_suffix(".bin")) if f.exists())
    assert record["bytes"] == sizes > 10_000
    assert record["passed"] == (record["agreement"] >= record["min_agreement"])
    assert record["min_agreement"] == {"fp32": 0.999, "fp16": 0.995, "int8": 0.98}[record["precision"]]
    assert set(record["images_per_second"]) == {"1", "32"}
    assert all(v > 0 for pair in record["images_per_second"].values() for v in pair.values())
    if record["precision"] == "fp32":  # the goals: the same answers, probabilities within 1e-4
        assert record["agreement"] == 1.0 and record["max_probability_difference"] <= 1e-4 and record["passed"]
    if record["precision"] == "int8":  # really quantized: not the fp32 probabilities, a smaller file
        assert record["max_probability_difference"] > 1e-4
        assert record["bytes"] < exports[name.split("_")[0]]["bytes"] / 2
        assert record["calibration"] == {"samples": 300, "seed": 0, "accuracy_control": None}
    saved = json.loads((path.with_name(f"{path.stem}.parity.json")).read_text())
    assert saved == record


@pytest.mark.parametrize("name", FORMATS)
def test_the_file_carries_what_a_user_needs_in_its_formats_own_metadata(exports, digits, name):
    from utils.inference import read_run

    run = read_run(digits / "run")
    path = digits / "run" / "export" / exports[name]["file"]
    if path.suffix == ".onnx":
        import onnxruntime

        said = onnxruntime.InferenceSession(str(path)).get_modelmeta().custom_metadata_map
    elif path.suffix == ".xml":
        import openvino

        model = openvino.Core().read_model(str(path))
        said = {key: model.get_rt_info(["model_info", key]).astype(str) for key in model.get_rt_info()["model_info"]}
    else:
        said = torch._inductor.aoti_load_package(str(path)).get_metadata()
    assert json.loads(said["classes"]) == run.classes == [str(i) for i in range(10)]
    assert json.loads(said["input_shape"]) == ["N", 3, 32, 32] and said["input_dtype"] == "uint8"
    assert said["bands"] == "3" and said["crop_size"] == "32" and said["resize_shorter_side"] == "32"
    assert json.loads(said["mean"]) == pytest.approx(list(run.input.mean_std[0]))
    assert json.loads(said["std"]) == pytest.approx(list(run.input.mean_std[1]))
    assert said["format"] == name and said["output"] == "logits" and said["label_kind"] == "single_label"
    assert json.loads(said["temperature"]) == 1.0 and json.loads(said["thresholds"]) is None


def test_two_processes_give_the_same_figures_as_one(digits, tmp_path):
    """The check sharded over two processes (odd shards: 180 each at batch 7, padded), gathered exactly: the figures of
    one process, launched alike (the same threads a process, the same batches of 7)."""
    records = {}
    for nproc in (1, 2):
        out = tmp_path / f"on_{nproc}.onnx"
        ranks_ok([digits / "run", "--format", "onnx_int8", "--output", out, "--num_workers", "1", "--batch_size", "7",
                  "--timing_seconds", "0", "--min_agreement", "0"], nproc=nproc, target="export:main")
        records[nproc] = json.loads((tmp_path / f"on_{nproc}.parity.json").read_text())
    same = ("samples", "pytorch", "export", "agreement", "disagreeing", "first_disagreeing", "bytes",
            "max_probability_difference")
    assert records[1]["samples"] == 360
    assert {k: records[2][k] for k in same} == {k: records[1][k] for k in same}


def test_a_failed_check_exits_1_with_the_figures_and_keeps_the_file_named_failed(digits, tmp_path, monkeypatch,
                                                                                 capsys):
    """A runtime that answers one sample otherwise (its top class moved): agreement 359/360 < 0.999."""
    from utils.export import formats

    real = formats.OnnxRunner.__call__
    calls = []

    def one_wrong(self, pixels):
        out = real(self, pixels)
        if not calls:
            out = out.copy()
            out[0] = out[0][::-1] * 10  # another class far ahead
        calls.append(len(pixels))
        return out

    monkeypatch.setattr(formats.OnnxRunner, "__call__", one_wrong)
    out = tmp_path / "model.onnx"
    with pytest.raises(SystemExit) as stopped:
        export_main([digits / "run", "--format", "onnx", "--output", out, "--num_workers", "0", "--timing_seconds",
                     "0"])
    printed = capsys.readouterr().out
    assert stopped.value.code == 1
    assert not out.exists() and (tmp_path / "model.failed.onnx").is_file()
    record = json.loads((tmp_path / "model.failed.parity.json").read_text())
    assert record["passed"] is False and record["disagreeing"] == 1 and record["first_disagreeing"] == [0]
    assert record["agreement"] == pytest.approx(359 / 360) and record["file"] == "model.failed.onnx"
    assert "agreement 0.9972 (1 differ)" in printed and "FAILED" in printed
    # and an explicit, looser --min_agreement lets the same answers pass
    monkeypatch.setattr(formats.OnnxRunner, "__call__", one_wrong)
    calls.clear()
    record = export_main([digits / "run", "--format", "onnx", "--output", out, "--num_workers", "0",
                          "--timing_seconds", "0", "--min_agreement", "0.99", "--overwrite"])
    assert record["passed"] and out.is_file() and record["min_agreement"] == 0.99
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.parity.json"]  # the failed one gone
    # the floor itself passes: an agreement equal to --min_agreement
    calls.clear()
    record = export_main([digits / "run", "--format", "onnx", "--output", out, "--num_workers", "0",
                          "--timing_seconds", "0", "--min_agreement", repr(359 / 360), "--overwrite"])
    assert record["agreement"] == 359 / 360 and record["passed"]


def test_predict_with_an_export_writes_the_rows_of_the_pytorch_path(exports, digits, tmp_path):
    import predict

    rows = {}
    for backend in (None, "onnx.onnx", "openvino.xml", "pt2.pt2", exports["onnx_int8"]["file"]):
        extra = ["--backend", digits / "run" / "export" / backend] if backend else []
        rows[backend] = predict.main([str(a) for a in (digits / "run", digits / "val", "--num_workers", "0", *extra)])
        reset_accelerate_state()
    eager = rows[None]
    for backend in ("onnx.onnx", "openvino.xml", "pt2.pt2"):
        assert [r["path"] for r in rows[backend]] == [r["path"] for r in eager]
        assert [r["labels"][0] for r in rows[backend]] == [r["labels"][0] for r in eager]
        assert max(abs(a - b) for r, s in zip(rows[backend], eager) for a, b in zip(r["probs"], s["probs"])) <= 1e-4
    # the int8 file's rows: its own answers, as export.py counted them
    int8 = exports["onnx_int8"]
    differ = sum(r["labels"][0] != s["labels"][0] for r, s in zip(rows[int8["file"]], eager))
    assert differ == int8["disagreeing"]


def test_predict_refuses_an_export_of_another_run_and_options_an_export_cannot_take(exports, digits, tmp_path,
                                                                                  capsys):
    import predict

    other = tmp_path / "other"
    other.mkdir()
    for name in ("run.json", "config.yaml", "model.safetensors"):
        (other / name).write_bytes((digits / "run" / name).read_bytes())
    (other / "labels.json").write_text(json.dumps({str(i): f"c{i}" for i in range(10)}))
    with pytest.raises(SystemExit) as stopped:
        predict.main([str(other), str(digits / "val"), "--backend", str(digits / "run" / "export" / "onnx.onnx")])
    reset_accelerate_state()
    assert stopped.value.code == 2
    assert "is the export of another run (its classes or kind of labels differ)" in capsys.readouterr().err
    for extra in (["--ema"], ["--embeddings", str(tmp_path / "e.npy")]):
        with pytest.raises(SystemExit) as stopped:
            predict.main([str(digits / "run"), str(digits / "val"), "--backend",
                          str(digits / "run" / "export" / "onnx.onnx"), *extra])
        assert stopped.value.code == 2 and f"{extra[0]}: --backend runs an exported file" in capsys.readouterr().err


def test_the_docs_example_runs_with_onnxruntime_alone_and_answers_as_predict(exports, digits, tmp_path):
    """docs/export.md's example, as it stands there, in an interpreter where torch and this project cannot be
    imported."""
    import predict

    code = re.search(r"## Running an ONNX file without this project.*?```python\n(.*?)```",
                     (ROOT / "docs" / "export.md").read_text(), flags=re.S).group(1)
    (tmp_path / "example.py").write_text(code)
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'utils', 'torchvision'):\n"
        "            raise ImportError(f'{name} blocked: the example needs onnxruntime alone')\n"
        "sys.meta_path.insert(0, Block())\n")
    images = sorted((digits / "val").rglob("*.png"))[::45]
    rows = predict.main([str(digits / "run"), *map(str, images), "--num_workers", "0"])
    reset_accelerate_state()
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for image, row in zip(images, rows):
        done = subprocess.run([sys.executable, str(tmp_path / "example.py"), str(digits / "run" / "export" /
                                                                                    "onnx.onnx"), str(image)],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        label, prob = done.stdout.split()
        assert label == row["labels"][0] and float(prob) == pytest.approx(row["probs"][0], abs=1e-4)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    """A multi-label run (multi_digits: several digits an image) of SMALL_MODEL."""
    root = tmp_path_factory.mktemp("export_multi")
    run_main(["--dataset", "multi_digits", "--model", SMALL_MODEL, "--epochs", "2", "--max_train_samples", "400",
              "--max_val_samples", "101", "--num_workers", "0", "--no_plots", "--threshold", "0.4",
              "--output_dir", root / "run"])
    return root / "run"


def test_predict_with_a_multi_label_export_lists_the_labels_the_pytorch_path_lists(multi, tmp_path):
    import predict
    from utils.data.sources.multi_digits import load_multi_digits

    export_main([multi, "--format", "onnx", "--num_workers", "0", "--timing_seconds", "0", "--output",
                 tmp_path / "m.onnx"])
    val = load_multi_digits()["validation"]
    for i in range(40):
        val[i]["image"].save(tmp_path / f"{i:03d}.png")
    tiles = sorted(map(str, tmp_path.glob("*.png")))
    rows = {}
    for extra in ([], ["--backend", str(tmp_path / "m.onnx")]):
        rows[bool(extra)] = predict.main([str(multi), *tiles, "--num_workers", "0", "--top_k", "10", *extra])
        reset_accelerate_state()
    assert [r["predicted"] for r in rows[True]] == [r["predicted"] for r in rows[False]]
    assert any(r["predicted"] for r in rows[False])
    assert max(abs(a - b) for r, s in zip(rows[True], rows[False]) for a, b in zip(r["probs"], s["probs"])) <= 1e-4


@pytest.mark.parametrize("name", ["onnx", "openvino_int8"])
def test_a_multi_label_run_exports_its_probabilities_and_agrees_on_label_sets_at_its_threshold(multi, name):
    record = export_main([multi, "--format", name, "--num_workers", "0", "--timing_seconds", "0", "--min_agreement",
                          "0"])  # a short run's probabilities sit near its threshold: the figures, not the check
    path = multi / "export" / record["file"]
    eager, exported, targets = reference(multi, path)
    cut = 0.4
    agree = ((eager >= cut) == (exported >= cut)).all(dim=1)
    from utils.evaluation.multi_label_figures import multi_label_figures

    def mean_ap(probs):
        return multi_label_figures(probs.double().numpy(), targets.numpy().astype(bool), np.zeros(len(targets)),
                                   cut)["val_map"]

    assert record["scored"] == "map" and record["samples"] == 101
    assert record["agreement"] == pytest.approx(float(agree.double().mean()), abs=1e-12)
    assert record["pytorch"] == pytest.approx(mean_ap(eager), abs=1e-9)
    assert record["export"] == pytest.approx(mean_ap(exported), abs=1e-9)
    if name == "onnx":
        import onnxruntime

        said = onnxruntime.InferenceSession(str(path)).get_modelmeta().custom_metadata_map
        assert said["output"] == "probabilities" and json.loads(said["thresholds"]) == [0.4] * 10
        assert record["agreement"] == 1.0 and record["max_probability_difference"] <= 1e-4


def test_export_py_calibrates_on_the_training_split(digits, tmp_path, monkeypatch):
    """What export.py hands the calibration: the run's training split (1,437 digits), with its validation split only
    for the eval transform."""
    from utils.export import sample

    seen, real = [], sample.calibration

    def spy(train, val, *rest, **kw):
        seen.append((len(train), len(val)))
        return real(train, val, *rest, **kw)

    monkeypatch.setattr(sample, "calibration", spy)
    export_main([digits / "run", "--format", "onnx_int8", "--output", tmp_path / "m.onnx", "--num_workers", "0",
                 "--timing_seconds", "0", "--min_agreement", "0", "--calibration_samples", "16"])
    assert seen == [(1437, 360)]


def test_int8_calibration_draws_training_samples_by_seed_never_validation_ones(digits):
    from utils.export.sample import calibration
    from utils.inference import read_run
    from utils.run.trained import read_settings
    from utils.evaluation.tasks import kind_named

    run = read_run(digits / "run")
    settings = read_settings(digits / "run" / "config.yaml")
    train, val, _, _ = settings.source.datasets(settings.data, run.input)
    task = kind_named(run.label_kind).of(len(run.classes))
    train_pixels = {bytes(train.dataset.rows[i]["image"].tobytes()) for i in range(len(train))}
    val_pixels = {bytes(val.dataset.rows[i]["image"].tobytes()) for i in range(len(val))}
    first = calibration(train, val, task, 20, seed=0)
    again, other = calibration(train, val, task, 20, seed=0), calibration(train, val, task, 20, seed=1)
    assert sum(len(b) for b in first.batches) == 20 and first.held_out is None
    assert all(np.array_equal(a, b) for a, b in zip(first.batches, again.batches))
    assert not all(np.array_equal(a, b) for a, b in zip(first.batches, other.batches))
    from PIL import Image

    for batch in first.batches:  # each an unaugmented training image, none a validation one
        for pixels in batch:
            raw = Image.fromarray(pixels.transpose(1, 2, 0)).tobytes()
            assert raw in train_pixels and raw not in val_pixels
    held = calibration(train, val, task, 20, seed=0, accuracy_control=1.5)
    assert held.held_out.max_drop == 0.015
    calibrated = {p.tobytes() for b in held.batches for p in b}
    assert not calibrated & {p.tobytes() for b, _ in held.held_out.batches for p in b}


def test_refusals_are_one_line_and_leave_what_exists(exports, digits, tmp_path, capsys, monkeypatch):
    run = digits / "run"
    code, err = export_fails([run, "--format", "coreml"], capsys)
    assert code == 2 and "argument --format: invalid choice: 'coreml'" in err
    existing = run / "export" / "onnx.onnx"
    before = existing.read_bytes()
    code, err = export_fails([run, "--format", "onnx"], capsys)
    assert code == 2 and err.strip() == f"export.py: error: {existing} exists; pass --overwrite to replace it"
    assert existing.read_bytes() == before
    failed = tmp_path / "m.failed.onnx"  # an earlier export that failed its check is kept too
    failed.write_bytes(b"kept")
    code, err = export_fails([run, "--format", "onnx", "--output", tmp_path / "m.onnx"], capsys)
    assert code == 2 and f"{failed} exists; pass --overwrite" in err and failed.read_bytes() == b"kept"
    assert not (tmp_path / "m.onnx").exists()
    empty = tmp_path / "no_weights"
    empty.mkdir()
    for name in ("run.json", "config.yaml", "labels.json"):
        (empty / name).write_bytes((run / name).read_bytes())
    code, err = export_fails([empty, "--format", "onnx"], capsys)
    assert code == 2 and "model.safetensors does not exist" in err and len(err.strip().splitlines()) == 1
    assert not (empty / "export").exists()
    monkeypatch.setitem(sys.modules, "openvino", None)  # not installed
    code, err = export_fails([run, "--format", "openvino", "--output", tmp_path / "m.xml"], capsys)
    assert code == 2 and "needs openvino, not installed here: pip install -r requirements-export.txt" in err
    monkeypatch.undo()
    code, err = export_fails([run, "--format", "tensorrt"], capsys)
    assert code == 2 and "TensorRT builds engines for an NVIDIA GPU, and this machine has none" in err
    code, err = export_fails([run, "--format", "onnx", "--accuracy_control", "1"], capsys)
    assert code == 2 and "--accuracy_control: NNCF's accuracy-aware mode quantizes OpenVINO IR" in err
    code, err = export_fails([run, "--format", "onnx", "--output", tmp_path / "m.xml"], capsys)
    assert code == 2 and "must end in .onnx" in err


def test_a_model_a_format_cannot_hold_is_refused_naming_what_stopped_it(tmp_path):
    """A graph with data-dependent control flow: neither torch's exporter nor torch.export can trace it."""
    from utils.export.formats import FORMATS
    from utils.run.trained import RunError

    class Branchy(torch.nn.Module):
        def forward(self, pixels):
            x = pixels.float()
            return x.mean(dim=(2, 3)) if x.sum() > 0 else -x.mean(dim=(2, 3))

    example = torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8)
    line = Branchy.forward.__code__.co_firstlineno + 2  # the branch on the data
    for name, words in (("onnx", "ONNX cannot hold this model"), ("pt2", "torch.export cannot hold this model")):
        with pytest.raises(RunError) as refused:
            FORMATS[name].write(Branchy().eval(), example, tmp_path / f"m{FORMATS[name].suffix}", {"output": "logits"})
        said = str(refused.value)
        assert said.startswith(f"{words}: Could not guard on data-dependent expression") and "\n" not in said
        assert said.endswith(f'(at File "{__file__}", line {line}, in forward)'), said
        assert not (tmp_path / f"m{FORMATS[name].suffix}").exists()


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """A video run: SMALL_MODEL scoring each frame (TSN) of the moving digits' 8-frame clips, at 8 px."""
    root = tmp_path_factory.mktemp("export_video")
    run_main(["--dataset", "moving_digits", "--model", SMALL_MODEL, "--image_size", "8", "--epochs", "1",
              "--num_workers", "0", "--no_plots", "--output_dir", root / "run"])
    return root / "run"


def test_a_video_run_exports_its_clips_and_calibrates_int8_on_training_clips(video):
    """The clips' graph (N, C, T, H, W) checked over all 501 val clips; int8 calibrated on training clips read as
    validation reads its own (the centre clip, no augmentation)."""
    import onnxruntime

    from utils.export.sample import calibration
    from utils.evaluation.tasks import kind_named
    from utils.inference import read_run
    from utils.run.trained import read_settings

    record = export_main([video, "--format", "onnx", "--num_workers", "0", "--timing_seconds", "0"])
    assert record["samples"] == 501 and record["agreement"] == 1.0 and record["max_probability_difference"] <= 1e-4
    said = onnxruntime.InferenceSession(str(video / "export" / "onnx.onnx")).get_modelmeta().custom_metadata_map
    assert json.loads(said["input_shape"]) == ["N", 3, 8, 8, 8]
    int8 = export_main([video, "--format", "onnx_int8", "--num_workers", "0", "--timing_seconds", "0",
                        "--min_agreement", "0", "--calibration_samples", "40"])
    assert int8["samples"] == 501 and int8["max_probability_difference"] > 1e-4
    run = read_run(video)
    settings = read_settings(video / "config.yaml")
    train, val, _, _ = settings.source.datasets(settings.data, run.input)
    batches = calibration(train, val, kind_named(run.label_kind).of(len(run.classes)), 16, seed=3).batches
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(3))[:16].tolist()
    from utils.data.datasets.clips import VideoClips

    rows = train.dataset  # the training videos, read as validation reads its own: built here apart from the code
    centre = VideoClips(rows.frames, rows.labels, clip_len=val.clip_len, interval=val.interval, segments=val.segments,
                        transform=val.transform, shape=val.shape, targets=val.targets)
    expected = torch.stack([centre[i]["pixel_values"] for i in order]).numpy()
    assert np.array_equal(np.concatenate(batches), expected)
    val_clips = {val[i]["pixel_values"].numpy().tobytes() for i in range(len(val))}
    assert not {clip.tobytes() for clip in expected} & val_clips  # training clips, none of validation's


def test_a_run_of_bands_exports_their_raw_values_as_float32(tmp_path):
    """spectral_digits: 6 bands of 16-bit values; the graph takes them raw (float32) and divides by pixel_max."""
    import onnxruntime

    run_main(["--dataset", "spectral_digits", "--model", SMALL_MODEL, "--epochs", "1", "--num_workers", "0",
              "--no_plots", "--output_dir", tmp_path / "run"])
    record = export_main([tmp_path / "run", "--format", "onnx", "--num_workers", "0", "--timing_seconds", "0"])
    assert record["samples"] == 360 and record["agreement"] == 1.0 and record["max_probability_difference"] <= 1e-4
    session = onnxruntime.InferenceSession(str(tmp_path / "run" / "export" / "onnx.onnx"))
    said = session.get_modelmeta().custom_metadata_map
    assert said["bands"] == "6" and said["input_dtype"] == "float32" and json.loads(said["input_shape"])[1] == 6
    assert json.loads(said["pixel_max"]) > 255 and session.get_inputs()[0].type == "tensor(float)"


def test_accuracy_control_keeps_the_held_out_score_within_the_drop_asked(exports, digits, tmp_path):
    """NNCF's accuracy-aware mode with a drop of 0.01 points: on the held-out training images it scored its choices
    on (none of calibration's), the IR's top-1 is at most that below the fp32 model's, recomputed here; it keeps
    at most as many quantized operations as the plain int8 IR (how many depends on the run: a model trained on one
    thread or two differs, and NNCF may keep none)."""
    import openvino

    from utils.export.graph import EvalGraph
    from utils.export.sample import calibration
    from utils.evaluation.tasks import kind_named
    from utils.inference import load_run
    from utils.run.trained import read_settings

    out = tmp_path / "controlled.xml"
    record = export_main([digits / "run", "--format", "openvino_int8", "--output", out, "--num_workers", "0",
                          "--timing_seconds", "0", "--calibration_samples", "100", "--accuracy_control", "0.01",
                          "--min_agreement", "0"])
    assert record["calibration"] == {"samples": 100, "seed": 0, "accuracy_control": 0.01}
    run, model = load_run(digits / "run")
    task = kind_named(run.label_kind).of(len(run.classes))
    settings = read_settings(digits / "run" / "config.yaml")
    train, val, _, _ = settings.source.datasets(settings.data, run.input)
    held_out = calibration(train, val, task, 100, seed=0, accuracy_control=0.01).held_out
    pixels = torch.from_numpy(np.concatenate([p for p, _ in held_out.batches]))
    labels = torch.cat([y for _, y in held_out.batches])
    core = openvino.Core()

    def score(path):  # compiled as NNCF measures both: the plugin's defaults (bfloat16 float parts on such CPUs)
        compiled = core.compile_model(core.read_model(str(path)), "CPU")
        return task.score(torch.from_numpy(compiled(pixels.numpy())[0]).softmax(dim=1), labels)

    reference = score(digits / "run" / "export" / exports["openvino"]["file"])  # the fp32 IR NNCF started from
    with torch.no_grad():
        eager = task.score(EvalGraph(model, run.input, task).eval()(pixels).softmax(dim=1), labels)
    assert abs(reference - eager) <= 0.02  # the same model
    assert score(out) >= reference - 0.0001

    def fake_quantize(path):
        return sum(op.get_type_name() == "FakeQuantize" for op in core.read_model(str(path)).get_ops())

    plain = digits / "run" / "export" / exports["openvino_int8"]["file"]
    assert fake_quantize(out) <= fake_quantize(plain)  # none at all where every int8 layer cost a held-out image


def test_a_write_that_fails_on_the_main_process_stops_every_process_with_its_line(digits, tmp_path):
    """Two processes, the main one's converter refusing the model: the other is told, not left waiting for the file;
    both exit 2 with the line, nothing written."""
    from ranks import run_ranks

    job = run_ranks([digits / "run", "--format", "onnx", "--output", tmp_path / "m.onnx", "--num_workers", "0",
                     "--timing_seconds", "0"], nproc=2, target="helpers.export_fails:main", timeout=120)
    assert [r.returncode for r in job.ranks] == [2, 2] and not job.timed_out, job.report()
    for rank in job.ranks:
        assert "export.py: error: ONNX cannot hold this model: a layer it has no translation for" in rank.stderr
    assert not list(tmp_path.iterdir())


def test_onnx_int8_is_qdq_with_weights_per_channel_and_uint8_activations(exports, digits):
    import onnx

    model = onnx.load(str(digits / "run" / "export" / exports["onnx_int8"]["file"]))
    inits = {i.name: i for i in model.graph.initializer}
    dequantized = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    weights = [n for n in dequantized if inits.get(n.input[0]) is not None
               and inits[n.input[0]].data_type == onnx.TensorProto.INT8 and len(inits[n.input[0]].dims) == 4]
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(weights) == len(convs) > 0  # every convolution's weights int8
    assert all(len(inits[n.input[1]].dims) == 1 and inits[n.input[1]].dims[0] == inits[n.input[0]].dims[0] > 1
               for n in weights)  # a scale per output channel
    activations = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert activations and all(inits[n.input[2]].data_type == onnx.TensorProto.UINT8 for n in activations)


def test_a_calibrated_runs_temperature_is_inside_the_graph_and_in_the_metadata(tmp_path):
    """--calibrate: the exported logits are the model's divided by the fitted temperature, which the file states."""
    import onnxruntime

    from utils.export.graph import EvalGraph
    from utils.inference import load_run, read_run

    run_main(["--model", SMALL_MODEL, "--epochs", "1", "--calibrate", "--num_workers", "0", "--no_plots",
              "--output_dir", tmp_path / "run"])
    record = export_main([tmp_path / "run", "--format", "onnx", "--num_workers", "0", "--timing_seconds", "0"])
    run = read_run(tmp_path / "run")
    assert run.temperature != 1.0 and record["agreement"] == 1.0
    session = onnxruntime.InferenceSession(str(tmp_path / "run" / "export" / "onnx.onnx"))
    assert json.loads(session.get_modelmeta().custom_metadata_map["temperature"]) == run.temperature
    _, model = load_run(tmp_path / "run")
    pixels = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        raw = EvalGraph(model.model, run.input)(pixels)  # load_run's Tempered wraps the library's model
    assert np.abs(session.run(None, {"pixels": pixels.numpy()})[0] - raw.numpy() / run.temperature).max() <= 1e-4


def test_training_clips_are_read_as_validation_reads_its_own():
    """evaluated_like on clips (what int8 calibrates a video run on): the same videos give validation's item, the
    centre clip through the eval transform, whatever the training epoch; training itself draws other clips."""
    from utils.config.options import parse_args
    from utils.config.settings import input_for
    from utils.data.datasets.clips import ArrayFrames, VideoClips
    from utils.data.transforms.video import video_eval, video_train

    inp = input_for(parse_args(["--dataset", "moving_digits", "--image_size", "16", "--clip_len", "4",
                                "--frame_interval", "2"]))
    videos = ArrayFrames(np.random.default_rng(0).integers(0, 256, (3, 20, 24, 24, 3), dtype=np.uint8))
    common = dict(clip_len=inp.clip_len, interval=inp.frame_interval, segments=inp.num_segments,
                  shape=(3, inp.frames, inp.image_size, inp.image_size))
    train = VideoClips(videos, [0, 1, 2], transform=video_train(inp), seed=0, **common)
    val = VideoClips(videos, [0, 1, 2], transform=video_eval(inp), **common)
    seen = train.evaluated_like(val)
    train.epoch.fill_(3)
    for i in range(3):
        assert torch.equal(seen[i]["pixel_values"], val[i]["pixel_values"])
    assert not torch.equal(train[0]["pixel_values"], val[0]["pixel_values"])

