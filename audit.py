"""Audit a dataset's splits before trusting a figure measured on them: exact and near copies within and across train
and validation, the same image under different labels, groups that cross the splits, outliers and unusable images.

    pip install -r requirements-audit.txt                                # imagehash, faiss
    python audit.py runs/<run>                                           # the data the run trained on, its model's
                                                                         # features too -> runs/<run>/audit/
    python audit.py --output audits/xray -- --data_dir data/xray         # before any training: pixels alone
    python audit.py runs/<run> --output audits/new -- --train_dir new/train --val_dir new/val  # other data, the
                                                                         # run's features
    accelerate launch --num_processes 2 audit.py runs/<run>              # sharded: the same findings
    python audit.py runs/<run> --groups patients.csv                     # groups ('sample,group') across the splits
    # then: train without what it found, and see the validation figures without the leaked samples beside the rest
    accelerate launch train_classification.py --exclude runs/<run>/audit/exclude.csv --audit runs/<run>/audit
    # killed? the same command again: the chunks it cached are kept

The data is what train_classification.py's options after `--` name (any source it reads but a stream: folders, CSV
and list files, Hub and save_to_disk datasets, several labels a sample, any band count, video), else the run's own
(its config.yaml). Each sample is read once (utils/audit/survey.py): the digest of its decoded pixels, a perceptual
hash and a grey thumbnail, its brightness and contrast, and with a run its model's features (what its classifier reads;
a --probe knn run of a --pretrained model gives a pretrained backbone's). A video is judged by the clip validation
reads. Near copies are the nearest neighbours (faiss) verified on the pixels (utils/audit/copies.py); findings are
ranked (utils/audit/findings.py) and written to the folder (utils/audit/pages.py): findings.csv, summary.json,
exclude.csv, leaked.csv, audit.html. Bad input is one line and exit 2, before anything is written.
"""

import argparse
import sys
from pathlib import Path

from utils.core.cli import OneLineParser

PROG = "audit.py"
EXIT_INTERRUPTED = 75  # as train_classification.py: run the same command again to go on


def get_parser():
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      usage="audit.py [RUN] [options] [-- <data options of train_classification.py>]")
    p.add_argument("run", nargs="?", default=None,
                   help="a run folder: its model's features are used, and its data unless options after -- name other")
    p.add_argument("--output", default=None, help="the audit's folder (default: RUN/audit)")
    p.add_argument("--overwrite", action="store_true", help="replace the findings of an audit that finished there")
    p.add_argument("--similarity", type=float, default=0.99,
                   help="a near copy: the best normalised cross-correlation of one's crops with the other, at least")
    p.add_argument("--neighbours", type=int, default=5,
                   help="candidate copies of a sample: its nearest by pixels, and by the model's features")
    p.add_argument("--hash_radius", type=int, default=4, help="candidate copies: within this many pHash bits (of 64)")
    p.add_argument("--flat", type=float, default=0.02,
                   help="a constant (blank) image: the standard deviation of its pixels under this (0..1 scale)")
    p.add_argument("--dark", type=float, default=0.03,
                   help="a dark image: its mean under this; a bright one: over 1 - this (0..1 of its own bits)")
    p.add_argument("--groups", default=None, metavar="FILE",
                   help="a CSV of 'sample,group' lines (samples by path): a group with samples in both splits is a "
                        "finding")
    p.add_argument("--batch_size", type=int, default=64, help="samples per forward pass and process")
    p.add_argument("--num_workers", type=int, default=2, help="DataLoader workers per process")
    p.add_argument("--html_rows", type=int, default=200, help="findings audit.html shows, with their pictures")
    return p


def get_args(argv=None):
    """(the audit's options, the options of train_classification.py after `--`)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    at = argv.index("--") if "--" in argv else len(argv)
    p = get_parser()
    opts = p.parse_args(argv[:at])
    data = argv[at + 1:]
    if opts.run is None and not data:
        p.error("give a run folder, or the data's options after -- (as train_classification.py takes them)")
    if opts.run is None and opts.output is None:
        p.error("--output: name the audit's folder (without a run folder there is no default)")
    if not 0 < opts.similarity <= 1 or not 0 <= opts.flat < 1 or not 0 <= opts.dark < 0.5:
        p.error("--similarity must be in (0, 1], --flat in [0, 1), --dark in [0, 0.5)")
    if min(opts.neighbours, opts.batch_size) < 1 or min(opts.hash_radius, opts.num_workers, opts.html_rows) < 0:
        p.error("--neighbours and --batch_size must be >= 1, --hash_radius, --num_workers and --html_rows >= 0")
    return opts, data


def main(argv=None):
    opts, data = get_args(argv)
    import torch
    from accelerate import Accelerator

    from utils.core.errors import UserError, report
    from utils.core.preemption import Interrupted, StopRequest

    # As predict.py: on a machine without an accelerator, launched processes form a group on the CPU
    accelerator = Accelerator(cpu=not torch.accelerator.is_available())
    stop = StopRequest()
    stop.install()
    try:
        record = audit(accelerator, opts, data, stop)
    except (UserError, ValueError) as e:
        report(PROG, str(e).splitlines()[0])
    except Interrupted as e:
        accelerator.print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        stop.restore()
    accelerator.end_training()
    return record


def settings_of(opts, data):
    """The Settings of the data to audit: the options after --, else the run's config.yaml; what cannot apply
    refused."""
    from dataclasses import replace

    from utils.audit.survey import AuditError
    from utils.config.options import parse
    from utils.run.trained import read_settings

    if data:
        settings = parse(data, prog=f"{PROG} ... --")
    else:
        config = Path(opts.run) / "config.yaml"
        if not config.is_file():
            raise AuditError(f"{config} does not exist: give the data's options after --")
        settings = read_settings(config)
    given = [name for name, on in (("exclude", settings.data.exclude), ("folds", settings.data.folds),
                                   ("flip_labels", settings.data.flip_labels)) if on]
    if given:
        raise AuditError(f"--{given[0]}: the audit reads the splits as they are; the run that trains applies it "
                         f"(drop it after --)")
    if settings.data.streaming:
        raise AuditError("--streaming: a stream is read in order, once; audit the files or the Hub dataset it comes "
                         "from without --streaming")
    # The pixels decoded here, whatever device decoded them in training
    return replace(settings, data=replace(settings.data, decode_on_device=False))


def audit(accelerator, opts, data, stop):
    """Survey both splits, find, and (main process) write the folder; its summary, or None on other processes."""
    from accelerate.utils import gather_object

    from utils.audit import findings
    from utils.audit.copies import near_pairs
    from utils.audit.pages import png, write_all
    from utils.audit.survey import AuditError, CACHE, cache_key, check_key, read_groups, survey, surveyed
    from utils.data.sources.folds import split_names
    from utils.run.trained import load_run, unwrapped

    settings = settings_of(opts, data)
    folder = Path(opts.output) if opts.output else Path(opts.run) / "audit"
    if (folder / "findings.csv").exists() and not opts.overwrite:
        raise AuditError(f"{folder / 'findings.csv'} exists; pass --overwrite to replace the audit's findings")
    run, model = load_run(opts.run) if opts.run else (None, None)
    inp = run.input if run else settings.input
    if run and run.input.video != settings.source.video:
        raise AuditError(f"{opts.run} is a {'video' if run.input.video else 'image'} run and the data "
                         f"{'clips' if settings.source.video else 'images'}: audit them with a run of their kind, or "
                         f"without one")
    accelerator.wait_for_everyone()  # every process has looked before any writes
    with accelerator.main_process_first():
        train, val, classes, _ = settings.source.datasets(settings.data, inp, accelerator.process_index,
                                                          accelerator.num_processes)
    model = unwrapped(model) if model is not None else None
    groups = read_groups(opts.groups, split_names(train) + split_names(val)) if opts.groups else None
    key = cache_key(settings.source_name, settings.data, inp, model, run.model if run else None, opts.batch_size,
                    (len(train), len(val)))
    check_key(accelerator, folder / CACHE, key)
    samples = survey(accelerator, (train, val), inp, model, run.model if run else None,
                     folder / CACHE, opts.batch_size, opts.num_workers, stop)
    thresholds = findings.Thresholds(opts.similarity, opts.neighbours, opts.hash_radius, opts.flat, opts.dark)
    pairs, mine = findings.near_scores(samples, thresholds, accelerator.process_index, accelerator.num_processes)
    best = {pair: score for part in gather_object([mine]) for pair, score in part.items()}
    if not accelerator.is_main_process:
        return None
    found = findings.find(samples, thresholds, near_pairs(best, pairs, opts.similarity), groups)
    leaked, excluded = findings.leaked(samples, found), findings.excluded(samples, found)
    readers = [surveyed(split, val, inp.pixel_max) for split in (train, val)]

    def picture(i):  # sample i of both splits (train first): its eval pixels, read again for the page
        split = int(samples.split[i])
        return png(readers[split][i - len(train) * split]["pixel_values"], inp.pixel_max)

    record = write_all(folder, samples, found, leaked, excluded, thresholds, run.model if run else None,
                       settings.sample_unit, classes, picture, opts.html_rows)
    say(record, folder)
    return record


def say(record, folder):
    found = record["found"]
    across = ", ".join(f"{value['across']} {kind.replace('_', ' ')}" for kind, value in found.items()
                       if isinstance(value, dict))
    within = ", ".join(f"{value['within'] if isinstance(value, dict) else value} {kind.replace('_', ' ')}"
                       for kind, value in found.items() if kind != "group" and (kind != "outlier" or record["model"]))
    print(f"audit of {record['samples']['train']} training and {record['samples']['val']} validation "
          f"{record['unit']}{' with ' + record['model'] + ' features' if record['model'] else ' (pixels only)'}")
    print(f"across the splits: {across}; {record['leaked_validation']} validation {record['unit']} "
          f"({100 * record['leaked_share']:.2f} %) leaked")
    print(f"within them: {within}{'' if record['model'] else ' (outliers need a run: its features)'}")
    print(f"exclude.csv: {record['excluded_training']} training {record['unit']} to leave out -> {folder}/audit.html")


if __name__ == "__main__":
    main()
