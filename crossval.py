"""k-fold cross-validation of train_classification.py's options, and the label issues its out-of-fold predictions show.

    # 5 folds of the digits' training split, each a run of the default recipe; the figures' mean and 95 % interval
    python crossval.py --output_dir runs/cv_digits --folds 5 -- --epochs 6
    # the same with 5 % of the labels flipped: how many of the flips cleanlab finds (runs/cv_noisy/label_issues.csv)
    python crossval.py --output_dir runs/cv_noisy --folds 5 -- --epochs 6 --flip_labels 0.05
    # then train on all of it without the issues found: one command
    accelerate launch train_classification.py --epochs 6 --flip_labels 0.05 --exclude runs/cv_noisy/label_issues.csv
    # your folders, folds kept by patient, each fold on two GPUs
    python crossval.py --output_dir runs/cv_xray --folds 5 --launch "accelerate launch --config_file \
        accel_configs/multi_gpu.yaml" -- --data_dir data/xray --groups patients.csv --epochs 30
    # killed? the same command again: finished folds are kept, the running one continues (--resume latest)

Each fold is one launch of the script as you start it (`--launch` + train_classification.py + the options after `--`
+ `--folds K --fold I --fold_seed S --output_dir DIR/fold_I --resume latest`), so every promise of a run holds in it;
its run writes fold_predictions.csv, its held-out samples' probabilities under its final weights. Once every fold has
finished, DIR gets cv_results.json, oof_predictions.csv, label_issues.csv and .png (cleanlab) and report.html
(docs/crossval.md). Several crossval.py processes given the same DIR share its folds (--devices splits the GPUs).
"""

import argparse
import os
import sys
from pathlib import Path

from utils.core.cli import OneLineParser

PROG = "crossval.py"
EXIT_INTERRUPTED = 75  # as train_classification.py: rerun the same command to continue


def get_parser():
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      usage="crossval.py --output_dir DIR --folds K [options] -- <options of "
                            "train_classification.py>")
    p.add_argument("--output_dir", required=True, help="the cross-validation's folder: fold_I/, cv_results.json...")
    p.add_argument("--folds", type=int, required=True, help="K: the training split is cut into K folds, each the "
                   "validation of one run")
    p.add_argument("--fold_seed", type=int, default=0, help="the seed the folds are drawn with")
    p.add_argument("--launch", default="accelerate launch", help="what starts a fold's run, before the script's path")
    p.add_argument("--devices", default=None, help="CUDA_VISIBLE_DEVICES of this process's runs, e.g. 0,1")
    return p


def write_records(cv):
    """cv_results.json, oof_predictions.csv, label_issues.csv and .png, report.html; the summary's lines."""
    from utils.evaluation.tasks import read_kind
    from utils.reporting.plots import save
    from utils.drivers import label_issues
    from utils.drivers.cross_validation import held_out_pictures, say

    classes, rows, skipped = label_issues.read_out_of_fold(cv)
    summary = label_issues.cv_results(cv)
    if skipped:
        summary["skipped_images"] = skipped
        say(f"{len(skipped)} file(s) of the training split skipped as unreadable (--skip_bad_images), so in no "
            f"out-of-fold prediction and no label issue: {', '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''} "
            f"(cv_results.json)")
    label_issues.write_summary(cv, summary)
    label_issues.write_out_of_fold(cv, classes, rows)
    kind = read_kind(cv.fold_folder(0))  # as the folds' runs recorded it
    issues = label_issues.find_issues(classes, rows, kind.multi_label)
    label_issues.write_issues_csv(cv, issues)
    picked = [issue[0] for issue in issues[:label_issues.SHOWN]]
    figure = label_issues.issues_figure(issues, held_out_pictures(cv, picked)) if picked else None
    picture = cv.folder / "label_issues.png"
    if figure is not None:
        save(figure, picture)
    label_issues.write_report(cv, summary, issues, picture if figure is not None else None)
    key = summary["tracked_metric"]
    tracked = summary["figures"][key]
    say(f"{key} {tracked['mean']:.4f} ± {tracked['std']:.4f} over {cv.folds} folds (95 % interval "
        f"{tracked['ci95'][0]:.4f} – {tracked['ci95'][1]:.4f}); {len(issues)} label issues of {len(rows)} samples "
        f"(label_issues.csv) -> {cv.folder / 'report.html'}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    at = argv.index("--") if "--" in argv else len(argv)
    args = get_parser().parse_args(argv[:at])
    base = argv[at + 1:]
    from utils.core.errors import ConfigError
    from utils.core.errors import UserError
    from utils.drivers.cross_validation import CrossValidation, check_base, open_folder, run_folds, say
    from utils.drivers.trial_run import Stop

    try:
        if args.folds < 2:
            raise ConfigError(f"folds: must be >= 2, got {args.folds}")
        check_base(base, args.folds)
        cv = CrossValidation(Path(args.output_dir).resolve(), args.folds, args.fold_seed, args.launch, tuple(base),
                             args.devices)
        open_folder(cv)
        env = {**os.environ, "WANDB_RUN_GROUP": cv.folder.name, "WANDB_JOB_TYPE": "fold"}
        if args.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = args.devices
        stop = Stop()  # from here on: the running fold is passed the signal
        state = run_folds(cv, env, stop, say)
        if state == "interrupted":
            say(stop.line("fold"), file=sys.stderr)
            return EXIT_INTERRUPTED
        if state.startswith("failed"):
            say(f"error: {state.split(': ', 1)[1]}", file=sys.stderr)
            return 1
        if state == "others":
            say("the other folds still run in other crossval.py processes: the last to finish writes the records")
            return 0
        write_records(cv)
        return 0
    except UserError as e:
        say(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
