"""The end of a run, without any tracker: results.json, curves.png, calibration.png, confusion_matrix.png/.csv
(multi-label: per_class_ap.png and per_class_counts.csv), a per-class table (where the model fails: failures.py).
Which of them, the run's kind of labels says (its figures name it: utils/evaluation/tasks.py figures_kind)."""

import csv
import io
import json

from utils.core.io import write_json_atomic, write_text_atomic
from utils.evaluation.tasks import figures_kind
from utils.reporting import plots

TABLE_ROWS = 30  # more classes than this: the table shows the worst ones (results.json has them all)


HEAD_ROWS = 10  # a cut table sorted by training samples: the most frequent classes, then the rarest


def per_class_table(figures, class_names, train_counts=None):
    """The text table of each class that the run's kind of labels shows (TABLES)."""
    return TABLES[figures_kind(figures).class_table](figures, class_names, train_counts)


def accuracy_table(figures, class_names, train_counts=None):
    """A text table of per-class top-1 accuracy. With the classes' training samples (`train_counts`, a list) it is
    sorted by them, most first, so the tail is at the bottom (cut: the 10 most frequent and the 20 rarest); without
    them, worst first when it has to be cut."""
    matrix = figures["confusion_matrix"]
    counts = train_counts or [None] * len(class_names)
    rows = [(name, acc, n, matrix[i][i], trained) for i, (name, acc, n, trained)
            in enumerate(zip(class_names, figures["per_class_accuracy"], figures["class_support"], counts))]
    title = "per-class accuracy (top-1)"
    cut = None
    if train_counts is not None:
        rows = sorted(rows, key=lambda r: -r[4])  # stable: equal counts keep the class order
        title += ", by training samples"
        if len(rows) > TABLE_ROWS:
            cut = HEAD_ROWS
            rows = rows[:HEAD_ROWS] + rows[HEAD_ROWS - TABLE_ROWS:]
            title += f": the {HEAD_ROWS} most and {TABLE_ROWS - HEAD_ROWS} least frequent of {len(class_names)} " \
                     f"classes (all in results.json)"
    elif len(rows) > TABLE_ROWS:
        rows = sorted(rows, key=lambda r: (r[1] is None, r[1] if r[1] is not None else 0))[:TABLE_ROWS]
        title += f", the {TABLE_ROWS} worst of {len(class_names)} classes (all in results.json)"
    width = max(len("class"), *(len(row[0]) for row in rows))
    trained = train_counts is not None
    lines = [title, f"  {'class':<{width}}  {'train  ' if trained else ''}{'images':>6}  {'correct':>7}  accuracy"]
    for i, (name, acc, n, correct, count) in enumerate(rows):
        if i == cut:
            lines.append(f"  {'...':<{width}}")
        lines.append(f"  {name:<{width}}  {f'{count:>5}  ' if trained else ''}{n:>6}  {correct:>7}  "
                     f"{'-' if acc is None else f'{acc:.4f}'}")
    return "\n".join(lines)


def per_class_ap_table(figures, class_names, train_counts=None):
    """Multi-label: each class's AP, positives and true/false positives at the threshold, worst AP first when cut (by
    AP, whatever the training counts)."""
    rows = [(name, ap, n, tp, fp) for name, ap, n, tp, fp in zip(
        class_names, figures["per_class_ap"], figures["class_support"], figures["true_positives"],
        figures["false_positives"])]
    title = f"per-class AP (and counts at threshold {figures['threshold']:g})"
    if len(rows) > TABLE_ROWS:
        rows = sorted(rows, key=lambda r: (r[1] is None, r[1] if r[1] is not None else 0))[:TABLE_ROWS]
        title += f", the {TABLE_ROWS} worst of {len(class_names)} classes (all in results.json)"
    width = max(len("class"), *(len(row[0]) for row in rows))
    lines = [title, f"  {'class':<{width}}  {'positives':>9}  {'true pos':>8}  {'false pos':>9}  AP"]
    for name, ap, n, tp, fp in rows:
        lines.append(f"  {name:<{width}}  {n:>9}  {tp:>8}  {fp:>9}  {'-' if ap is None else f'{ap:.4f}'}")
    return "\n".join(lines)


def ece_of(figures):
    """The ECE of the weights the pictures show: the EMA's with --model_ema (as model/ holds), else the trained ones."""
    return figures.get("val_ema_ece", figures["val_ece"])


def pictures(out, figures, class_names):
    """The report's pictures, as (make the figure, its path) pairs for utils/reporting/drawing.py: curves.png (when
    metrics.jsonl holds training rows, read now), calibration.png, and the picture of the classes the run's kind of
    labels names (confusion_matrix.png or, multi-label, per_class_ap.png)."""
    kind, drawn = figures_kind(figures), []
    metrics_path = out / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    if any("train_loss" in row or "epoch_train_loss" in row for row in rows):  # something was trained
        drawn.append((lambda: plots.curves_figure(rows, kind), out / "curves.png"))
    if figures.get("calibration_bins"):
        drawn.append((lambda: plots.calibration_figure(figures["calibration_bins"], ece_of(figures), kind.calibrated),
                      out / "calibration.png"))
    drawn.append((lambda: CLASS_PICTURES[kind.class_picture](figures, class_names), out / f"{kind.class_picture}.png"))
    return drawn


def write(out, results, figures, bad_images):
    """results.json, bad_images.txt (if any), and the CSV of the classes the run's kind of labels names
    (confusion_matrix.csv or, multi-label, per_class_counts.csv; the pictures are drawn apart: pictures())."""
    class_names, kind = results["class_names"], figures_kind(figures)
    if bad_images:
        write_text_atomic(out / "bad_images.txt", "".join(f"{p}\t{bad_images[p]}\n" for p in sorted(bad_images)))
    write_json_atomic(out / "results.json", results)
    text = io.StringIO()
    CLASS_CSVS[kind.class_csv](csv.writer(text), figures, class_names)
    write_text_atomic(out / f"{kind.class_csv}.csv", text.getvalue())


def per_class_counts_rows(table, figures, class_names):
    """Multi-label: each class's positives, its counts at the threshold and its AP."""
    table.writerow(["class", "positives", "true_positives", "false_positives", "false_negatives", "true_negatives",
                    "average_precision"])
    table.writerows([name, figures["class_support"][i], *(figures[key][i] for key in (
        "true_positives", "false_positives", "false_negatives", "true_negatives")),
        "" if figures["per_class_ap"][i] is None else figures["per_class_ap"][i]]
        for i, name in enumerate(class_names))


def confusion_rows(table, figures, class_names):
    """Single-label: the confusion matrix, true classes down, predicted across."""
    table.writerow(["true \\ predicted", *class_names])
    table.writerows([name, *counts] for name, counts in zip(class_names, figures["confusion_matrix"]))


# What each name a kind of labels gives (its class_table, class_picture, class_csv) is drawn or written with.
TABLES = {"accuracy": accuracy_table, "average_precision": per_class_ap_table}
CLASS_PICTURES = {
    "confusion_matrix": lambda figures, names: plots.confusion_figure(figures["confusion_matrix"], names),
    "per_class_ap": lambda figures, names: plots.per_class_ap_figure(figures["per_class_ap"], figures["class_support"],
                                                                     names)}
CLASS_CSVS = {"confusion_matrix": confusion_rows, "per_class_counts": per_class_counts_rows}
