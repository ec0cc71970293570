"""Export a trained run to the runtimes people deploy on, each file checked against the PyTorch model over the run's
whole validation split, sample by sample.

    pip install -r requirements-export.txt                          # ONNX Runtime, OpenVINO, NNCF
    python export.py runs/<run> --format onnx                        # -> runs/<run>/export/onnx.onnx (+ .parity.json)
    python export.py runs/<run> --format onnx_int8                   # static int8 (QDQ, per channel), calibrated on
                                                                     # 300 training images drawn by --seed
    python export.py runs/<run> --format openvino_int8 --accuracy_control 1.0  # NNCF, at most 1 point below fp32
    python export.py runs/<run> --format pt2 --output model.pt2      # AOTInductor: torch alone runs it
    accelerate launch --num_processes 2 export.py runs/<run> --format onnx_fp16  # the check sharded, same figures
    python predict.py runs/<run> photos/ --backend runs/<run>/export/onnx_int8.onnx  # predict with the export

Formats (utils/export/formats.py): onnx, onnx_fp16, onnx_int8 (ONNX Runtime), openvino, openvino_int8 (OpenVINO IR,
NNCF), pt2 (torch.export + AOTInductor); tensorrt is refused in one line (build it from the ONNX file on the GPU).
Every file holds the eval graph: uint8 pixels (N, C, H, W), or (N, C, T, H, W) clips, in (a run of --bands: its raw
values as float32), the run's normalisation inside, out the logits (divided by --calibrate's temperature) or, for a
multi-label run, each class's probability; the file's own metadata (ONNX metadata_props, OpenVINO rt_info, the
package's metadata) says so, with the class names, input size, band count, mean/std and the thresholds.

The parity record (<file stem>.parity.json): the score (top-1, or mAP) of the PyTorch model and of the export, the share
of samples whose answer agrees (the top class, or the label set at the run's thresholds), the largest probability
difference, the file's size, and images/s at batch 1 and 32 for the export and for eager PyTorch, measured one after
the other on this machine. Below --min_agreement (by default 0.999 for fp32, 0.995 for fp16, 0.98 for int8) the file
is kept as <stem>.failed<suffix> and the script exits 1 with the figures. Bad input (an unknown format, a run folder
without weights, a model the format cannot hold, a file that exists without --overwrite, a runtime not installed) is
one line and exit 2, before anything is written.
"""

import argparse
import sys
from pathlib import Path

from utils.core.cli import OneLineParser

PROG = "export.py"
FORMAT_NAMES = ("onnx", "onnx_fp16", "onnx_int8", "openvino", "openvino_int8", "pt2", "tensorrt")


def get_args(argv=None):
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run folder written by train_classification.py (config.yaml, run.json, weights)")
    p.add_argument("--format", required=True, choices=FORMAT_NAMES, help="what to write")
    p.add_argument("--output", type=str, default=None, metavar="FILE",
                   help="the exported file (default: RUN/export/<format><suffix>); its parity record beside it")
    p.add_argument("--overwrite", action="store_true", help="replace an export (and its record) that exists")
    p.add_argument("--ema", action="store_true", help="export model_ema.safetensors (runs trained with --model_ema)")
    p.add_argument("--min_agreement", type=float, default=None,
                   help="the share of validation samples whose answer must agree (default: 0.999 fp32, 0.995 fp16, "
                        "0.98 int8)")
    p.add_argument("--calibration_samples", type=int, default=300,
                   help="int8: training samples (the eval transform) whose activations set the ranges")
    p.add_argument("--seed", type=int, default=0, help="int8: which training samples calibrate")
    p.add_argument("--accuracy_control", type=float, default=None, metavar="POINTS",
                   help="openvino_int8: NNCF's accuracy-aware quantization, the score on as many other training "
                        "samples at most POINTS below fp32's")
    p.add_argument("--batch_size", type=int, default=32, help="validation samples per forward pass and process")
    p.add_argument("--num_workers", type=int, default=2, help="DataLoader workers per process")
    p.add_argument("--timing_seconds", type=float, default=2.0,
                   help="how long each of the four speed measurements runs (0: three calls each)")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.num_workers < 0 or args.calibration_samples < 1 or args.timing_seconds < 0:
        p.error("--batch_size and --calibration_samples must be >= 1, --num_workers and --timing_seconds >= 0")
    if args.min_agreement is not None and not 0 <= args.min_agreement <= 1:
        p.error(f"--min_agreement: {args.min_agreement} must be in [0, 1]")
    if args.accuracy_control is not None and args.format != "openvino_int8":
        p.error("--accuracy_control: NNCF's accuracy-aware mode quantizes OpenVINO IR; use it with --format "
                "openvino_int8")
    if args.accuracy_control is not None and not 0 < args.accuracy_control < 100:
        p.error(f"--accuracy_control: {args.accuracy_control} points must be in (0, 100)")
    return args


def main(argv=None):
    opts = get_args(argv)
    import torch
    from accelerate import Accelerator

    from utils.core.errors import UserError, report

    # As predict.py: on a machine without an accelerator, launched processes form a group on the CPU
    accelerator = Accelerator(cpu=not torch.accelerator.is_available())
    try:
        record = export(accelerator, opts)
    except (UserError, ValueError) as e:
        report(PROG, str(e).splitlines()[0])
    accelerator.end_training()
    if record is not None and not record["passed"]:
        sys.exit(1)
    return record


def export(accelerator, opts):
    """Write the export, check it on every process's shard of the validation split, and (main process) its record;
    the record, or None on the other processes."""
    from accelerate.utils import broadcast_object_list

    from utils.core.errors import UserError
    from utils.core.io import write_json_atomic
    from utils.data.loading.loaders import stop_workers
    from utils.export.formats import FORMATS, MIN_AGREEMENT, export_metadata, one_line, thresholds_of
    from utils.export.graph import EvalGraph, example_pixels, refuse_knn, temperature_of
    from utils.export.parity import compared, figures, speeds
    from utils.export.sample import calibration
    from utils.evaluation.tasks import kind_named
    from utils.inference import RunError, load_run

    fmt = FORMATS[opts.format]
    why = fmt.available()
    if why:
        raise RunError(why)
    run_dir = Path(opts.run)
    target = Path(opts.output) if opts.output else run_dir / "export" / f"{fmt.name}{fmt.suffix}"
    if target.suffix != fmt.suffix:
        raise RunError(f"--output: {target} must end in {fmt.suffix} for --format {fmt.name}")
    failed = failed_name(target)
    written = [f for name in (target, failed) for f in fmt.files(name) + [record_name(name)] if f.exists()]
    if written and not opts.overwrite:
        raise RunError(f"{written[0]} exists; pass --overwrite to replace it")
    accelerator.wait_for_everyone()  # every process has looked before any writes
    run, model = load_run(run_dir, ema=opts.ema)
    refuse_knn(model)
    task = kind_named(run.label_kind).of(len(run.classes), threshold=run.threshold)
    thresholds = thresholds_of(run, task)
    settings, train, val, loader, bad_files = validation_of(accelerator, run_dir, run, opts)
    graph = EvalGraph(model, run.input, task).eval()
    metadata = export_metadata(fmt, run, task, temperature_of(model))
    problem = [None]
    if accelerator.is_main_process:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            made_with = calibration(train, val, task, opts.calibration_samples, opts.seed, opts.accuracy_control) \
                if fmt.quantized else None
            write_in_place(fmt, graph, example_pixels(run.input, 2, seed=0), target, metadata, made_with)
        except UserError as e:
            problem = [str(e)]
        except Exception as e:  # a runtime's converter or quantizer stopping on the model
            problem = [f"--format {fmt.name}: {type(e).__name__}: {one_line(e)}"]
    if accelerator.num_processes > 1:
        broadcast_object_list(problem)  # the other processes stop with the main one's line, not in a wait
    if problem[0]:
        raise RunError(problem[0])
    runner = fmt.load(target)
    try:
        (eager, exported, labels), samples = compared(accelerator, loader, graph, runner, task, bad_files)
    finally:  # the loader's kept workers end with the check: an export run in a process leaves none behind
        stop_workers(loader)
    if not accelerator.is_main_process:
        return None
    found = figures(task, eager, exported, labels, thresholds)
    minimum = opts.min_agreement if opts.min_agreement is not None else MIN_AGREEMENT[fmt.precision]
    record = {"format": fmt.name, "precision": fmt.precision, "file": target.name,
              "bytes": sum(f.stat().st_size for f in fmt.files(target)), "run": str(run_dir),
              "weights": "model_ema.safetensors" if opts.ema else "model.safetensors", **found,
              "min_agreement": minimum, "passed": found["agreement"] >= minimum,
              "calibration": {"samples": opts.calibration_samples, "seed": opts.seed,
                              "accuracy_control": opts.accuracy_control} if fmt.quantized else None,
              "images_per_second": speeds(graph, runner, samples, opts.timing_seconds),
              "threads": torch_threads()}
    final, stale = (target, failed) if record["passed"] else (failed, target)
    for made, kept in zip(fmt.files(target), fmt.files(final)):
        made.replace(kept)
    for old in fmt.files(stale) + [record_name(stale)]:  # an earlier export's other outcome (--overwrite)
        old.unlink(missing_ok=True)
    record["file"] = final.name
    write_json_atomic(record_name(final), record)
    say(record, final, run, task, settings)
    return record


def validation_of(accelerator, run_dir, run, opts):
    """(the run's Settings, its train and val datasets as it built them with its own input, the val loader sharded
    over the processes, the bad-file policy it trained with)."""
    from dataclasses import replace

    from utils.data.loading.bad_files import BadImages
    from utils.inference import RunError
    from utils.run.trained import read_settings

    config = run_dir / "config.yaml"
    if not config.is_file():
        raise RunError(f"{config} does not exist: the parity check reads the run's validation data from it")
    settings = read_settings(config)
    # The pixels decoded here, as predict.py decodes them, whatever device decoded them in training
    settings = replace(settings, data=replace(settings.data, decode_on_device=False))
    with accelerator.main_process_first():
        train, val, _, _ = settings.source.datasets(settings.data, run.input, accelerator.process_index,
                                                    accelerator.num_processes)
    _, loader = settings.source.loaders(accelerator, train, val, opts.batch_size, opts.num_workers)
    bad_files = BadImages(settings.data.skip_bad_images, hint="the run skipped none: fix or remove the file")
    return settings, train, val, loader, bad_files


def write_in_place(fmt, graph, example, target, metadata, calibration):
    """The export written under temporary names beside `target`, then renamed: a file that is there is whole."""
    tmp = target.with_name(f".{target.stem}.tmp{target.suffix}")
    try:
        fmt.write(graph, example, tmp, metadata, calibration)
        for made, final in zip(fmt.files(tmp), fmt.files(target)):
            made.replace(final)
    finally:
        for left in fmt.files(tmp):
            left.unlink(missing_ok=True)


def failed_name(path):
    return path.with_name(f"{path.stem}.failed{path.suffix}")


def record_name(path):
    return path.with_name(f"{path.stem}.parity.json")


def torch_threads():
    import torch

    return torch.get_num_threads()


def say(record, path, run, task, settings):
    scored, unit = record["scored"], settings.sample_unit
    from utils.export.graph import input_shape

    shape = ", ".join(map(str, input_shape(run.input)))
    print(f"export: {record['format']} -> {path} ({record['bytes'] / 1e6:.2f} MB; input 'pixels' (N, {shape}), "
          f"output '{task.exported}')")
    print(f"parity over {record['samples']} validation {unit}: {scored} pytorch {record['pytorch']:.4f} export "
          f"{record['export']:.4f}; agreement {record['agreement']:.4f} ({record['disagreeing']} differ); largest "
          f"probability difference {record['max_probability_difference']:.2e}")
    for batch, pair in record["images_per_second"].items():
        print(f"speed at batch {batch} ({unit}/s, {record['threads']} threads): pytorch {pair['pytorch']:.1f}, export "
              f"{pair['export']:.1f} ({pair['export'] / pair['pytorch']:.2f}x)")
    verdict = "passed" if record["passed"] else "FAILED: the file kept under a .failed name"
    print(f"check: agreement {record['agreement']:.4f} against --min_agreement {record['min_agreement']}: {verdict}; "
          f"-> {record_name(path)}")


if __name__ == "__main__":
    main()
