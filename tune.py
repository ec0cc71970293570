"""Search train_classification.py's options with Optuna: each trial is one launch of the script, as you start it.

    # 16 trials of the default space (tune_space.yaml; long-tailed data: long_tail.yaml's balance options too) on the
    # long-tailed digits, pruned by the median rule
    python tune.py --study runs/study_digits --trials 16 -- --dataset digits --imbalance 100 --epochs 6
    # your space, trials on two processes each (the launcher's own words), the validation loss as the objective
    python tune.py --study runs/s2 --trials 30 --space my_space.yaml --objective val_loss \
        --launch "accelerate launch --config_file accel_configs/multi_gpu.yaml" -- --data_dir data/ --epochs 20
    # killed? the same command again: the trial that was running continues (--resume latest), then the rest
    # several tune.py processes (GPUs split with --devices, or one per node) given the same --study share its trials
    python tune.py --study runs/s3 --trials 32 --devices 0,1 -- ... &
    python tune.py --study runs/s3 --trials 32 --devices 2,3 -- ...
    accelerate launch train_classification.py --config runs/study_digits/best.yaml \
        --output_dir runs/best  # the best, again

Every trial runs in its own processes (`--launch` + train_classification.py + the options after `--` + the trial's
options, its run folder <study>/trials/NNNN), so all its ranks read the same options from argv and nothing of Optuna
runs inside them. Each validation row a trial writes is reported to the pruner as it appears; a trial to prune gets
SIGTERM (it saves and exits 75, as a preempted run does) and is recorded as pruned. The study lives in Optuna's
storage (a journal file in the study folder, or --storage URL). What the study folder gets: docs/tuning.md.
"""

import argparse
import os
import shlex
import sys
from pathlib import Path

from utils.core.cli import OneLineParser

PROG = "tune.py"
EXIT_INTERRUPTED = 75  # as train_classification.py: rerun the same command to continue
NOT_SEARCHED = {"--output_dir": "set by tune.py for each trial", "--resume": "set by tune.py for each trial",
                "--lr_find": "not a training run to search", "--eval_only": "not a training run to search"}


def get_parser():
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      usage="tune.py --study DIR --trials N [options] -- <options of train_classification.py>")
    p.add_argument("--study", required=True, help="the study folder: its journal, trials/, trials.csv, best.yaml...")
    p.add_argument("--trials", type=int, required=True, help="trials in the study, all its processes together")
    p.add_argument("--space", default=None, help="YAML: option: {low, high[, log, step]} or {choices: [...]} "
                   "(default: configs/search/tune_space.yaml, and long_tail.yaml's balance options on long-tailed "
                        "data, less what the run's options refuse)")
    p.add_argument("--launch", default="accelerate launch", help="what starts a trial, before the script's path")
    p.add_argument("--objective", default="tracked", choices=("tracked", "val_loss"),
                   help="tracked: the run's --track_metric figure (maximised); val_loss (minimised)")
    p.add_argument("--sampler", default="tpe", choices=("tpe", "random", "grid"), help="grid: every option has choices")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed: the same study proposes the same trials")
    p.add_argument("--pruner", default="median", choices=("median", "successive_halving", "hyperband", "none"),
                   help="median: stop a trial whose figure is worse than the median of the earlier trials' at the same "
                        "epoch; successive_halving, hyperband: Optuna's SuccessiveHalvingPruner, HyperbandPruner")
    p.add_argument("--prune_startup", type=int, default=None,
                   help="--pruner median: trials that complete before it prunes (default: 5, Optuna's)")
    p.add_argument("--baseline", action="store_true",
                   help="trial 0 is the options after -- alone, nothing searched: the recipe the study must beat")
    p.add_argument("--storage", default=None, help="an Optuna storage URL (a database, for a cluster); default: "
                   "a journal file in the study folder (one machine, or a shared file system)")
    p.add_argument("--study_name", default=None, help="the study's name in its storage (default: the folder's name)")
    p.add_argument("--devices", default=None, help="CUDA_VISIBLE_DEVICES of this process's trials, e.g. 0,1")
    p.add_argument("--max_failures", type=int, default=3, help="stop after this many failed trials in a row")
    return p


def say(line):
    print(f"{PROG}: {line}", flush=True)


def split_argv(argv):
    """(tune.py's options, train_classification.py's): the two sides of `--`."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def preflight(args, base):
    """The space's Params, checked against the script's parser and the run's own options before any trial."""
    from utils.core.errors import ConfigError
    from utils.config.options import check_argv
    from utils.drivers.space import default_space, load_space, refused

    given = [word.split("=", 1)[0] for word in base]
    for option, why in NOT_SEARCHED.items():
        if option in given:
            raise ConfigError(f"{option}: {why} (remove it from the options after --)")
    if (line := check_argv(base)) is not None:
        raise ConfigError(f"the options after -- are refused: {line}")
    params = load_space(args.space) if args.space else default_space(base, say)
    lines = refused(params, base)
    if args.space is not None and lines:
        name, line = next(iter(lines.items()))
        raise ConfigError(f"{name} in {args.space}: the run refuses it: {line}")
    for name, line in lines.items():
        print(f"{PROG}: left out of the default space: {name} ({line.split('error: ', 1)[-1]})", flush=True)
    params = [p for p in params if p.name not in lines]
    if not params:
        raise ConfigError("space: nothing left to search")
    if args.sampler == "grid" and any(p.kind != "categorical" for p in params):
        raise ConfigError("sampler: grid needs choices for every option of the space, not ranges")
    return params


def command_for(args, claim, base):
    """A trial's command line: the launcher, the script, the base options, the trial's, its run folder."""
    from utils.drivers.space import as_argv
    from utils.drivers.trial_run import SCRIPT, launcher

    launch = launcher(shlex.split(args.launch))
    resume = ["--resume", "latest"] if claim.resumed else []
    return [*launch, str(SCRIPT), *base, *as_argv(claim.values), "--output_dir", str(claim.folder), *resume]


def trial_env(args, study_name):
    env = {**os.environ, "WANDB_RUN_GROUP": study_name, "WANDB_JOB_TYPE": "trial"}
    if args.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = args.devices
    return env


def ended_line(claim, outcome, objective, done, total):
    from utils.drivers.trial_run import objective_key

    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in claim.values.items())
    figure = f": {objective_key(claim.folder, objective)} {outcome.value:.4f}" if outcome.value is not None else ""
    said = f" ({outcome.line})" if outcome.line else ""
    return (f"{PROG}: trial {claim.trial.number} {outcome.state}{figure} after {outcome.epochs} validations "
            f"[{values or 'the base options'}]{said} ({done}/{total} trials ended)")


def run_study(args, base, params, stop):
    """Claim and run trials until the study has its count; the records after each. Returns the exit code."""
    import optuna
    from optuna.trial import TrialState

    from utils.drivers import study_records
    from utils.drivers.study import StudyOptions, claim_next, finish, open_study, run_trial
    from utils.drivers.trial_run import Progress, TrialRun

    folder = Path(args.study).resolve()
    options = StudyOptions(folder, args.study_name or folder.name, args.storage, args.sampler, args.seed, args.pruner,
                           5 if args.prune_startup is None else args.prune_startup, args.baseline, args.objective,
                           args.trials, tuple(base))
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # tune.py says what happens, once a trial
    study = open_study(options, params)
    failures, following = 0, Progress(PROG)
    while stop.name is None and (claim := claim_next(study, options, params)) is not None:
        started = "continues (--resume latest)" if claim.resumed else "starts"
        print(f"{PROG}: trial {claim.trial.number} {started} in {claim.folder}", flush=True)
        run = TrialRun(command_for(args, claim, base), claim.folder, trial_env(args, options.name))
        ended = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        label = f"trial {claim.trial.number} ({ended + 1} of {args.trials})"
        outcome = run_trial(claim, run, args.objective, stop,
                            lambda epoch, key, value, run=run, label=label, ended=ended: following.validated(
                                run, label, epoch, key, value, max(0, args.trials - ended - 1)))
        finish(study, claim, outcome)
        if outcome.state == "interrupted":
            break
        ended = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        print(ended_line(claim, outcome, args.objective, ended, args.trials), flush=True)
        study_records.write_trials_csv(study, folder)
        failures = failures + 1 if outcome.state == "failed" else 0
        if failures >= args.max_failures:
            print(f"{PROG}: error: {failures} failed trials in a row; the last said: {outcome.line}", file=sys.stderr,
                  flush=True)
            return 1
    if stop.name is not None:
        print(f"{PROG}: {stop.line('trial')}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    write_records(study, folder, base)
    left = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    print(f"{PROG}: {folder / 'study.html'}" + (f"; trials {left} still run in other processes" if left else ""))
    return 0


def write_records(study, folder, base):
    """trials.csv, best.yaml, the plots, study.html; with --report_to wandb in the base options, the study's table."""
    from utils.config.options import parse_args
    from utils.drivers import study_records

    study_records.write_trials_csv(study, folder)
    best = study_records.write_best_yaml(study, folder, base)
    pictures, notes = study_records.write_plots(study, folder)
    for note in notes:
        print(f"{PROG}: {note}")
    study_records.write_study_html(study, folder, pictures, best)
    if best is not None:
        print(f"{PROG}: best trial {study.best_trial.number}: objective {study.best_value:.4f}; recipe {best}")
    options = parse_args(list(base))
    if options.report_to in ("wandb", "all"):
        study_records.log_to_wandb(study, folder, options.project_name, pictures)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, base = split_argv(argv)
    parser = get_parser()
    args = parser.parse_args(own)
    if args.trials < 1 or args.max_failures < 1:
        parser.error("--trials and --max_failures must be >= 1")
    if args.prune_startup is not None and (args.pruner != "median" or args.prune_startup < 0):
        parser.error("--prune_startup: the median pruner's count of trials before it prunes, >= 0 (--pruner median)")
    if args.baseline and args.sampler == "grid":
        parser.error("--baseline: a grid's trials are its points; add the base values to the grid instead")
    from utils.core.errors import ConfigError
    from utils.drivers.trial_run import Stop

    try:
        params = preflight(args, base)  # bad input: one line, exit 2, nothing written
        return run_study(args, base, params, Stop())
    except ConfigError as e:  # (also a study of that name made with another space or base options)
        print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
