"""The Optuna study behind tune.py: its storage (a journal file in the study folder by default: safe on one machine
and on NFS, where SQLite is not; a database URL for a cluster), its seeded sampler and its pruner, and which trial a
tune.py process runs next. Several processes share a study through its storage; a trial is claimed under the study
folder's lock and owned through an flock of its own, which dies with its owner: a trial still RUNNING in the storage
whose owner lock is free lost its tune.py, and the next one to claim finishes it (--resume latest)."""

import contextlib
import fcntl
import json
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from utils.core.errors import ConfigError
from utils.drivers.space import grid_size
from utils.drivers.trial_run import Outcome, objective_key, own, run_unlocked

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")
JOURNAL = "journal.log"


@dataclass(frozen=True)
class StudyOptions:
    """What tune.py's options say of the study (tune.py: parse)."""
    folder: Path
    name: str
    storage: str  # None: the journal file in the folder
    sampler: str
    seed: int
    pruner: str
    prune_startup: int  # the median pruner's: complete trials before it prunes
    baseline: bool  # trial 0 is the base options alone, nothing searched
    objective: str  # "tracked" (the run's tracked figure) or "val_loss"
    trials: int
    base: tuple  # the options of train_classification.py every trial has


@dataclass
class Claim:
    """A trial this process runs: new, or one whose owner died (`resumed`: its run continues)."""
    trial: optuna.Trial
    values: dict  # its options
    folder: Path  # its run folder
    resumed: bool
    owner: object  # the open owner lock file
    reported: set  # the epochs whose figure the study has (a resumed trial's, before its owner died)


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid, less its stop of the study once every point is asked: that works inside study.optimize only;
    tune.py counts the grid's points itself (claim_next)."""

    def after_trial(self, study, trial, state, values):
        pass


def _sampler(options, params, number):
    """The sampler of trial `number`: seeded by the study's seed and the trial's number, so that the same study asks
    the same first trials whichever of its processes asks them."""
    if options.sampler == "grid":
        return _Grid({p.name: list(p.choices) for p in params}, seed=options.seed)
    kind = optuna.samplers.RandomSampler if options.sampler == "random" else optuna.samplers.TPESampler
    return kind(seed=options.seed + number)


def _pruner(options):
    if options.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=options.prune_startup)
    return {"hyperband": optuna.pruners.HyperbandPruner, "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
            "none": optuna.pruners.NopPruner}[options.pruner]()


def direction(objective):
    return "minimize" if objective == "val_loss" else "maximize"


def open_study(options, params):
    """The study (created, or loaded to continue); ConfigError when one of that name was made with another space,
    base options or objective: its trials would not compare."""
    options.folder.mkdir(parents=True, exist_ok=True)
    storage = options.storage or optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(options.folder / JOURNAL)))
    study = optuna.create_study(storage=storage, study_name=options.name, sampler=_sampler(options, params, 0),
                                pruner=_pruner(options), direction=direction(options.objective),
                                load_if_exists=True)
    made = {"space": [p.describe() for p in params], "base": list(options.base), "objective": options.objective}
    with _claiming(options.folder):
        for key, value in made.items():
            known = study.user_attrs.get(key)
            if known is None:
                study.set_user_attr(key, value)
            elif known != value:
                raise ConfigError(f"study: {options.name} was made with another {key} ({json.dumps(known)}); give "
                                  f"another --study folder, or the same {key}")
    return study


@contextlib.contextmanager
def _claiming(folder):
    """The study folder's lock: one process at a time counts, asks and claims (so N means N, and no trial twice)."""
    with open(folder / ".claim.lock", "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def trial_folder(options, number):
    return options.folder / "trials" / f"{number:04d}"


def claim_next(study, options, params):
    """The next trial for this process: one whose owner died, else a new one while the study has fewer than
    options.trials (every state counted); None when there are none left."""
    with _claiming(options.folder):
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            folder = trial_folder(options, frozen.number)
            owner = own(folder)
            if owner is not None and run_unlocked(folder):
                return Claim(optuna.Trial(study, frozen._trial_id), dict(frozen.params), folder, True, owner,
                             set(frozen.intermediate_values))
            if owner is not None:
                owner.close()
        total = len(study.get_trials(deepcopy=False))
        if total >= options.trials or (options.sampler == "grid" and total >= grid_size(params)):
            return None
        trial = study.ask()
        study.sampler = _sampler(options, params, trial.number)  # what the trial's suggestions draw from
        folder = trial_folder(options, trial.number)
        baseline = options.baseline and trial.number == 0
        values = {} if baseline else {p.name: p.suggest(trial) for p in params}
        return Claim(trial, values, folder, False, own(folder), set())


def finish(study, claim, outcome):
    """Record how the claimed trial ended (an interrupted one stays RUNNING, for the next tune.py) and let it go."""
    if outcome.state != "interrupted":
        trial = claim.trial
        trial.set_user_attr("epochs", outcome.epochs)
        trial.set_user_attr("run_folder", str(claim.folder))
        if outcome.state == "failed":
            trial.set_user_attr("line", outcome.line)
        state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "failed": TrialState.FAIL}
        study.tell(trial, outcome.value if outcome.state == "complete" else None, state=state[outcome.state])
    claim.owner.close()


def run_trial(claim, run, objective, stop, validated=lambda epoch, key, value: None):
    """Run the claimed trial (`run`: its TrialRun, not started), report each validation row's figure to its study as
    the row appears (and to `validated`), SIGTERM it when the pruner says so; its Outcome. `stop`: tune.py's own
    signal (its `.name` set once tune.py is told to stop: the trial, passed the signal, saves and is left RUNNING for
    the next tune.py)."""
    done = _finished_outcome(claim, objective)
    if done is not None:  # its owner died after the run ended, before recording it
        return done
    stop.run = run.start()
    reported = claim.reported
    for epoch, key, value in run.validations(objective):
        if epoch not in reported:
            claim.trial.report(value, epoch)
            reported.add(epoch)
            validated(epoch, key, value)
            if run.signalled is None and stop.name is None and claim.trial.should_prune():
                run.stop()
    code = run.wait()
    stop.run = None
    epochs = len(reported)
    if code == 0 and (done := _finished_outcome(claim, objective)) is not None:
        return done
    if stop.name is not None:
        return Outcome("interrupted", epochs=epochs)
    if run.signalled is not None:
        return Outcome("pruned", epochs=epochs)
    return Outcome("failed", epochs=epochs, line=run.last_line())


def _finished_outcome(claim, objective):
    """The Outcome of a run in the claimed folder that wrote its results.json (None if it has not)."""
    try:
        results = json.loads((claim.folder / "results.json").read_text())
    except (OSError, ValueError):
        return None
    key = objective_key(claim.folder, objective)
    return Outcome("complete", value=results[key], epochs=results.get("epochs_completed", 0))
