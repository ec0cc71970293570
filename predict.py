"""Predict with a trained run: top-k labels for image files and folders, a CSV or JSONL of rows, ONNX export.

    python predict.py runs/<run> photo.jpg more_photos/               # a top-k table
    python predict.py runs/<run> data/val --output preds.csv --top_k 3  # one row per file, in input order
    python predict.py runs/<run> data/val --ema                       # the EMA weights (--model_ema runs)
    python predict.py runs/<run> data/val --checkpoint runs/<run>/checkpoints/epoch_4
    accelerate launch --num_processes 2 predict.py runs/<run> many/ --output preds.jsonl
    python predict.py runs/<run> --export_onnx model.onnx             # uint8 (N, 3, H, W) in, logits out

The run's own options (config.yaml), class names (labels.json) and eval transform are used: the same
resize, crop, normalisation and decoding as its validation, so a run's val files give its val figures.
Folders are walked in sorted order. Under `accelerate launch` each file is predicted once, by one
process, and the rows come back in input order. When every file lies in a folder named after one of
the run's classes (a <class>/<file> layout), the top-1 accuracy against those names is printed too.
"""

import argparse
import csv
import io
import json
import sys
from pathlib import Path

PROG = "predict.py"


def get_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run folder written by train_classification.py (config.yaml, labels.json, weights)")
    p.add_argument("inputs", nargs="*", help="image files and folders")
    p.add_argument("--top_k", type=int, default=5, help="labels per file (at most the class count)")
    p.add_argument("--output", type=str, default=None, help="write one row per file to a .csv or .jsonl file")
    p.add_argument("--overwrite", action="store_true", help="replace --output / --export_onnx files that exist")
    p.add_argument("--batch_size", type=int, default=64, help="files per forward pass and process")
    p.add_argument("--num_workers", type=int, default=2, help="DataLoader workers per process")
    p.add_argument("--ema", action="store_true", help="use model_ema.safetensors (runs trained with --model_ema)")
    p.add_argument("--checkpoint", type=str, default=None, help="use this checkpoint folder's weights")
    p.add_argument("--skip_bad", action="store_true",
                   help="list files that cannot be decoded (their row says so) instead of stopping at the first")
    p.add_argument("--export_onnx", type=str, default=None, metavar="FILE",
                   help="write the eval graph (uint8 pixels in, logits out, dynamic batch) as ONNX")
    args = p.parse_args(argv)
    if args.top_k < 1 or args.batch_size < 1 or args.num_workers < 0:
        p.error("--top_k and --batch_size must be >= 1, --num_workers >= 0")
    if args.output and Path(args.output).suffix not in (".csv", ".jsonl"):
        p.error(f"--output: {args.output} must end in .csv or .jsonl")
    if not args.inputs and not args.export_onnx:
        p.error("give image files or folders to predict, or --export_onnx FILE")
    return args


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def main(argv=None):
    opts = get_args(argv)
    from accelerate import Accelerator

    from utils.inference import RunError, export_onnx, list_inputs, load_run

    import torch

    # On a machine without an accelerator, processes that a launcher started would not form a group
    # unless the CPU is asked for (see build_accelerator in train_classification.py).
    accelerator = Accelerator(cpu=not torch.accelerator.is_available())
    try:
        for target in (opts.output,):  # nothing already written is replaced unless asked
            if target and Path(target).exists() and not opts.overwrite:
                raise RunError(f"{target} exists; pass --overwrite to replace it")
        train_args, names, model = load_run(opts.run, ema=opts.ema, checkpoint=opts.checkpoint)
        if opts.export_onnx and accelerator.is_main_process:
            diff = export_onnx(model, train_args, opts.export_onnx, overwrite=opts.overwrite)
            check = f"; onnxruntime vs PyTorch logits: max abs diff {diff:.2e}" if diff is not None else ""
            print(f"onnx: {opts.export_onnx} (input 'pixels' uint8 (N, 3, H, W), output 'logits'){check}")
        if not opts.inputs:
            return None
        files = list_inputs(opts.inputs)
        rows = predict(accelerator, train_args, names, model, files, opts)
    except (RunError, ValueError) as e:
        fail(str(e).splitlines()[0])
    if accelerator.is_main_process:
        report(rows, names, opts)
    return rows


def predict(accelerator, train_args, names, model, files, opts):
    """One row per file, in input order, on the main process (None elsewhere)."""
    import torch
    from torch.utils.data import DataLoader

    from utils.inference import RunError, eval_dataset
    from utils.on_device import BatchInput

    top_k = min(opts.top_k, len(names))
    loader = DataLoader(eval_dataset(train_args, files), batch_size=opts.batch_size, num_workers=opts.num_workers,
                        shuffle=False)
    loader = accelerator.prepare(loader)  # each process its own batches; padded, and the padding dropped below
    model = model.to(accelerator.device)
    inputs = BatchInput(train_args, len(names), accelerator.process_index)
    probs, labels, valid, errors = [], [], [], {}
    with torch.no_grad():
        for batch in loader:
            bad = {s: e for s, e in zip(batch["source"], batch["error"]) if s}
            if bad and not opts.skip_bad:
                source, error = next(iter(bad.items()))
                raise RunError(f"cannot decode {source} ({error}); pass --skip_bad to list such files and go on")
            errors.update(bad)
            p = model(inputs(batch["pixel_values"])).float().softmax(dim=1)
            top = p.topk(top_k, dim=1)
            ok = torch.tensor([not s for s in batch["source"]], device=p.device)
            gathered = accelerator.gather_for_metrics((top.values, top.indices, ok))
            probs.append(gathered[0].cpu())
            labels.append(gathered[1].cpu())
            valid.append(gathered[2].cpu())
    errors = _gathered_errors(accelerator, errors)
    if not accelerator.is_main_process:
        return None
    probs, labels, valid = torch.cat(probs), torch.cat(labels), torch.cat(valid)
    assert len(probs) == len(files)
    rows = []
    for f, p, i, ok in zip(files, probs.tolist(), labels.tolist(), valid.tolist()):
        if ok:
            rows.append({"path": str(f), "labels": [names[j] for j in i], "probs": [round(x, 6) for x in p]})
        else:
            rows.append({"path": str(f), "labels": [], "probs": [], "error": errors.get(str(f), "cannot decode")})
    return rows


def _gathered_errors(accelerator, errors):
    from accelerate.utils import gather_object

    merged = {}
    for part in gather_object([errors]) if accelerator.num_processes > 1 else [errors]:
        merged.update(part)
    return merged


def report(rows, names, opts):
    """The table on the console (the first 20 rows of a long one), accuracy against class folders, the file."""
    width = max(len(r["path"]) for r in rows[:20])
    for r in rows[:20]:
        shown = "  ".join(f"{label} {p:.4f}" for label, p in zip(r["labels"], r["probs"])) or f"({r.get('error')})"
        print(f"{r['path']:<{width}}  {shown}")
    if len(rows) > 20:
        print(f"... {len(rows) - 20} more rows" + (f" in {opts.output}" if opts.output else " (--output FILE for all)"))
    truth = [Path(r["path"]).parent.name for r in rows]
    if all(t in names for t in truth):
        scored = [(r, t) for r, t in zip(rows, truth) if r["labels"]]
        correct = sum(r["labels"][0] == t for r, t in scored)
        print(f"top-1 against the class folders: {correct / len(scored):.4f} ({correct}/{len(scored)} files)")
    bad = sum(not r["labels"] for r in rows)
    if bad:
        print(f"{bad} file(s) could not be decoded (rows with an error)")
    if opts.output:
        write_rows(rows, Path(opts.output))
        print(f"{len(rows)} rows -> {opts.output}")


def write_rows(rows, path):
    from utils.io import write_text_atomic

    if path.suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        k = max(len(r["labels"]) for r in rows)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["path"] + [f"{kind}_{i + 1}" for i in range(k) for kind in ("label", "prob")] + ["error"])
        for r in rows:
            pairs = [v for pair in zip(r["labels"], r["probs"]) for v in pair]
            writer.writerow([r["path"], *pairs, *[""] * (2 * k - len(pairs)), r.get("error", "")])
        text = out.getvalue()
    write_text_atomic(path, text)


if __name__ == "__main__":
    main()
