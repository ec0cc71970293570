"""Where the model fails, from the last validation's gathered per-sample results (no pass of its own over the data):
the validation samples of highest loss (top_losses.csv and .png, the images as loaded, before normalisation) and the
pairs of classes most confused (most_confused.csv). The same on any number of processes: the results are gathered in
the validation set's order, each sample once."""

import csv
import io

import torch

from utils.core.io import write_text_atomic

SHOWN_CONFUSED = 5  # lines of most_confused.csv in the end-of-run summary
GRID_COLUMNS = 6
CLIP_FRAMES = 8  # a clip in the picture: this many of its frames, evenly spaced, side by side


def most_confused(matrix, class_names):
    """(true class, predicted class, count, share of the true class's samples) for every off-diagonal cell of the
    confusion matrix with a count, largest first (ties: the larger share, then the class order)."""
    rows = []
    for t, counts in enumerate(matrix):
        total = sum(counts)
        rows += [(class_names[t], class_names[p], n, n / total) for p, n in enumerate(counts) if p != t and n]
    return sorted(rows, key=lambda row: (-row[2], -row[3]))


def highest_losses(samples, n):
    """The positions in `samples` (a task's per-sample record) of the `n` highest losses, highest first (ties: the
    lower dataset index first)."""
    order = sorted(range(len(samples["loss"])), key=lambda i: (-samples["loss"][i], samples["index"][i]))
    return order[:n]


def sample_name(dataset, index):
    """How the validation set names its sample `index`: the file (image rows read from files, a video's name), else
    its place in the split."""
    inner = getattr(dataset, "dataset", dataset)  # EpochSeeded wraps the rows
    names = getattr(inner, "names", None)
    if names:
        return str(names[index])
    rows = getattr(inner, "rows", None)
    if rows is not None and "image" in getattr(rows, "column_names", ()):
        image = rows[int(index)]["image"]
        if isinstance(image, dict) and image.get("path"):
            return image["path"]
    return f"validation[{index}]"


def top_losses_table(samples, picked, class_names, dataset, task):
    """top_losses.csv: rank, dataset index, file (or place), true and predicted labels, what the `task` says went
    wrong (its failure_columns: probabilities, or the labels missed and false), loss."""
    text = io.StringIO()
    table = csv.writer(text)
    table.writerow(["rank", "index", "file", "true", "predicted", *task.failure_columns, "loss"])
    for rank, i in enumerate(picked, 1):
        table.writerow([rank, samples["index"][i], sample_name(dataset, samples["index"][i]),
                        task.label_text(samples["label"][i], class_names),
                        task.label_text(samples["predicted"][i], class_names),
                        *task.failure_cells(samples, i, class_names), f"{samples['loss'][i]:.6f}"])
    return text.getvalue()


def picture(dataset, index):
    """Sample `index` as loaded, before normalisation, as a (H, W, 3) uint8 array: an image, or a clip's frames side
    by side; None when the loader hands over no pixels (--decode_on_device: bytes for the device)."""
    from utils.reporting.trackers import displayable

    pixels = dataset[int(index)]["pixel_values"]
    if not isinstance(pixels, torch.Tensor) or pixels.dim() not in (3, 4):
        return None
    if pixels.dim() == 4:  # a clip (C, T, H, W): some of its frames in a row
        frames = torch.linspace(0, pixels.shape[1] - 1, min(CLIP_FRAMES, pixels.shape[1])).round().long()
        pixels = torch.cat(list(pixels[:, frames].unbind(dim=1)), dim=2)
    return displayable(pixels[None])[0].permute(1, 2, 0).numpy()


def top_losses_figure(samples, picked, class_names, dataset, task):
    """The picked samples in a grid, each titled as the `task` says what went wrong (true and predicted labels,
    probabilities), and its loss; None when there is nothing to draw.

    One axes in inches over the whole figure, each sample an image placed in its cell and its title a text above it:
    a grid of axes under a layout engine drew the same picture in four times the time (the end of every run waits
    for it)."""
    from matplotlib.figure import Figure

    images = [picture(dataset, samples["index"][i]) for i in picked]
    if not picked or any(image is None for image in images):
        return None
    wide = images[0].shape[1] / images[0].shape[0]  # a clip's strip of frames: two a row
    columns = min(GRID_COLUMNS if wide < 2 else 2, len(picked))
    rows = -(-len(picked) // columns)
    cell_w, cell_h = 2.4 * min(wide, 3), (2.6 if wide < 2 else 1.6)
    head, band, gap = 0.45, 0.5, 0.1  # inches: the figure's title, a sample's three title lines, between cells
    width, height = columns * cell_w, head + rows * cell_h
    room_w, room_h = cell_w - 2 * gap, cell_h - band - gap  # what an image may fill of its cell
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    for n, (i, image) in enumerate(zip(picked, images)):
        row, column = divmod(n, columns)
        scale = min(room_w / image.shape[1], room_h / image.shape[0])  # the image's aspect kept
        w, h = image.shape[1] * scale, image.shape[0] * scale
        left, top = column * cell_w + (cell_w - w) / 2, head + row * cell_h + band
        ax.imshow(image, interpolation="nearest", extent=(left, left + w, top + h, top))
        ax.text(left + w / 2, top - 0.05, f"{task.failure_title(samples, i, class_names)}\nloss "
                f"{samples['loss'][i]:.2f}", ha="center", va="bottom", fontsize=8)
    ax.text(width / 2, head / 2, "validation samples of highest loss (top_losses.csv names them)", ha="center",
            va="center", fontsize="large")
    ax.set(xlim=(0, width), ylim=(height, 0), aspect="auto")
    ax.axis("off")
    return fig


def prediction_rows(samples, class_names, dataset, top_n, task, others=16):
    """The wandb table of validation predictions: the `top_n` highest losses, then `others` of the rest evenly spread
    over the validation set: (image, true, predicted, probability, loss, which), images as loaded."""
    if not samples or not samples["loss"]:
        return []
    picked = highest_losses(samples, top_n)
    chosen = set(picked)
    rest = [i for i in range(len(samples["loss"])) if i not in chosen]
    spread = rest[::max(1, len(rest) // others)][:others] if others else []
    return [(picture(dataset, samples["index"][i]), task.label_text(samples["label"][i], class_names),
             task.label_text(samples["predicted"][i], class_names), task.shown_probability(samples, i),
             samples["loss"][i], "top loss" if i in chosen else "sample") for i in picked + spread]


def failure_pictures(out, figures, class_names, dataset, top_n, task):
    """top_losses.png (the `top_n` highest losses; 0: none), as a (make the figure, its path) pair for
    utils/reporting/drawing.py."""
    samples = figures.get("samples")
    if not (top_n and samples and samples["loss"]):
        return []
    picked = highest_losses(samples, top_n)
    return [(lambda: top_losses_figure(samples, picked, class_names, dataset, task), out / "top_losses.png")]


def write_failures(out, figures, class_names, dataset, top_n, task):
    """top_losses.csv (the `top_n` highest losses; 0: none) as the run's `task` describes its samples,
    most_confused.csv (single-label); returns the summary's lines (the pictures: failure_pictures)."""
    lines = []
    samples = figures.get("samples")
    if top_n and samples and samples["loss"]:
        picked = highest_losses(samples, top_n)
        write_text_atomic(out / "top_losses.csv", top_losses_table(samples, picked, class_names, dataset, task))
    matrix = task.confusion(figures)  # none for multi-label data: no class is confused for another
    if matrix is not None:
        rows = most_confused(matrix, class_names)
        text = io.StringIO()
        table = csv.writer(text)
        table.writerow(["true", "predicted", "count", "share_of_true"])
        table.writerows([t, p, n, f"{share:.6f}"] for t, p, n, share in rows)
        write_text_atomic(out / "most_confused.csv", text.getvalue())
        if rows:
            lines = ["most confused (true -> predicted: count, share of the true class; most_confused.csv)"] + [
                f"  {t} -> {p}: {n} ({share:.1%})" for t, p, n, share in rows[:SHOWN_CONFUSED]]
    return lines
