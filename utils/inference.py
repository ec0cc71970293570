"""Using a trained run (predict.py): what it recorded and its weights (utils/run/trained.py), its own eval transform
over files (images, or videos with the run's clip sampling), the eval graph (uint8 pixels in, logits out) for
ONNX, and the files predict.py writes (rows, embeddings)."""

import csv
import io
import json
import os
from pathlib import Path

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
from utils.evaluation.knn import KnnHead
from utils.run.trained import RunError, load_run, tuned_for  # noqa: F401 (predict.py's, with what follows)


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


def input_shape(inp):
    """One input of the eval graph: (C, H, W), or (C, T, H, W) for a video run's clips."""
    if inp.video:
        return (inp.channels, inp.frames, inp.image_size, inp.image_size)
    return (inp.channels, inp.val_crop_size, inp.val_crop_size)


class EvalGraph(torch.nn.Module):
    """uint8 (N, C, H, W) pixels, or (N, C, T, H, W) clips -> what the run's `task` exports (a single-label run's
    logits, a multi-label run's probabilities, each class's own; default: logits): the run's normalisation (the
    arithmetic of utils/data/transforms/batch.py) and the model, as one graph to export. A run on files of their own
    channels and bits takes their raw values, the run's bands, as float32 (what utils/data/decoding/bands.py reads),
    divided by its pixel_max in the graph."""

    def __init__(self, model, inp, task=None):
        super().__init__()
        self.model, self.pixel_max = model, inp.pixel_max
        self.output = task.exported_output if task is not None else None
        mean, std = inp.mean_std or ((0.0,) * 3, (1.0,) * 3)
        shape = (1, -1) + (1,) * (3 if inp.video else 2)
        self.register_buffer("mean", torch.tensor(mean).view(shape))
        self.register_buffer("std", torch.tensor(std).view(shape))

    def forward(self, pixels):
        scaled = pixels.float() / 255 if self.pixel_max is None else pixels / self.pixel_max
        logits = self.model(scaled.sub(self.mean).div(self.std))
        return logits if self.output is None else self.output(logits)


def example_pixels(inp, count, seed):
    """`count` random inputs of the eval graph: uint8 pixels, or raw values up to the run's pixel_max."""
    generator = torch.Generator().manual_seed(seed)
    if inp.pixel_max is None:
        return torch.randint(0, 256, (count, *input_shape(inp)), dtype=torch.uint8, generator=generator)
    return (torch.rand((count, *input_shape(inp)), generator=generator) * inp.pixel_max).round()


def export_onnx(model, inp, path, overwrite=False, task=None):
    """Write the eval graph with a dynamic batch to `path` (torch's dynamo exporter; onnx and onnxscript
    needed); with onnxruntime installed, run it beside PyTorch on a batch and return the largest
    absolute difference of the logits (else None)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise RunError(f"{path} exists; pass --overwrite to replace it")
    if any(isinstance(module, KnnHead) for module in model.modules()):
        raise RunError("export_onnx: a --probe knn run votes over its memory bank, not a graph ONNX holds; export a "
                       "--probe linear run")
    graph = EvalGraph(model, inp, task).eval()
    example = example_pixels(inp, 2, seed=0)
    batch = torch.export.Dim("batch", min=1)
    try:
        program = torch.onnx.export(graph, (example,), dynamo=True, dynamic_shapes={"pixels": {0: batch}},
                                    input_names=["pixels"], output_names=[task.exported if task else "logits"],
                                    verbose=False)
    except ImportError as e:
        raise RunError(f"export_onnx: {e} (pip install onnx onnxscript)") from None
    tmp = path.with_name(f".{path.name}.tmp")
    program.save(str(tmp))
    os.replace(tmp, path)
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    check = example_pixels(inp, 3, seed=1)
    with torch.no_grad():
        expected = graph(check).numpy()
    return float(abs(session.run(None, {"pixels": check.numpy()})[0] - expected).max())


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

