"""What crossval.py makes of its finished folds: cv_results.json (each figure's per-fold values, mean, standard
deviation and 95 % t interval), oof_predictions.csv (every training sample once, with its out-of-fold probabilities),
the label issues cleanlab finds in them (label_issues.csv ranked, label_issues.png) and report.html."""

import csv
import html
import io
import json
import math

import numpy as np

from utils.core.errors import UserError
from utils.core.io import write_json_atomic, write_text_atomic
from utils.evaluation.metrics import figure_range
from utils.reporting.html_report import STYLE, embedded, figure_rows

SHOWN = 24  # label issues in label_issues.png and report.html
HEAD = ("index", "sample", "fold", "label")  # fold_predictions.csv's first columns; each class's probability follows


class CrossValidationError(UserError):
    """Fold runs whose records do not add up (a fold from another cross-validation, a sample twice)."""


def interval(values, bounds=None):
    """(mean, standard deviation (n - 1), the 95 % interval of the mean by Student's t), the interval cut to `bounds`
    (lowest, highest), what the figure can be: with 3 to 10 folds a t interval of a share near 1 reaches past it."""
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    mean, std = float(values.mean()), float(values.std(ddof=1))
    half = float(stats.t.ppf(0.975, len(values) - 1)) * std / math.sqrt(len(values))
    low, high = bounds or (-math.inf, math.inf)
    return mean, std, [max(low, mean - half), min(high, mean + half)]


def cv_results(cv):
    """{figure: {folds, mean, std, ci95}} of every figure the fold runs report, and the tracked one's name."""
    results = [json.loads((cv.fold_folder(fold) / "results.json").read_text()) for fold in range(cv.folds)]
    figures = {}
    for key, _ in figure_rows(results[0]):
        if key.startswith(("val_", "macro_", "video_", "clip_", "test_")) and key != "val_samples" \
                and all(key in r for r in results):
            values = [r[key] for r in results]
            mean, std, ci = interval(values, figure_range(key))
            figures[key] = {"folds": values, "mean": mean, "std": std, "ci95": ci}
    return {"folds": cv.folds, "fold_seed": cv.fold_seed, "tracked_metric": results[0]["tracked_metric"],
            "samples": [r["val_samples"] for r in results], "figures": figures}


def read_out_of_fold(cv):
    """(class names, rows, skipped): every fold's fold_predictions.csv, sorted by the sample's place in the training
    split; each place exactly once, but for the files the folds' runs skipped as unreadable (named in `skipped`), or a
    CrossValidationError."""
    rows, classes = [], None
    for fold in range(cv.folds):
        with open(cv.fold_folder(fold) / "fold_predictions.csv", newline="") as f:
            table = list(csv.reader(f))
        if classes is not None and table[0][len(HEAD):] != classes:
            raise CrossValidationError(f"fold {fold}: other classes than fold 0's")
        classes = table[0][len(HEAD):]
        rows += [(int(r[0]), r[1], int(r[2]), r[3], [float(p) for p in r[len(HEAD):]]) for r in table[1:]]
    rows.sort(key=lambda row: row[0])
    skipped = skipped_held_out(cv, rows)
    places = [row[0] for row in rows]
    if len(set(places)) != len(places) or (places and places[-1] >= len(rows) + len(skipped)):
        raise CrossValidationError("the folds' held-out samples are not the training split once each (folds of "
                                   "another cross-validation in the folder?)")
    return classes, rows, skipped


def skipped_held_out(cv, rows):
    """The training split's files a fold's run left out as unreadable (--skip_bad_images; results.json's
    skipped_images) that are held out nowhere: the places the out-of-fold rows lack, named."""
    skipped = {name for fold in range(cv.folds)
               for name in json.loads((cv.fold_folder(fold) / "results.json").read_text()).get("skipped_images", [])}
    return sorted(skipped - {row[1] for row in rows})


def write_out_of_fold(cv, classes, rows):
    text = io.StringIO()
    table = csv.writer(text)
    table.writerow([*HEAD, *classes])
    table.writerows([index, sample, fold, label, *map(repr, probs)] for index, sample, fold, label, probs in rows)
    write_text_atomic(cv.folder / "oof_predictions.csv", text.getvalue())


def find_issues(classes, rows, multi_label):
    """[(row, suggested label text, quality)] of the samples cleanlab finds mislabelled, worst first: its
    find_label_issues pruning by class, ranked by self-confidence, and its label quality scores (multi-label: its
    multilabel_classification variants, its default filter; the suggestion is the classes at probability >= 0.5)."""
    index = {name: k for k, name in enumerate(classes)}
    probs = np.asarray([row[4] for row in rows], dtype=np.float64)
    if multi_label:
        from cleanlab.multilabel_classification import filter as ml_filter, rank as ml_rank

        labels = [[index[n] for n in row[3].split()] for row in rows]
        found = ml_filter.find_label_issues(labels, probs, return_indices_ranked_by="self_confidence", n_jobs=1)
        quality = ml_rank.get_label_quality_scores(labels, probs)
        suggested = [" ".join(classes[k] for k in np.flatnonzero(p >= 0.5)) for p in probs]
    else:
        from cleanlab import filter as cl_filter, rank as cl_rank

        labels = np.asarray([index[row[3]] for row in rows])
        probs = probs / probs.sum(axis=1, keepdims=True)  # softmax rows, summing to 1 up to float32's rounding
        # By class: each given class loses as many samples as the confident joint says it holds wrong, those it is
        # least sure of. cleanlab's default (by noise rate) takes them cell by cell of the joint, and missed the
        # flips an out-of-fold model calls their true class below that class's threshold: on the digits with 5 %
        # flipped, recall 0.78 (3 folds) and 0.82 (5), where by class gives 0.82 and 0.89, at precision 1.0
        # (docs/benchmarks.md; tests/data/digits_oof_*.npz).
        found = cl_filter.find_label_issues(labels, probs, filter_by="prune_by_class",
                                            return_indices_ranked_by="self_confidence", n_jobs=1)
        quality = cl_rank.get_label_quality_scores(labels, probs)
        suggested = [classes[k] for k in probs.argmax(axis=1)]
    return [(rows[i], suggested[i], float(quality[i])) for i in found]


def write_issues_csv(cv, issues):
    text = io.StringIO()
    table = csv.writer(text)
    table.writerow(["rank", "sample", "index", "fold", "given_label", "suggested_label", "quality"])
    table.writerows([rank, row[1], row[0], row[2], row[3], suggested, f"{quality:.6f}"]
                    for rank, (row, suggested, quality) in enumerate(issues, 1))
    write_text_atomic(cv.folder / "label_issues.csv", text.getvalue())


def issues_figure(issues, pictures):
    """The first issues in a grid, each as loaded, titled with its given and suggested label; None without pictures."""
    from matplotlib.figure import Figure

    shown = [(issue, picture) for issue, picture in zip(issues, pictures) if picture is not None]
    if not shown:
        return None
    columns = min(6, len(shown))
    rows = -(-len(shown) // columns)
    fig = Figure(figsize=(columns * 2.2, rows * 2.5), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, ((row, suggested, quality), picture) in zip(axes, shown):
        ax.imshow(picture, interpolation="nearest")
        # (a label issue's quality is the given label's own probability, often under 0.01: two significant digits)
        ax.set_title(f"{row[1][-18:]}\ngiven {row[3]} / sugg. {suggested}\nquality {quality:.2g}", fontsize=7)
    for ax in axes:
        ax.axis("off")
    fig.suptitle("label issues found by cleanlab in the out-of-fold predictions (label_issues.csv)")
    return fig


def write_report(cv, summary, issues, picture):
    """report.html: the figures across folds, the folds' runs, the label issues (and their picture)."""
    figures = "".join(f"<tr><td>{html.escape(k)}</td><td>{v['mean']:.4f}</td><td>{v['std']:.4f}</td>"
                      f"<td>{v['ci95'][0]:.4f} – {v['ci95'][1]:.4f}</td><td>{' '.join(f'{x:.4f}' for x in v['folds'])}"
                      f"</td></tr>" for k, v in summary["figures"].items())
    folds = "".join(f'<li><a href="fold_{f}/report.html">fold {f}</a> ({n} held-out samples)</li>'
                    for f, n in enumerate(summary["samples"]))
    found = "".join(f"<tr><td>{r}</td><td>{html.escape(row[1])}</td><td>{row[2]}</td><td>{html.escape(row[3])}</td>"
                    f"<td>{html.escape(s)}</td><td>{q:.3g}</td></tr>"
                    for r, (row, s, q) in enumerate(issues[:SHOWN], 1))
    parts = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{cv.folds}-fold cross-validation'
             f"</title><style>{STYLE}</style></head><body><h1>{cv.folds}-fold cross-validation</h1>",
             f"<pre>{html.escape(' '.join(cv.base))}</pre>",
             "<h2>Figures across folds</h2><table><tr><th>figure</th><th>mean</th><th>std</th>"
             f"<th>95 % interval (t, within what the figure can be)</th><th>per fold</th></tr>{figures}</table>"
             f"<ul>{folds}</ul>",
             f"<h2>Label issues: {len(issues)} found (label_issues.csv)</h2><table><tr><th>rank</th><th>sample</th>"
             f"<th>fold</th><th>given</th><th>suggested</th><th>quality</th></tr>{found}</table>"]
    if picture is not None:
        parts.append(embedded(picture))
    write_text_atomic(cv.folder / "report.html", "\n".join(parts) + "</body></html>")


def write_summary(cv, summary):
    write_json_atomic(cv.folder / "cv_results.json", summary)
