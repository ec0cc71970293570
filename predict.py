"""Predict with a trained run: top-k labels for images or videos, a CSV or JSONL of rows, ONNX export, or its export.

    python predict.py runs/<run> photo.jpg more_photos/               # a top-k table
    python predict.py runs/<run> data/val --output preds.csv --top_k 3  # one row per file, in input order
    python predict.py runs/<run> data/val --ema                       # the EMA weights (--model_ema runs)
    python predict.py runs/<run> data/val --checkpoint runs/<run>/checkpoints/epoch_4
    accelerate launch --num_processes 2 predict.py runs/<run> many/ --output preds.jsonl
    python predict.py runs/<video run> clips/ --multi_view           # the run's --test_clips x --test_crops views
    python predict.py runs/<run> --export_onnx model.onnx             # uint8 (N, 3, [T,] H, W) in, logits out
                                                                      # (a run of --bands: their raw values, float32)
    python predict.py runs/<multi-label run> tiles/ --threshold tuned  # every label at its class's tuned threshold
    python predict.py runs/<run> photos/ --embeddings feats.parquet   # each file's feature vector too (or .npy)
    python predict.py runs/<run> photos/ --backend runs/<run>/export/onnx_int8.onnx  # export.py's file, its runtime

What the run recorded (run.json: its model and input), its class names (labels.json) and its eval transform
are used, never its training data (a copied run folder works anywhere): the same resize, crop, normalisation
and decoding as its validation, so a run's val files give its val figures.
A video run reads video files and frame folders (a folder of frame images is one video) and scores
the run's val clip of each (its val_top1), or with --multi_view the softmax averaged over its test
views (its video_top1). Folders are walked in sorted order. Under `accelerate launch` each file is predicted once, by
one process, and the rows come back in input order. When every file lies in a folder named after one of
the run's classes (a <class>/<file> layout), the top-1 accuracy against those names is printed too.
A multi-label run (several labels a sample) lists every label whose sigmoid probability is at least the threshold
(the run's --threshold, another, or `tuned`: each class's F1-best on the run's validation, model/thresholds.json),
then the top-k probabilities; its ONNX graph ends in the sigmoid (output 'probabilities').
A run's --calibrate temperature and tuned thresholds fit the weights model/ holds (the EMA's of a --model_ema run:
--ema): other weights' logits are used as they are (a line says so), and --threshold tuned is refused for them.
"""

import argparse
import contextlib
import json
from pathlib import Path

from utils.core.cli import OneLineParser

PROG = "predict.py"


def get_args(argv=None):
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run folder written by train_classification.py (run.json, labels.json, weights)")
    p.add_argument("inputs", nargs="*", help="image files, video files, folders of them (frame folders: videos)")
    p.add_argument("--top_k", type=int, default=5, help="labels per file (at most the class count)")
    p.add_argument("--output", type=str, default=None, help="write one row per file to a .csv or .jsonl file")
    p.add_argument("--overwrite", action="store_true", help="replace --output / --export_onnx files that exist")
    p.add_argument("--batch_size", type=int, default=64, help="files per forward pass and process")
    p.add_argument("--num_workers", type=int, default=2, help="DataLoader workers per process")
    p.add_argument("--ema", action="store_true", help="use model_ema.safetensors (runs trained with --model_ema)")
    p.add_argument("--checkpoint", type=str, default=None, help="use this checkpoint folder's weights")
    p.add_argument("--tta", type=str, default=None, choices=("flip",),
                   help="average each view's softmax with its horizontal flip's (as the run's --tta flip scored)")
    p.add_argument("--threshold", type=str, default=None,
                   help="multi-label runs: list the labels with a probability at least this (default: the run's "
                        "--threshold), or 'tuned': each class's threshold tuned on validation (model/thresholds.json)")
    p.add_argument("--multi_view", action="store_true",
                   help="video runs: average the run's --test_clips x --test_crops views of each video")
    p.add_argument("--skip_bad", action="store_true",
                   help="list files that cannot be decoded (their row says so) instead of stopping at the first")
    p.add_argument("--export_onnx", type=str, default=None, metavar="FILE",
                   help="write the eval graph (uint8 pixels or clips in, or a multispectral run's raw band values as "
                        "float32; logits out, dynamic batch) as ONNX")
    p.add_argument("--backend", type=str, default=None, metavar="FILE",
                   help="predict with this export of the run (export.py's .onnx, .xml or .pt2, run by its own runtime) "
                        "instead of its PyTorch weights: the same rows")
    p.add_argument("--embeddings", type=str, default=None, metavar="FILE",
                   help="also write each file's feature vector, in input order, to FILE: .npy (float32, one row a "
                        "file, NaN for a file that cannot be decoded) or .parquet (columns path and embedding)")
    p.add_argument("--embedding_layer", type=str, default=None, metavar="NAME",
                   help="--embeddings: this layer's output flattened (a name of model.named_modules()) instead of "
                        "what the classifier reads (the penultimate layer)")
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p, args):
    """The parser's `p.error` (exit 2) for options that do not go together."""
    if args.top_k < 1 or args.batch_size < 1 or args.num_workers < 0:
        p.error("--top_k and --batch_size must be >= 1, --num_workers >= 0")
    if args.output and Path(args.output).suffix not in (".csv", ".jsonl"):
        p.error(f"--output: {args.output} must end in .csv or .jsonl")
    if args.embeddings and Path(args.embeddings).suffix not in (".npy", ".parquet"):
        p.error(f"--embeddings: {args.embeddings} must end in .npy or .parquet")
    if args.embedding_layer and not args.embeddings:
        p.error("--embedding_layer: names the layer --embeddings reads; add --embeddings FILE or drop it")
    if args.embeddings and not args.inputs:
        p.error("--embeddings: give the image files or folders to embed")
    if not args.inputs and not args.export_onnx:
        p.error("give image files or folders to predict, or --export_onnx FILE")
    if args.backend:
        taken = [name for name, on in (("--ema", args.ema), ("--checkpoint", args.checkpoint),
                                       ("--embeddings", args.embeddings), ("--export_onnx", args.export_onnx)) if on]
        if taken:
            p.error(f"{taken[0]}: --backend runs an exported file, which holds the weights it was exported with and "
                    f"outputs the classes' scores only; drop one of the two")
        if not args.inputs:
            p.error("--backend: give the image files or folders to predict")
    if args.threshold not in (None, "tuned"):
        try:
            args.threshold = float(args.threshold)
        except ValueError:
            p.error(f"--threshold: {args.threshold!r} is neither a number nor 'tuned'")
        if not 0 < args.threshold < 1:
            p.error(f"--threshold: {args.threshold} must be in (0, 1)")


def fail(message):
    from utils.core.errors import report

    report(PROG, message)


def main(argv=None):
    opts = get_args(argv)
    import torch
    from accelerate import Accelerator

    from utils.core.errors import UserError
    from utils.evaluation.tasks import kind_named
    from utils.inference import RunError, exported_model, export_onnx, input_shape, list_inputs, load_run, read_run, \
        tuned_for

    # On a machine without an accelerator, processes that a launcher started would not form a group
    # unless the CPU is asked for (see build_accelerator in train_classification.py).
    accelerator = Accelerator(cpu=not torch.accelerator.is_available())
    try:
        for target in (opts.output, opts.embeddings):  # nothing already written is replaced unless asked
            if target and Path(target).exists() and not opts.overwrite:
                raise RunError(f"{target} exists; pass --overwrite to replace it")
        if opts.ema and opts.checkpoint:
            raise RunError("--ema: the EMA weights are the run's final ones (model_ema.safetensors); --checkpoint "
                           "reads a checkpoint folder's trained weights: drop one of the two")
        if opts.backend:  # an export of the run: what it recorded, and the file in place of its weights
            run = read_run(opts.run)
            model = exported_model(opts.backend, run)
        else:
            run, model = load_run(opts.run, ema=opts.ema, checkpoint=opts.checkpoint)  # what the run recorded
        if run.temperature != 1.0 and not tuned_for(run, opts.ema, opts.checkpoint) and accelerator.is_main_process \
                and not opts.backend:
            print(f"calibration: the run's temperature {run.temperature:.4f} was fitted to {run.tuned_on} (what "
                  f"model/ holds); these weights' logits are used as they are"
                  f"{' (add --ema for the calibrated ones)' if run.tuned_on == 'model_ema.safetensors' else ''}")
        inp = run.input  # its eval input: sizes, normalisation, clips
        task = kind_named(run.label_kind).of(len(run.classes), tta_kind=opts.tta)  # softmax, or a sigmoid a class
        if opts.export_onnx and accelerator.is_main_process:
            diff = export_onnx(model, run, opts.export_onnx, overwrite=opts.overwrite, task=task)
            output = task.exported
            check = f"; onnxruntime vs PyTorch {output}: max abs diff {diff:.2e}" if diff is not None else ""
            shape = ", ".join(map(str, input_shape(inp)))
            kind = "uint8" if run.input.pixel_max is None else f"float32 raw values up to {run.input.pixel_max:g}"
            print(f"onnx: {opts.export_onnx} (input 'pixels' {kind} (N, {shape}), output '{output}'){check}")
        if not opts.inputs:
            accelerator.end_training()
            return None
        if opts.multi_view and not inp.video:
            raise RunError("--multi_view: an image run has one view per file; drop the option")
        thresholds = label_thresholds(run, task, opts)
        files = list_inputs(opts.inputs, video=inp.video)
        rows = predict(accelerator, run, task, model, files, opts, thresholds)
    except (UserError, ValueError) as e:  # ours, or a library refusing a value
        fail(str(e).splitlines()[0])
    if accelerator.is_main_process:
        report(rows, run.classes, opts, task)
    # The process group torn down before the interpreter: once, a rank left it to exit and died of
    # "terminate called without an active exception" (SIGABRT) after its work was done.
    accelerator.end_training()
    return rows


def label_thresholds(run, task, opts):
    """Multi-label runs: each class's threshold (--threshold, tuned, or the run's own); None for single-label runs."""
    from utils.inference import RunError, tuned_for

    if not task.thresholded:
        if opts.threshold is not None:
            raise RunError("--threshold: the run is single-label (one class a file, listed top-k); drop the option")
        return None
    if opts.threshold != "tuned":
        return [run.threshold if opts.threshold is None else opts.threshold] * len(run.classes)
    saved = Path(opts.run) / "model" / "thresholds.json"
    if not tuned_for(run, opts.ema, opts.checkpoint):
        fix = "drop --checkpoint" if opts.checkpoint else "add --ema"
        raise RunError(f"--threshold tuned: {saved} holds the thresholds tuned for the run's {run.tuned_on} (what "
                       f"model/ holds), not for these weights; {fix}, or give a number")
    if not saved.is_file():
        raise RunError(f"--threshold tuned: {saved} does not exist (written at the end of a multi-label run's "
                       f"training); give a number instead")
    tuned = json.loads(saved.read_text())["tuned"]
    return [tuned[name] for name in run.classes]


def predict(accelerator, run, task, model, files, opts, thresholds=None):
    """One row per file, in input order, on the main process (None elsewhere), scored by the run's `task`;
    `thresholds`: a multi-label run's per class. With --embeddings, each row holds its file's feature vector too
    ("embedding": the mean over its views, as its probabilities are)."""
    import torch
    from torch.utils.data import DataLoader

    from utils.data.loading.bad_files import BadImages
    from utils.data.transforms.batch import BatchInput
    from utils.evaluation.scoring import scored_batches
    from utils.inference import eval_dataset
    from utils.models.features import Features
    from utils.run.trained import unwrapped

    dataset, per_file = eval_dataset(run, files, multi_view=opts.multi_view)
    loader = DataLoader(dataset, batch_size=opts.batch_size, num_workers=opts.num_workers, shuffle=False)
    loader = accelerator.prepare(loader)  # each process its own batches; padded, the padding dropped when gathered
    model = model.to(accelerator.device).eval()
    # normalisation alone, as validation feeds it; an export normalises inside its graph, from the pixels
    inputs = (lambda pixels: pixels) if opts.backend else BatchInput(run.input.mean_std, pixel_max=run.input.pixel_max)
    bad_files = BadImages(opts.skip_bad, hint="pass --skip_bad to list such files and go on")
    features = Features(unwrapped(model), run.model, opts.embedding_layer) if opts.embeddings else None

    def score(batch):
        pixels = batch["pixel_values"]
        crops = pixels.shape[1] if opts.multi_view else 1  # multi-view items: (B, crops, C, T, H, W)
        p = task.probabilities(model, inputs(pixels.flatten(0, 1) if opts.multi_view else pixels))
        fields = (p.view(len(pixels), crops, -1).mean(dim=1),)
        if features is not None:
            fields += (features.take(len(pixels) * crops).view(len(pixels), crops, -1).mean(dim=1),)
        return fields

    pending, done_files = None, []
    with features or contextlib.nullcontext():
        for scored in scored_batches(accelerator, loader, score, bad_files):  # in item order: a file's items together
            fresh = (*scored.fields, scored.valid)
            pending = fresh if pending is None else tuple(torch.cat([a, b]) for a, b in zip(pending, fresh))
            done = len(pending[0]) // per_file * per_file
            done_files.append(_per_file([t[:done] for t in pending], per_file))
            pending = tuple(t[done:] for t in pending)
    errors = _gathered_errors(accelerator, bad_files.found)
    if not accelerator.is_main_process:
        return None
    *values, valid = (torch.cat(column) for column in zip(*done_files))
    assert len(valid) == len(files)
    rows = _rows(files, values[0], valid, run.classes, errors, min(opts.top_k, len(run.classes)), thresholds)
    if features is not None:
        for row, vector, ok in zip(rows, values[1], valid.tolist()):
            row["embedding"] = vector if ok else None
    return rows


def _rows(files, probs, valid, names, errors, top_k, thresholds=None):
    """One row per file: its top-k labels and probabilities, or its error; with `thresholds` (multi-label: each
    class's) the labels predicted too."""
    import torch

    top = probs.topk(top_k, dim=1)
    chosen = (probs >= torch.tensor(thresholds, dtype=probs.dtype)).tolist() if thresholds is not None else None
    rows = []
    for n, (f, p, i, ok) in enumerate(zip(files, top.values.tolist(), top.indices.tolist(), valid.tolist())):
        if ok:
            rows.append({"path": str(f), "labels": [names[j] for j in i], "probs": [round(x, 6) for x in p]})
        else:
            rows.append({"path": str(f), "labels": [], "probs": [], "error": errors.get(str(f), "cannot decode")})
        if chosen is not None:  # multi-label: the labels predicted; `labels`/`probs` stay the top-k
            rows[-1]["predicted"] = [name for name, on in zip(names, chosen[n]) if on] if ok else []
    return rows


def _per_file(columns, per_file):
    """Each file's values (a column of float tensors, then the validity): the mean over its items that decoded (a
    video's clips, as the run's multi-view test averages them), in float64; valid when any did."""
    *values, ok = columns
    ok = ok.view(-1, per_file)
    counts = ok.sum(dim=1).clamp(min=1)[:, None]
    means = [(v.double().view(len(ok), per_file, v.shape[1]) * ok[..., None]).sum(dim=1) / counts for v in values]
    return (*means, ok.any(dim=1))


def _gathered_errors(accelerator, errors):
    from accelerate.utils import gather_object

    merged = {}
    for part in gather_object([errors]) if accelerator.num_processes > 1 else [errors]:
        merged.update(part)
    return merged


def report(rows, names, opts, task):
    """The table on the console (the first 20 rows of a long one), accuracy against class folders (the run's `task`
    deciding one class a file), the files."""
    from utils.inference import write_embeddings, write_rows

    width = max(len(r["path"]) for r in rows[:20])
    for r in rows[:20]:
        shown = "  ".join(f"{label} {p:.4f}" for label, p in zip(r["labels"], r["probs"])) or f"({r.get('error')})"
        if task.thresholded:  # the labels predicted at the thresholds, then the top-k
            shown = f"[{' '.join(r['predicted'])}]  top: {shown}"
        print(f"{r['path']:<{width}}  {shown}")
    if len(rows) > 20:
        print(f"... {len(rows) - 20} more rows" + (f" in {opts.output}" if opts.output else " (--output FILE for all)"))
    truth = [Path(r["path"]).parent.name for r in rows]
    if all(t in names for t in truth) and not task.thresholded:
        scored = [(r, t) for r, t in zip(rows, truth) if r["labels"]]
        correct = sum(r["labels"][0] == t for r, t in scored)
        print(f"top-1 against the class folders: {correct / len(scored):.4f} ({correct}/{len(scored)} files)")
    bad = sum(not r["labels"] for r in rows)
    if bad:
        print(f"{bad} file(s) could not be decoded (rows with an error)")
    if opts.output:
        write_rows(rows, Path(opts.output), predicted=task.thresholded)
        print(f"{len(rows)} rows -> {opts.output}")
    if opts.embeddings:
        dim = write_embeddings(rows, Path(opts.embeddings))
        print(f"{len(rows)} embeddings of {dim} values -> {opts.embeddings}")


if __name__ == "__main__":
    main()
