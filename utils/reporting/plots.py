"""curves.png, confusion_matrix.png, calibration.png and (multi-label) per_class_ap.png, drawn with matplotlib's object
API (no display, no global state)."""

import io
import math

from utils.core.io import write_bytes_atomic


def _by_step(rows, key):
    """(x, y) of `key` over the rows, the last value of each step winning (a resumed run repeats steps)."""
    last = {row["step"]: row for row in rows if key in row}
    steps = sorted(last)
    return [last[s] for s in steps]


def curves_figure(rows, kind):
    """Train loss and LR per step; val loss (with the epoch's mean train loss) and the figures of the run's `kind` of
    labels per epoch (its curves)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    # Margins fixed rather than found by a layout engine (room for a tick label as long as "0.0001"), and the log
    # axes' ticks as plain numbers ("0.3", not mathtext's 3x10^-1): the end of every run waits for this picture,
    # and both took half its time.
    fig = Figure(figsize=(11, 7.5))
    fig.subplots_adjust(left=0.085, right=0.99, bottom=0.07, top=0.96, wspace=0.22, hspace=0.3)
    (loss_ax, lr_ax), (val_loss_ax, acc_ax) = fig.subplots(2, 2)
    train = _by_step(rows, "train_loss")
    loss_ax.plot([r["step"] for r in train], [r["train_loss"] for r in train], label="train loss (log window mean)")
    lr_ax.plot([r["step"] for r in _by_step(rows, "lr")], [r["lr"] for r in _by_step(rows, "lr")],
               color="tab:orange", label="learning rate")
    for ax, title in ((loss_ax, "training loss per step"), (lr_ax, "learning rate per step")):
        ax.set(xlabel="optimizer step", title=title)
    loss_ax.set_ylabel("cross-entropy")
    lr_ax.set_ylabel("learning rate")
    epochs = _by_step(rows, "epoch_train_loss")
    val = _by_step(rows, "val_loss")
    val_loss_ax.plot([r["epoch"] for r in epochs], [r["epoch_train_loss"] for r in epochs], "o-",
                     label="train (epoch mean, loss as optimised)")
    val_loss_ax.plot([r["epoch"] for r in val], [r["val_loss"] for r in val], "s-", label="validation")
    val_loss_ax.set(xlabel="epoch", ylabel="cross-entropy", title="loss per epoch")
    # Log scale: an early spike (BatchNorm statistics of a barely trained net) would flatten the rest.
    for ax in (loss_ax, val_loss_ax):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_log_formatter())
        ax.yaxis.set_minor_formatter(_plain_log_formatter())
    # The kind's own figures (top-1 and top-k; multi-label: mAP and micro F1 at the threshold), as it names them
    for (key, name), style in zip(kind.curves(val[-1]) if val else [], ("s-", "^--")):
        acc_ax.plot([r["epoch"] for r in val], [r[key] for r in val], style, label=f"{name} (last {val[-1][key]:.4f})")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="validation accuracy per epoch", ylim=(0, 1.02))
    for ax in (val_loss_ax, acc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (loss_ax, lr_ax, val_loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend()
    return fig


def _plain_log_formatter():
    """matplotlib's choice of which log-axis ticks to label (the decades; within a decade or two, some between),
    each written as a plain number: "0.3", "2", "1e-05"."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""

    return Plain(labelOnlyBase=False)


def confusion_figure(matrix, class_names):
    """The confusion matrix normalised per true class (each row sums to 1): row i, column j = share of
    class i's images predicted as class j. Cells are written out up to 20 classes."""
    import numpy as np
    from matplotlib.figure import Figure

    counts = np.asarray(matrix, dtype=np.float64)
    n = len(class_names)
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    side = min(4 + 0.35 * n, 40)
    fig = Figure(figsize=(side + 1.5, side), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, label="share of the true class's images")
    every = math.ceil(n / 120)  # past ~120 classes the names could not be read: label every k-th
    ticks = list(range(0, n, every))
    names = [class_names[i] for i in ticks]
    ax.set_xticks(ticks, names, rotation=90 if max(map(len, names)) > 3 else 0, fontsize=_font(n))
    ax.set_yticks(ticks, names, fontsize=_font(n))
    ax.set(xlabel="predicted class", ylabel="true class",
           title=f"confusion matrix, normalised per true class ({int(counts.sum())} images)")
    if n <= 20:
        for i in range(n):
            for j in range(n):
                if counts[i, j]:
                    ax.text(j, i, f"{share[i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="white" if share[i, j] > 0.5 else "black")
    return fig


def per_class_ap_figure(per_class_ap, positives, class_names):
    """Each class's validation AP as a bar, worst first (up to 60 shown), its positives in the label; classes
    without positives have no AP and no bar."""
    from matplotlib.figure import Figure

    rows = sorted(((ap, name, n) for ap, name, n in zip(per_class_ap, class_names, positives) if ap is not None),
                  key=lambda r: r[0])[:60]
    fig = Figure(figsize=(8, max(3, 0.25 * len(rows) + 1.5)), layout="constrained")
    ax = fig.subplots()
    ax.barh(range(len(rows)), [r[0] for r in rows], color="tab:blue")
    ax.set_yticks(range(len(rows)), [f"{name} ({n})" for _, name, n in rows], fontsize=_font(len(rows)))
    ax.invert_yaxis()
    shown = "" if len(rows) == sum(ap is not None for ap in per_class_ap) else f", the {len(rows)} worst"
    ax.set(xlim=(0, 1.02), xlabel="average precision", title=f"per-class AP on validation{shown} (positives)")
    ax.grid(alpha=0.3, axis="x")
    return fig


def _font(n):
    return 10 if n <= 30 else 7 if n <= 120 else 5


def save(fig, path):
    """Render a PNG in memory and write it atomically: a reader never sees half a file."""
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    write_bytes_atomic(path, png.getvalue())


def calibration_figure(bins, ece, what="top-class probability"):
    """A reliability diagram: each bin's accuracy against its confidence (the diagonal is calibrated), with the
    samples in each bin below (utils/evaluation/calibration.py's bins)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 7))  # fixed margins (curves_figure says why), room for 7-digit counts
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.08, top=0.95, hspace=0.1)
    acc_ax, count_ax = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    width = 1 / len(bins)
    lefts = [i * width for i in range(len(bins))]
    filled = [(left, b) for left, b in zip(lefts, bins) if b["count"]]
    acc_ax.bar([left for left, _ in filled], [b["accuracy"] for _, b in filled], width=width, align="edge",
               edgecolor="black", label="accuracy in the bin")
    acc_ax.bar([left for left, _ in filled], [abs(b["confidence"] - b["accuracy"]) for _, b in filled], width=width,
               bottom=[min(b["accuracy"], b["confidence"]) for _, b in filled], align="edge", facecolor="none",
               edgecolor="tab:red", hatch="//", label="gap to its mean confidence")
    acc_ax.plot([0, 1], [0, 1], "k--", label="calibrated")
    acc_ax.set(ylabel="accuracy", xlim=(0, 1), ylim=(0, 1), title=f"reliability of the {what}: ECE {ece:.4f}")
    acc_ax.legend(loc="upper left")
    count_ax.bar(lefts, [b["count"] for b in bins], width=width, align="edge", edgecolor="black")
    count_ax.set(xlabel=f"{what} (bins of {width:.3g})", ylabel="samples")
    for ax in (acc_ax, count_ax):
        ax.grid(alpha=0.3)
    return fig
