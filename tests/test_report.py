"""The end-of-run pictures and table: what curves.png and confusion_matrix.png show, labelled; the per-class table."""

import numpy as np
import pytest

from utils.evaluation.tasks import SingleLabel
from utils.reporting import plots, report

ONE = {"label_kind": "single_label"}  # figures of one label a sample, as the task names them


def rows():
    """metrics.jsonl of a 2-epoch run (4 steps an epoch) resumed from step 2: steps 3 and 4 appear twice."""
    out = []
    for step, loss in [(1, 2.0), (2, 1.5), (3, 9.9), (4, 9.9), (3, 1.2), (4, 1.0), (5, 0.9), (6, 0.8), (7, 0.7),
                       (8, 0.6)]:
        out.append({"step": step, "epoch": step / 4, "lr": 0.1 / step, "train_loss": loss})
        if step in (4, 8) and loss < 9:
            out.append({"step": step, "epoch": step / 4, "epoch_train_loss": loss + 0.1})
            out.append({"step": step, "epoch": step / 4, "val_loss": loss / 2, "val_top1": step / 10,
                        "val_topk": step / 9, "topk": 3})
    return out


def test_curves_show_each_figure_once_per_step_with_labels_and_legends():
    fig = plots.curves_figure(rows(), SingleLabel)
    loss_ax, lr_ax, epoch_ax, acc_ax = fig.axes
    line = loss_ax.get_lines()[0]
    assert list(line.get_xdata()) == [1, 2, 3, 4, 5, 6, 7, 8]  # the resumed run's rows win
    assert list(line.get_ydata()) == [2.0, 1.5, 1.2, 1.0, 0.9, 0.8, 0.7, 0.6]
    assert list(lr_ax.get_lines()[0].get_ydata()) == pytest.approx([0.1 / s for s in range(1, 9)])
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [
        ("optimizer step", "cross-entropy"), ("optimizer step", "learning rate"), ("epoch", "cross-entropy"),
        ("epoch", "accuracy")]
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes]
    assert legends[2] == ["train (epoch mean, loss as optimised)", "validation"]
    assert legends[3] == ["val top-1 (last 0.8000)", "val top-3 (last 0.8889)"]
    assert list(acc_ax.get_lines()[0].get_xdata()) == [1.0, 2.0]
    assert list(epoch_ax.get_lines()[1].get_ydata()) == [0.5, 0.3]


def inside(fig):
    """Whether all that `fig` draws (titles, axis labels, tick labels, legends) lies within the picture, as saved:
    matplotlib's own box of what is drawn, in inches, against the figure's size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    width, height = fig.get_size_inches()
    return (drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01,
            drawn.bounds)


def test_the_curves_and_the_reliability_diagram_keep_every_label_inside_the_picture_in_plain_numbers():
    """With fixed margins: every title, axis label, tick label and legend inside the picture, for losses over one
    decade and over several; the log axes labelled in plain numbers (no mathtext), at least two labels each."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import torch

    from utils.evaluation.calibration import calibration_bins

    for scale in (1, 1e-4):  # losses within one decade (no power of ten inside it), then across five
        table = [dict(row, **{k: row[k] * (scale ** (i / 9)) for k in ("train_loss", "epoch_train_loss", "val_loss")
                              if k in row}) for i, row in enumerate(rows())]
        fig = plots.curves_figure(table, SingleLabel)
        ok, outside = inside(fig)
        assert ok, outside
        renderer = FigureCanvasAgg(fig).get_renderer()
        for ax in (fig.axes[0], fig.axes[2]):
            ax.figure.draw(renderer)
            shown = [t.get_text() for t in ax.get_yticklabels(which="both")
                     if t.get_text() and ax.get_ylim()[0] <= t.get_position()[1] <= ax.get_ylim()[1]]
            assert len(shown) >= 2 and all("$" not in text for text in shown), shown
            assert all(float(text) > 0 for text in shown), shown
    for n in (3000, 1281167):  # counts in a bin of up to 3 digits, then ImageNet's training split's 6
        bins = calibration_bins(torch.linspace(0.05, 1.0, n), torch.arange(n) % 3 > 0)
        ok, outside = inside(plots.calibration_figure(bins, 0.1234))
        assert ok, (n, outside)


def test_confusion_matrix_is_normalised_per_true_class_with_names_on_both_axes():
    names = ["cat", "dog", "eel"]
    matrix = [[8, 2, 0], [1, 3, 0], [0, 0, 0]]  # eel: no images, an empty row (no division by zero)
    fig = plots.confusion_figure(matrix, names)
    ax = fig.axes[0]
    shown = ax.get_images()[0].get_array()
    assert np.allclose(shown, [[0.8, 0.2, 0], [0.25, 0.75, 0], [0, 0, 0]])
    assert [t.get_text() for t in ax.get_xticklabels()] == names == [t.get_text() for t in ax.get_yticklabels()]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    assert "14 images" in ax.get_title()
    assert sorted(t.get_text() for t in ax.texts) == ["0.20", "0.25", "0.75", "0.80"]


def test_a_thousand_classes_still_make_a_readable_picture(tmp_path):
    names = [f"n{i:04d}" for i in range(1000)]
    fig = plots.confusion_figure(np.eye(1000, dtype=int).tolist(), names)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == names[::9] and not fig.axes[0].texts  # every 9th name, no cell numbers
    plots.save(fig, tmp_path / "cm.png")
    assert (tmp_path / "cm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cm.png"]  # no temporary file left beside it


def test_per_class_table_counts_and_cuts_to_the_worst():
    figures = {**ONE, "confusion_matrix": [[3, 1], [0, 0]], "per_class_accuracy": [0.75, None], "class_support": [4, 0]}
    lines = report.per_class_table(figures, ["cat", "dog"]).splitlines()
    assert lines[1].split() == ["class", "images", "correct", "accuracy"]
    assert lines[2].split() == ["cat", "4", "3", "0.7500"] and lines[3].split() == ["dog", "0", "0", "-"]
    n = report.TABLE_ROWS + 5
    accuracy = [1 - i / n for i in range(n)]
    figures = {**ONE, "confusion_matrix": np.diag(range(n)).tolist(), "per_class_accuracy": accuracy,
               "class_support": [10] * n}
    lines = report.per_class_table(figures, [f"c{i}" for i in range(n)]).splitlines()
    assert f"the {report.TABLE_ROWS} worst of {n} classes" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == [f"c{i}" for i in range(n - 1, 4, -1)]


def test_per_class_table_by_training_samples_puts_the_tail_last():
    """With the classes' training counts the rows go from the most frequent class to the rarest (ties in class
    order), a train column beside; cut, the 10 most frequent and the 20 rarest."""
    figures = {**ONE, "confusion_matrix": [[3, 1, 0], [0, 2, 0], [1, 0, 0]], "per_class_accuracy": [0.75, 1.0, 0.0],
               "class_support": [4, 2, 1]}
    lines = report.per_class_table(figures, ["cat", "dog", "eel"], [5, 40, 5]).splitlines()
    assert "by training samples" in lines[0] and lines[1].split() == ["class", "train", "images", "correct", "accuracy"]
    assert [line.split() for line in lines[2:]] == [["dog", "40", "2", "2", "1.0000"], ["cat", "5", "4", "3", "0.7500"],
                                                     ["eel", "5", "1", "0", "0.0000"]]
    n = report.TABLE_ROWS + 5
    figures = {**ONE, "confusion_matrix": np.eye(n, dtype=int).tolist(), "per_class_accuracy": [1.0] * n,
               "class_support": [1] * n}
    lines = report.per_class_table(figures, [f"c{i}" for i in range(n)], list(range(n))).splitlines()
    names = [line.split()[0] for line in lines[2:]]
    assert names == [f"c{i}" for i in range(n - 1, n - 11, -1)] + ["..."] + [f"c{i}" for i in range(19, -1, -1)]


def _figure(text):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.text(0.5, 0.5, text)
    return fig


def test_the_pictures_are_drawn_by_a_child_while_the_run_goes_on_and_a_failed_child_costs_none(tmp_path):
    """A child process draws every picture (makers that return None leave no file) and names those it wrote; a child
    that fails on its way (here: a maker that raises in any process but the run's) leaves the parent to draw them
    all."""
    import os

    from utils.reporting.drawing import Drawing

    run = os.getpid()

    def who(name):  # a picture saying which process drew it
        return lambda: (tmp_path / f"{name}.pid").write_text(str(os.getpid())) and _figure(name)

    pictures = [(who("a"), tmp_path / "a.png"), (lambda: None, tmp_path / "none.png"), (who("b"), tmp_path / "b.png")]
    drawing = Drawing.start(pictures)
    child = drawing.pid
    assert child not in (None, run)
    assert drawing.collect() == [tmp_path / "a.png", tmp_path / "b.png"]
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "none.png").exists()
    assert (tmp_path / "a.pid").read_text() == (tmp_path / "b.pid").read_text() == str(child)  # the child's

    def only_here():
        if os.getpid() != run:
            raise RuntimeError("the child fails")
        return _figure("here")

    for path in tmp_path.glob("*.png"):
        path.unlink()
    failed = Drawing.start([(who("c"), tmp_path / "c.png"), (only_here, tmp_path / "d.png")])
    assert failed.collect() == [tmp_path / "c.png", tmp_path / "d.png"]
    assert (tmp_path / "c.pid").read_text() == str(run)  # drawn again here, as the child would have
    assert (tmp_path / "d.png").is_file()


def test_the_drawing_child_dies_with_a_sigkilled_run(tmp_path):
    """A run SIGKILLed while its child draws: the child goes with it and writes nothing after (a resumed run may
    already use the folder)."""
    import os
    import signal
    import time

    import psutil

    read_end, write_end = os.pipe()
    run = os.fork()
    if run == 0:  # the run: starts drawing a slow picture, says the child's pid, waits to be killed
        from utils.reporting.drawing import Drawing

        def slow():
            time.sleep(3)
            return _figure("late")

        drawing = Drawing.start([(slow, tmp_path / "late.png")])
        os.write(write_end, str(drawing.pid).encode())
        time.sleep(60)
        os._exit(0)
    os.close(write_end)
    child = int(os.read(read_end, 32))
    os.kill(run, signal.SIGKILL)
    os.waitpid(run, 0)
    deadline = time.time() + 2
    while time.time() < deadline:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its new parent
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the drawing child {child} outlived its run")
    time.sleep(3.5)
    assert not (tmp_path / "late.png").exists()


def test_curves_are_drawn_when_anything_was_trained_and_never_for_an_evaluation(tmp_path):
    """curves.png is among the pictures when metrics.jsonl holds training rows: per step, or only the epochs' means
    (a run whose --log_every exceeds its steps); an --eval_only run's rows (validation alone) draw none."""
    import json

    figures = {**ONE, "confusion_matrix": [[2, 0], [1, 1]]}

    def drawn(rows):
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        return [path.name for _, path in report.pictures(tmp_path, figures, ["a", "b"])]

    validation = {"step": 4, "epoch": 1.0, "val_loss": 0.5, "val_top1": 0.75, "val_topk": 1.0, "topk": 2}
    assert drawn([{"step": 1, "epoch": 0.25, "lr": 0.1, "train_loss": 1.0}, validation]) == [
        "curves.png", "confusion_matrix.png"]
    assert drawn([{"step": 4, "epoch": 1.0, "epoch_train_loss": 0.9}, validation]) == [
        "curves.png", "confusion_matrix.png"]
    assert drawn([validation]) == ["confusion_matrix.png"]


def test_no_plots_draws_nothing_and_changes_no_other_file_or_figure(tmp_path, monkeypatch):
    """The same run with and without --no_plots: the pictures alone are missing, and no process was started to draw
    them; report.html holds the same page less its images, results.json the same figures, the weights are the same."""
    import os

    from conftest import TINY, assert_same_weights, drawn, read_json, run_main

    argv = [*TINY, "--epochs", "1", "--top_losses", "5"]
    forks, fork = [], os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or fork())
    run_main([*drawn(argv), "--output_dir", tmp_path / "drawn"])
    assert len(forks) == 1  # the drawing child (no loader workers)
    run_main([*argv, "--output_dir", tmp_path / "plain"])
    assert len(forks) == 1
    names = {run: {p.name for p in (tmp_path / run).iterdir()} for run in ("drawn", "plain")}
    pictures = {"curves.png", "confusion_matrix.png", "calibration.png", "top_losses.png"}
    assert pictures <= names["drawn"] and names["plain"] == names["drawn"] - pictures
    results = {run: read_json(tmp_path / run / "results.json") for run in ("drawn", "plain")}
    for figures in results.values():
        del figures["command"], figures["train_time_s"]
    assert results["plain"] == results["drawn"]
    pages = {run: (tmp_path / run / "report.html").read_text() for run in ("drawn", "plain")}
    assert pages["drawn"].count("data:image/png;base64,") == 4 and "<img" not in pages["plain"]
    assert "<h2>Per class</h2>" in pages["plain"] and "<h2>Most confused</h2>" in pages["plain"]
    assert_same_weights(tmp_path / "drawn", tmp_path / "plain")
