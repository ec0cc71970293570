"""Where the model fails, from the last validation's gathered results: top_losses.csv/.png, most_confused.csv, the
expected calibration error and calibration.png (utils/reporting/failures.py, utils/evaluation/calibration.py).

The session's reference weights (conftest.reference: 36 training images of 3 classes, 7 validation images) scored
with --eval_only on 1 process and on 2 (forked ranks, a worker each; 7 is odd, so the second process pads): the same
top losses, and they are the highest of a plain recomputation from the saved weights."""

import csv
import json
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, drawn, environment, read_json, resume_job, run_main
from ranks import ranks_ok

from helpers.browser import chromium


def test_the_ece_is_the_usual_weighted_gap_of_equal_width_bins():
    """Hand-computed on fixed scores: 15 bins of (b/15, (b+1)/15]; a bin's weight is its share of the samples."""
    from utils.evaluation.calibration import calibration_bins, expected_calibration_error

    confidence = torch.tensor([0.95, 0.95, 0.9, 0.5, 0.52, 0.19, 1.0, 0.06])
    correct = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1]).bool()
    bins = calibration_bins(confidence, correct)
    assert [b["count"] for b in bins] == [1, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 3]  # 1.0 in the last bin
    hand = (1 * abs(1 - 0.06) + 1 * abs(0 - 0.19) + 2 * abs(0.5 - 0.51) + 1 * abs(1 - 0.9)
            + 3 * abs(2 / 3 - (0.95 + 0.95 + 1.0) / 3)) / 8
    assert expected_calibration_error(bins) == pytest.approx(hand, abs=1e-7)  # float32 confidences
    assert expected_calibration_error(calibration_bins(torch.full((4,), 0.75), torch.tensor([1, 1, 1, 0]).bool())) \
        == pytest.approx(0.0, abs=1e-12)  # 75 % right at 75 % confidence: calibrated
    edges = calibration_bins(torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64), torch.ones(4).bool(), bins=4)
    assert [b["count"] for b in edges] == [1, 1, 1, 1]  # a bin holds its upper edge: (0, 1/4], (1/4, 1/2], ...


def test_validation_reports_the_ece_of_its_softmax_and_the_pairs_most_confused():
    from utils.evaluation.metrics import load_metrics
    from utils.evaluation.tasks import SingleLabel
    from utils.reporting.failures import most_confused

    torch.manual_seed(0)
    logits, labels = torch.randn(50, 4) * 3, torch.randint(0, 4, (50,))
    task = SingleLabel(load_metrics(), 4)
    figures = task.figures(task.fields(logits, labels))
    p = logits.softmax(dim=1)
    confidence, right = p.max(dim=1).values.numpy(), (p.argmax(dim=1) == labels).numpy()
    edges = np.linspace(0, 1, 16)
    hand = sum(abs(right[m].mean() - confidence[m].mean()) * m.sum() for m in
               ((confidence > lo) & (confidence <= hi) for lo, hi in zip(edges[:-1], edges[1:])) if m.any()) / 50
    assert figures["val_ece"] == pytest.approx(hand, abs=1e-6)
    rows = most_confused([[5, 2, 0], [0, 4, 3], [1, 0, 6]], ["a", "b", "c"])
    assert rows == [("b", "c", 3, 3 / 7), ("a", "b", 2, 2 / 7), ("c", "a", 1, 1 / 7)]


def top_losses(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_multi_label_top_loss_names_the_labels_missed_and_those_falsely_given():
    """Multi-label samples whose wrong labels are of both kinds: top_losses.csv's `missed` is the true labels not
    predicted (false negatives), `false` the predicted labels that are not true (false positives), "(none)" when
    there is none; the picture's titles say the same."""
    import io

    from utils.evaluation.tasks import task_for
    from utils.reporting.failures import highest_losses, top_losses_figure, top_losses_table

    class Tiles(list):  # a validation set that names its files
        names = ["a.png", "b.png", "c.png"]

    dataset = Tiles({"pixel_values": torch.full((3, 8, 8), 40 * i, dtype=torch.uint8)} for i in range(3))
    samples = {"index": [0, 1, 2], "label": [[0, 1], [2], []], "predicted": [[1, 3], [2], [0]],
               "probability": [[0.4, 0.9, 0.1, 0.7], [0.1, 0.2, 0.8, 0.3], [0.6, 0.1, 0.2, 0.3]],
               "loss": [2.5, 0.1, 1.0]}
    classes = ["cloud", "field", "road", "water"]
    picked = highest_losses(samples, 3)
    rows = list(csv.DictReader(io.StringIO(top_losses_table(samples, picked, classes, dataset, task_for(True, 4)))))
    assert [(r["file"], r["true"], r["predicted"], r["missed"], r["false"]) for r in rows] == [
        ("a.png", "cloud field", "field water", "cloud", "water"),  # cloud missed, water falsely given
        ("c.png", "(none)", "cloud", "(none)", "cloud"),
        ("b.png", "road", "road", "(none)", "(none)")]
    figure = top_losses_figure(samples, picked, classes, dataset, task_for(True, 4))
    titles = [text.get_text() for text in figure.axes[0].texts if "\nloss " in text.get_text()]  # one a sample
    assert [t.splitlines()[:2] for t in titles] == [["missed: cloud", "false: water"],
                                                    ["missed: (none)", "false: cloud"],
                                                    ["missed: (none)", "false: (none)"]]


@pytest.mark.parametrize("frames, per_row", [(0, 6), (8, 2)])
def test_top_losses_png_shows_each_sample_upright_in_its_cell_highest_loss_first_titled_above(frames, per_row,
                                                                                            tmp_path):
    """Samples of one colour each, their top rows another (a sample upside down would show): in top_losses.png each
    sample is a box of its colours, whole and upright, its aspect kept, highest loss first, row by row (6 images a
    row; a clip's strip of frames, 2), its title centred above it; no two boxes overlap."""
    from PIL import Image

    from utils.evaluation.tasks import task_for
    from utils.reporting.failures import highest_losses, top_losses_figure
    from utils.reporting.plots import save

    n, side = 7, 8
    body = [(30 * i + 10, 220 - 25 * i, 90) for i in range(n)]
    top = [(250 - 30 * i, 40, 20 * i + 5) for i in range(n)]
    shape = (3, frames, side, side) if frames else (3, side, side)
    dataset = []
    for i in range(n):
        pixels = torch.tensor(body[i], dtype=torch.uint8).reshape(3, *[1] * (len(shape) - 1)).expand(shape).clone()
        pixels[..., :2, :] = torch.tensor(top[i], dtype=torch.uint8).reshape(3, *[1] * (len(shape) - 1))
        dataset.append({"pixel_values": pixels})
    losses = [0.5, 3.0, 1.0, 2.5, 0.1, 2.0, 1.5]
    samples = {"index": list(range(n)), "label": [0] * n, "predicted": [1] * n, "probability": [0.9] * n,
               "true_probability": [0.1] * n, "loss": losses}
    picked = highest_losses(samples, n)
    figure = top_losses_figure(samples, picked, ["a", "b"], dataset, task_for(False, 2))
    save(figure, tmp_path / "top.png")
    png = np.asarray(Image.open(tmp_path / "top.png").convert("RGB")).astype(int)

    def box(colour):
        ys, xs = np.nonzero((png == colour).all(axis=2))
        assert len(ys), colour
        return ys.min(), ys.max(), xs.min(), xs.max()

    boxes = []
    for i in picked:  # highest loss first
        y0, y1, x0, x1 = box(body[i])
        t0, t1, u0, u1 = box(top[i])
        assert (u0, u1) == (x0, x1) and t1 + 1 == y0  # its top rows right above the rest: upright
        height, width = y1 - t0 + 1, x1 - x0 + 1
        assert (y1 - y0 + 1) == pytest.approx(height * (side - 2) / side, abs=1)
        assert width / height == pytest.approx(max(frames, 1), rel=0.05)  # the aspect kept (a strip: side by side)
        assert ((y1 - t0 + 1) * (x1 - x0 + 1)) == ((png[t0:y1 + 1, x0:x1 + 1] == body[i]).all(axis=2).sum()
                                                   + (png[t0:y1 + 1, x0:x1 + 1] == top[i]).all(axis=2).sum())
        boxes.append((t0, y1, x0, x1))
    rows = [boxes[k:k + per_row] for k in range(0, n, per_row)]
    for row, below in zip(rows, rows[1:]):
        assert len({b[0] for b in row}) == 1 and max(b[1] for b in row) < min(b[0] for b in below)
        assert [b[2] for b in row] == sorted(b[2] for b in row)  # left to right
        assert all(a[3] < b[2] for a, b in zip(row, row[1:]))  # side by side, apart
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()  # at the figure's dpi, save()'s (100)
    titles = [t for t in figure.axes[0].texts if "\nloss " in t.get_text()]
    assert [t.get_text().splitlines()[-1] for t in titles] == [f"loss {losses[i]:.2f}" for i in picked]
    for (t0, _, x0, x1), title in zip(boxes, titles):
        extent = title.get_window_extent(renderer)  # y from the bottom of the picture
        assert png.shape[0] - extent.y0 <= t0 and abs((extent.x0 + extent.x1) / 2 - (x0 + x1) / 2) <= 2


@pytest.mark.slow
def test_top_losses_are_the_highest_of_the_gathered_results_on_one_and_two_processes(images, reference, tmp_path):
    """The reference weights scored on 1 and 2 processes (7 validation images: the second pads): the same 4 samples,
    files and losses, highest first; they are the 4 highest losses of the saved weights recomputed here one image at a
    time; calibration.png and most_confused.csv are written, val_ece is in results.json and metrics.jsonl."""
    from utils.config.settings import datasets_for
    from utils.config.options import parse_args
    from utils.data.transforms.batch import BatchInput
    from utils.run.trained import load_run

    weights = ["--eval_only", "--init_from", reference[1] / "model.safetensors", "--top_losses", "4"]
    one = tmp_path / "one"
    run_main(drawn(resume_job(images, one, 1, *weights)))
    two = tmp_path / "two"
    ranks_ok(drawn(resume_job(images, two, 1, *weights)), nproc=2)
    a, b = top_losses(one / "top_losses.csv"), top_losses(two / "top_losses.csv")
    assert [r["file"] for r in a] == [r["file"] for r in b] and len(a) == 4
    assert all(float(x["loss"]) == pytest.approx(float(y["loss"]), abs=1e-5) for x, y in zip(a, b))
    run, model = load_run(reference[1])
    _, val, names, _ = datasets_for(parse_args(["--train_dir", str(images / "tr"), "--val_dir", str(images / "va"),
                                                  "--image_size", "32"]))
    normalise = BatchInput(run.input.mean_std)
    with torch.no_grad():
        losses = [float(F.cross_entropy(model(normalise(val[i]["pixel_values"][None])),
                                        torch.tensor([val[i]["labels"]])))
                  for i in range(len(val))]
    highest = sorted(range(len(val)), key=lambda i: -losses[i])[:4]
    assert [int(r["index"]) for r in a] == highest
    assert [float(r["loss"]) for r in a] == pytest.approx([losses[i] for i in highest], abs=1e-4)
    assert all(r["file"].endswith((".png", ".jpg")) and r["true"] in names for r in a)
    for out in (one, two):
        assert (out / "top_losses.png").stat().st_size > 0 and (out / "calibration.png").stat().st_size > 0
        results = read_json(out / "results.json")
        assert 0 <= results["val_ece"] <= 1 and sum(b["count"] for b in results["calibration_bins"]) == 7
    assert read_json(one / "results.json")["val_ece"] == pytest.approx(read_json(two / "results.json")["val_ece"],
                                                                        abs=1e-6)
    assert (one / "most_confused.csv").read_text() == (two / "most_confused.csv").read_text()


# Its xdist worker died under it (no trace: not Python, not the OOM killer) in 6 of 8 full suites and never alone,
# even with the run and the browser in a process of their own; a worker that dies runs it again once, in another.
@pytest.mark.flaky(reruns=1)
@pytest.mark.slow
def test_the_html_report_renders_in_a_headless_browser_with_every_image(tmp_path):
    """A run's report.html, opened from a file in headless chromium: every embedded image decodes (the page's images,
    counted in the browser after load), nothing is fetched, no console error, and its screenshot is not blank. The
    run and the browser in a process of their own (tests/helpers/report_in_browser.py)."""
    import re
    import subprocess

    from PIL import Image

    browser = chromium()
    done = subprocess.run([sys.executable, ROOT / "tests" / "helpers" / "report_in_browser.py", browser, tmp_path],
                          capture_output=True, text=True, timeout=600, env=environment(), cwd=ROOT)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    page = (tmp_path / "run" / "report.html").read_text()
    assert "<script" not in page and "http" not in page.split("<h2>Settings")[0]  # nothing to run, nothing to fetch
    assert page.count("<img ") == 4  # curves, calibration, confusion matrix, top losses
    assert re.search(r"<title>images 4 broken 0</title>", seen["dom"]), seen["dom"][:300]
    shot = tmp_path / "report.png"
    assert shot.is_file(), seen["log"][-2000:]
    assert not [line for line in seen["log"].splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    with Image.open(shot) as picture:
        low, high = picture.convert("L").getextrema()
    assert high - low > 100  # text and pictures, not a blank page


@pytest.mark.slow
def test_calibrate_fits_the_weights_model_holds_scores_held_out_halves_and_predict_applies_it_to_them(images, tmp_path,
                                                                                                     capsys):
    """An over-confident run (no label smoothing, a high LR, 36 training images) with EMA weights: --calibrate fits T
    > 1 to the EMA weights that model/ holds (not the raw ones), on the whole validation split; its figures after are
    cross-fitted, each half of the split (even and odd places) scaled by the T fitted on the other half; T is in
    results.json, run.json and the model folder; predict.py --ema and its ONNX graph give softmax(logits / T) of the EMA
    weights, and predict.py on the raw weights uses their logits as they are (T was not fitted to them)."""
    import predict

    from utils.config.options import parse_args
    from utils.config.settings import datasets_for
    from utils.data.transforms.batch import BatchInput
    from utils.evaluation.calibration import fit_temperature, nll_and_ece
    from utils.run.trained import Tempered, load_run

    out = tmp_path / "run"
    results = run_main(resume_job(images, out, 0, "--label_smoothing", "0", "--lr", "0.4", "--epochs", "4",
                                  "--model_ema", "--model_ema_decay", "0.9", "--calibrate", "--model", "resnet18"))
    t = results["temperature"]
    assert t > 1.05
    folder_input = read_json(out / "model" / "config.json")["input"]
    assert read_json(out / "run.json")["temperature"] == t == folder_input["temperature"]
    assert "multi_label" not in folder_input  # one label a sample: a softmax, as a folder without the key says
    _, val, names, _ = datasets_for(parse_args(["--train_dir", str(images / "tr"), "--val_dir", str(images / "va"),
                                                  "--image_size", "32"]))
    run, tempered = load_run(out, ema=True)
    assert isinstance(tempered, Tempered) and tempered.temperature == t
    pixels = torch.stack([val[i]["pixel_values"] for i in range(len(val))])
    labels = torch.tensor([val[i]["labels"] for i in range(len(val))])
    raw = load_run(out)[1]
    assert not isinstance(raw, Tempered)  # T was fitted to the EMA weights, not to these
    with torch.no_grad():
        logits = tempered.model(BatchInput(run.input.mean_std)(pixels)).double()
        raw_logits = raw(BatchInput(run.input.mean_std)(pixels)).double()
    with torch.enable_grad():
        assert fit_temperature(logits, labels) == pytest.approx(t, rel=1e-4)  # the EMA weights' own T
        assert fit_temperature(raw_logits, labels) != pytest.approx(t, rel=0.05)  # (the raw ones' differs)
        even, odd = torch.arange(len(labels)) % 2 == 0, torch.arange(len(labels)) % 2 == 1
        halves = [fit_temperature(logits[even], labels[even]), fit_temperature(logits[odd], labels[odd])]
    assert results["temperature_halves"] == pytest.approx(halves, rel=1e-4)
    held_out = torch.where(even, halves[1], halves[0])[:, None]  # each sample by the other half's T
    assert float(F.cross_entropy(logits / held_out, labels)) == pytest.approx(results["val_nll_calibrated"],
                                                                             rel=1e-4)
    # the figures before: the logits as they are (T = 1)
    assert float(F.cross_entropy(logits, labels)) == pytest.approx(results["val_nll_uncalibrated"], rel=1e-4)
    assert nll_and_ece(logits, labels)[1] == pytest.approx(results["val_ece_uncalibrated"], rel=1e-4)
    # T lowers the NLL of the split it was fitted on (T = 1 was a candidate); held out, on 3 or 4 samples a half, it
    # need not: a half whose samples are all right fits a T that sharpens, which the other half's mistakes punish
    assert float(F.cross_entropy(logits / t, labels)) <= results["val_nll_uncalibrated"] + 1e-6
    capsys.readouterr()
    rows = predict.main([str(out), str(images / "va"), "--top_k", "1", "--num_workers", "0", "--ema"])
    expected = (logits / t).softmax(dim=1).max(dim=1).values
    assert [r["probs"][0] for r in rows] == pytest.approx(expected.tolist(), abs=1e-5)
    assert "calibration:" not in capsys.readouterr().out
    rows = predict.main([str(out), str(images / "va"), "--top_k", "1", "--num_workers", "0"])
    assert [r["probs"][0] for r in rows] == pytest.approx(raw_logits.softmax(dim=1).max(dim=1).values.tolist(),
                                                          abs=1e-5)
    assert f"calibration: the run's temperature {t:.4f} was fitted to model_ema.safetensors" in capsys.readouterr().out
    # A checkpoint's weights are not those T was fitted to either (the last one holds the raw final weights)
    last = max((out / "checkpoints").iterdir(), key=lambda folder: read_json(folder / "training_state.json")[
        "global_step"])
    rows = predict.main([str(out), str(images / "va"), "--top_k", "1", "--num_workers", "0", "--checkpoint", str(last)])
    assert [r["probs"][0] for r in rows] == pytest.approx(raw_logits.softmax(dim=1).max(dim=1).values.tolist(),
                                                          abs=1e-5)
    assert "calibration: the run's temperature" in capsys.readouterr().out
    # A run recorded before run.json said which weights T fits: T applies to the weights predict.py is given, as then
    record = read_json(out / "run.json")
    del record["tuned_on"]
    (out / "run.json").write_text(json.dumps(record))
    assert isinstance(load_run(out)[1], Tempered) and isinstance(load_run(out, ema=True)[1], Tempered)
    import onnxruntime

    predict.main([str(out), "--ema", "--export_onnx", str(tmp_path / "m.onnx")])  # the graph divides by T too
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    graph = torch.from_numpy(session.run(None, {"pixels": pixels.numpy()})[0])
    assert graph.softmax(dim=1).max(dim=1).values.tolist() == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize("extra, message", [
    (["--top_losses", "-1"], "top_losses: must be >= 0"),
    (["--calibrate", "--eval_only", "--pretrained"], "calibrate: records its temperature in the model folder"),
    (["--calibrate", "--dataset", "multi_digits"], "calibrate: fits one temperature to a softmax's logits"),
])
def test_what_cannot_apply_is_refused_in_one_line(extra, message, tmp_path, capsys):
    from conftest import main_fails

    code, err = main_fails(["--epochs", "1", "--output_dir", tmp_path / "run", *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
