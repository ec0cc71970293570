"""What the audit writes in its folder, every file whole or not at all (written under another name, then renamed):

    findings.csv   every finding ranked (utils/audit/findings.py): rank, kind, across (1: the pair spans the splits),
                   score, then each sample's split, name and label
    summary.json   the counts of each kind across and within the splits, the validation samples a leak-free figure
                   leaves out, the training samples exclude.csv holds, the thresholds and the model
    exclude.csv    the training samples a run should leave out (train_classification.py --exclude takes it)
    leaked.csv     the validation samples with a copy, a conflict or a group in training (--audit DIR: the run's
                   figures on the rest, beside the whole split's)
    audit.html     the findings with their pictures side by side (the first --html_rows), one file that opens
                   offline, in the run report's style"""

import base64
import csv
import html
import io

import torch

from utils.audit.findings import PAIRED, SEVERITY
from utils.core.io import write_json_atomic, write_text_atomic
from utils.reporting.html_report import STYLE

SPLIT_NAMES = ("train", "val")


def label_text(label, classes):
    if isinstance(label, tuple):
        return "|".join(classes[c] for c in label)
    return classes[label]


def rows(samples, found, classes):
    """findings.csv's rows, header first."""
    out = [["rank", "kind", "across", "score", "split", "sample", "label", "other_split", "other_sample", "other_label",
            "detail"]]
    for rank, f in enumerate(found, 1):
        sides = [[SPLIT_NAMES[samples.split[i]], samples.names[i], label_text(samples.labels[i], classes)]
                 if i is not None else ["", "", ""] for i in (f.first, f.second)]
        out.append([rank, f.kind, int(f.across), f"{f.score:.6f}", *sides[0], *sides[1], f.detail])
    return out


def csv_text(table):
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(table)
    return buffer.getvalue()


def named(samples, chosen, found):
    """'sample,kind,rank' rows of the samples `chosen` ({place: kind}), each with the rank of its first finding."""
    rank_of = {}
    for rank, f in enumerate(found, 1):
        for i in (f.first, f.second):
            if i is not None:
                rank_of.setdefault(i, rank)
    return [["sample", "kind", "rank"]] + [[samples.names[i], kind, rank_of[i]] for i, kind in sorted(chosen.items())]


def summary(samples, found, leaked, excluded, thresholds, model, unit):
    counts = {kind: {"across": 0, "within": 0} for kind in SEVERITY}
    for f in found:
        counts[f.kind]["across" if f.across else "within"] += 1
    val = int((samples.split == 1).sum())
    return {"samples": {"train": int((samples.split == 0).sum()), "val": val}, "unit": unit, "model": model,
            "found": {kind: counts[kind] if kind in PAIRED else counts[kind]["within"] for kind in SEVERITY},
            "leaked_validation": len(leaked), "leaked_share": round(len(leaked) / val, 6) if val else 0.0,
            "excluded_training": len(excluded), "findings": len(found),
            "thresholds": {k: getattr(thresholds, k) for k in thresholds.__dataclass_fields__}}


def write_all(folder, samples, found, leaked, excluded, thresholds, model, unit, classes, pictures, html_rows):
    """Every file of the folder; `pictures(i)`: sample i's PNG bytes, for the page."""
    write_text_atomic(folder / "findings.csv", csv_text(rows(samples, found, classes)))
    write_text_atomic(folder / "exclude.csv", csv_text(named(samples, excluded, found)))
    write_text_atomic(folder / "leaked.csv", csv_text(named(samples, leaked, found)))
    record = summary(samples, found, leaked, excluded, thresholds, model, unit)
    write_json_atomic(folder / "summary.json", record)
    write_text_atomic(folder / "audit.html", page(samples, found, record, classes, pictures, html_rows))
    return record


def png(pixels, pixel_max):
    """PNG bytes of one sample's pixels as the eval transform gives them: (C, H, W), or a clip's (C, T, H, W) (its
    middle frame); RGB where it has three channels, else their mean in grey; raw band values over `pixel_max`."""
    from PIL import Image

    frame = pixels[:, pixels.shape[1] // 2] if pixels.dim() == 4 else pixels
    scaled = frame.float() / (pixel_max or 255.0)
    shown = scaled if len(scaled) == 3 else scaled.mean(dim=0, keepdim=True)
    array = (shown.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    image = Image.fromarray(array[..., 0] if array.shape[2] == 1 else array)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def within(kind, value, model):
    """The page's count of `kind` within a split: none for a group (it spans them), "no run" for outliers without
    features."""
    if kind == "group":
        return ""
    if kind == "outlier" and not model:
        return "(needs a run)"
    return value["within"] if isinstance(value, dict) else value


def page(samples, found, record, classes, pictures, html_rows):
    counts = "".join(f"<tr><th>{kind.replace('_', ' ')}</th><td>{value['across'] if isinstance(value, dict) else ''}"
                     f"</td><td>{within(kind, value, record['model'])}</td></tr>"
                     for kind, value in record["found"].items())
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Data audit</title>",
             f"<style>{STYLE}\n.pair img{{width:96px;image-rendering:pixelated;margin-right:.5em}}</style></head>",
             "<body>",
             "<h1>Data audit</h1>",
             f"<p>{record['samples']['train']} training and {record['samples']['val']} validation {record['unit']}; "
             f"{record['leaked_validation']} validation {record['unit']} ({100 * record['leaked_share']:.2f} %) have "
             f"a copy, a conflict or a group in training; exclude.csv leaves out {record['excluded_training']} "
             f"training {record['unit']}.</p>",
             "<h2>Found</h2><table><tr><th>kind</th><th>across the splits</th><th>within one</th></tr>",
             f"{counts}</table>",
             f"<h2>Findings, most serious first</h2><p>The first {min(html_rows, len(found))} of {len(found)}; "
             f"findings.csv holds them all.</p><div class=\"wide\"><table><tr><th>rank</th><th>kind</th><th>pictures"
             f"</th><th>samples</th><th>score</th><th>detail</th></tr>"]
    for rank, f in enumerate(found[:html_rows], 1):
        members = [i for i in (f.first, f.second) if i is not None]
        images = "".join(f'<img src="data:image/png;base64,{base64.b64encode(pictures(i)).decode("ascii")}" '
                         f'alt="{html.escape(samples.names[i])}">' for i in members)
        named_ = "<br>".join(f"{SPLIT_NAMES[samples.split[i]]}: {html.escape(samples.names[i])} "
                             f"({html.escape(label_text(samples.labels[i], classes))})" for i in members)
        kind = f.kind.replace("_", " ") + (" (across)" if f.across else "")
        parts.append(f"<tr><td>{rank}</td><td>{kind}</td><td class=\"pair\">{images}</td><td>{named_}</td>"
                     f"<td>{f.score:.4f}</td><td>{html.escape(f.detail)}</td></tr>")
    parts.append("</table></div>")
    parts.append(f"<h2>Thresholds</h2><pre>{html.escape(str(record['thresholds']))}</pre></body></html>")
    return "\n".join(parts)

