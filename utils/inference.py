"""Using a trained run (predict.py): what it recorded and its weights (utils/run/trained.py), its own eval transform
over files (images, or videos with the run's clip sampling), the eval graph (uint8 pixels in, logits out) for
ONNX, and the files predict.py writes (rows, embeddings)."""

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import torch

from utils.data.datasets.clips import PathFrames, VideoClips
from utils.data.datasets.images import with_transform
from utils.data.decoding.bands import file_decoder
from utils.data.decoding.images import IMAGE_SUFFIXES
from utils.data.decoding.video import FRAME_SUFFIXES, VIDEO_READERS, VIDEO_SUFFIXES
from utils.data.sources.catalog import source_named
from utils.data.transforms.images import Fixed
from utils.core.io import write_bytes_atomic, write_text_atomic
from utils.data.transforms.video import video_eval, video_test
from utils.evaluation.tasks import kind_named
from utils.export.formats import FORMATS, export_metadata, format_of
from utils.export.graph import EvalGraph, example_pixels, input_shape, refuse_knn, temperature_of  # noqa: F401
from utils.run.trained import RunError, load_run, read_run, tuned_for  # noqa: F401 (predict.py's, with what follows)


def list_inputs(items, video=False):
    """The files to predict, in the order given: image files, or for a video run video files and frame
    folders (a folder of frame images, mmaction2's rawframes). A folder given is walked in sorted order
    (hidden entries skipped) for those; a file given is taken as it is. A path that does not exist is
    a RunError."""
    suffixes, kind = (VIDEO_SUFFIXES, "video files or frame folders") if video else (IMAGE_SUFFIXES, "image files")
    files = []
    for item in map(Path, items):
        if item.is_dir():
            found = len(files)
            for root, dirs, names in os.walk(item):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                names = sorted(n for n in names if not n.startswith("."))
                if video and not any(Path(n).suffix.lower() in VIDEO_SUFFIXES for n in names) and \
                        any(Path(n).suffix.lower() in FRAME_SUFFIXES for n in names):
                    files.append(Path(root))  # a video as frame images
                    dirs[:] = []
                    continue
                files += [Path(root) / n for n in names if Path(n).suffix.lower() in suffixes]
            if len(files) == found:
                raise RunError(f"{item}: holds no {kind}")
        elif item.is_file():
            files.append(item)
        else:
            raise RunError(f"{item}: no such file or folder")
    if not files:
        raise RunError(f"no {kind} in {', '.join(map(str, items))}")
    return files


def eval_dataset(run, files, multi_view=False):
    """`files` through the trained `run`'s own eval transform, read as its validation read (utils/data/sources/):
    the same pixels. Each item holds pixel_values (uint8), valid, source and error. Video: the run's val clip of
    each file, or with `multi_view` its test views (its --test_clips clips of each video, item i = clip i % clips
    of video i // clips, each (--test_crops, C, T, H, W)). Returns (dataset, items per file)."""
    inp = run.input
    if inp.video:
        return _video_dataset(run, files, multi_view)
    import datasets

    rows = datasets.Dataset.from_dict(
        {"image": [str(f) for f in files], "label": [0] * len(files)},
        features=datasets.Features(image=datasets.Image(), label=datasets.Value("int64")))
    transform = source_named(run.source).file_transform(inp)  # the digits' own, else the eval resize and crop
    # Undecoded rows: our decoder reads each file (its bands, for files of their own channels and bits), and one that
    # fails becomes a row marked invalid.
    return with_transform(rows, Fixed(transform, inp.val_crop_size), decoded=False, decode=file_decoder(inp)), 1


def _video_dataset(run, files, multi_view):
    inp, paths = run.input, [str(f) for f in files]
    shape = input_shape(inp)
    clips, crops = (run.test_clips or 1, run.test_crops or 1) if multi_view else (1, None)
    transform = video_test(inp, crops) if multi_view else video_eval(inp)
    dataset = VideoClips(PathFrames(paths, VIDEO_READERS[run.video_decoder]), [0] * len(paths), clip_len=inp.clip_len,
                         interval=inp.frame_interval, segments=inp.num_segments, transform=transform, clips=clips,
                         names=paths, shape=(crops, *shape) if multi_view else shape)
    return dataset, clips


def export_onnx(model, run, path, overwrite=False, task=None):
    """predict.py --export_onnx: the eval graph with a dynamic batch at `path`, carrying what export.py's files carry
    (utils/export/formats.py Onnx, torch's dynamo exporter); with onnxruntime installed, run beside PyTorch on a batch:
    the largest absolute difference of the outputs (else None). export.py checks every validation sample instead."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise RunError(f"{path} exists; pass --overwrite to replace it")
    refuse_knn(model)
    task = task if task is not None else kind_named(run.label_kind).of(len(run.classes))  # the run's own outputs
    inp, onnx = run.input, FORMATS["onnx"]
    graph = EvalGraph(model, inp, task).eval()
    tmp = path.with_name(f".{path.name}.tmp")
    onnx.write(graph, example_pixels(inp, 2, seed=0), tmp, export_metadata(onnx, run, task, temperature_of(model)))
    os.replace(tmp, path)
    try:
        runner = onnx.load(path)
    except RunError:  # no onnxruntime here: written, not checked
        return None
    check = example_pixels(inp, 3, seed=1)
    with torch.no_grad():
        expected = graph(check).numpy()
    return float(abs(runner(check.numpy()) - expected).max())


class ExportedModel(torch.nn.Module):
    """predict.py --backend: an export of a run (export.py's file, run by its runtime) where its model stands. Given the
    pixels (the export normalises them in its graph), what the run's `task` scores: its `exported_logits`."""

    def __init__(self, runner, task):
        super().__init__()
        self.runner, self.task = runner, task

    def forward(self, pixels):
        output = torch.from_numpy(self.runner(np.ascontiguousarray(pixels.cpu().numpy())))
        return self.task.exported_logits(output).to(pixels.device)


def exported_model(path, run):
    """The ExportedModel of the export at `path`, once its metadata says it is one of `run`'s (its classes, its
    input); a RunError otherwise."""
    fmt = format_of(path)
    said = fmt.metadata(path)
    if "classes" not in said:
        raise RunError(f"--backend: {path} was not written by export.py (its metadata names no classes)")
    if json.loads(said["classes"]) != run.classes or said.get("label_kind") != run.label_kind:
        raise RunError(f"--backend: {path} is the export of another run (its classes or kind of labels differ)")
    if json.loads(said.get("input_shape", "[]"))[1:] != list(input_shape(run.input)):
        raise RunError(f"--backend: {path} takes inputs of shape {said.get('input_shape')}, the run's eval input is "
                       f"{list(input_shape(run.input))}")
    return ExportedModel(fmt.load(path), kind_named(run.label_kind).of(len(run.classes)))


def write_rows(rows, path, predicted=False):
    """predict.py's rows to a .jsonl (one object a row, its embedding left out) or .csv file, whole; `predicted`:
    the rows hold the labels predicted at the thresholds (a thresholded kind of labels: multi-label)."""
    if path.suffix == ".jsonl":
        text = "".join(json.dumps({k: v for k, v in r.items() if k != "embedding"}) + "\n" for r in rows)
    else:
        k = max(len(r["labels"]) for r in rows)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["path"] + ["predicted"] * predicted + [f"{kind}_{i + 1}" for i in range(k)
                                                           for kind in ("label", "prob")] + ["error"])
        for r in rows:
            pairs = [v for pair in zip(r["labels"], r["probs"]) for v in pair]
            writer.writerow([r["path"], *([" ".join(r["predicted"])] if predicted else []), *pairs,
                             *[""] * (2 * k - len(pairs)), r.get("error", "")])
        text = out.getvalue()
    write_text_atomic(path, text)


def write_embeddings(rows, path):
    """The rows' embeddings to `path`, whole (a temporary name, then renamed): .npy, a float32 (files, dim) array, NaN
    for a file that could not be decoded; .parquet, a path column and an embedding column (null for those). Their
    dimension."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = max((len(r["embedding"]) for r in rows if r["embedding"] is not None), default=0)
    vectors = np.full((len(rows), dim), np.nan, dtype=np.float32)
    for i, r in enumerate(rows):
        if r["embedding"] is not None:
            vectors[i] = r["embedding"].numpy()
    out = io.BytesIO()
    if path.suffix == ".npy":
        np.save(out, vectors)
    else:
        mask = pa.array([r["embedding"] is None for r in rows])
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim, mask=mask)
        pq.write_table(pa.table({"path": [r["path"] for r in rows], "embedding": embedding}), out)
    write_bytes_atomic(path, out.getvalue())
    return dim

