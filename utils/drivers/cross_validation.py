"""The K fold runs behind crossval.py: each one `<launch> train_classification.py <base> --folds K --fold I
--fold_seed S --output_dir DIR/fold_I --resume latest`, run as tune.py runs a trial (utils/drivers/trial_run.py): in its
own process group, owned through its folder's owner lock. A fold whose run wrote results.json is done; one whose owner
died (a SIGKILLed crossval.py) is continued from its checkpoint by the next crossval.py, bitwise; several crossval.py
processes given the same folder share the folds."""

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from utils.core.errors import ConfigError
from utils.core.io import write_json_atomic
from utils.drivers.trial_run import SCRIPT, Progress, TrialRun, launcher, own, run_unlocked

RECORD = "crossval.json"  # in the cross-validation's folder: what it is (folds, fold seed, base options)
SET_BY_CROSSVAL = ("--output_dir", "--resume", "--folds", "--fold", "--fold_seed", "--lr_find", "--eval_only")


@dataclass(frozen=True)
class CrossValidation:
    """What crossval.py's options say (crossval.py: parse)."""
    folder: Path
    folds: int
    fold_seed: int
    launch: str  # what starts a fold's run, before the script's path
    base: tuple  # the options of train_classification.py every fold's run has
    devices: str = None  # CUDA_VISIBLE_DEVICES of this process's runs

    def fold_folder(self, fold):
        return self.folder / f"fold_{fold}"

    def command(self, fold):
        return [*launcher(shlex.split(self.launch)), str(SCRIPT), *self.base, "--folds", str(self.folds), "--fold",
                str(fold), "--fold_seed", str(self.fold_seed), "--output_dir", str(self.fold_folder(fold)),
                "--resume", "latest"]  # a fresh start where the folder holds no checkpoint


def check_base(base, folds):
    """The base options: none that crossval.py sets itself, and accepted by the script (parsed and checked here, with
    fold 0's options of `folds`, nothing started). One line, exit 2."""
    from utils.config.options import check_argv

    given = [word.split("=", 1)[0] for word in base]
    for option in SET_BY_CROSSVAL:
        if option in given:
            raise ConfigError(f"{option}: set by crossval.py for each fold (remove it from the options after --)")
    if (line := check_argv([*base, "--folds", str(folds), "--fold", "0"])) is not None:
        raise ConfigError(f"the options after -- are refused: {line}")


def open_folder(cv):
    """Record what the cross-validation is in its folder, or check that it is what the folder holds."""
    cv.folder.mkdir(parents=True, exist_ok=True)
    record = {"folds": cv.folds, "fold_seed": cv.fold_seed, "base": list(cv.base)}
    path = cv.folder / RECORD
    if path.is_file():
        known = json.loads(path.read_text())
        for key, value in record.items():
            if known.get(key) != value:
                raise ConfigError(f"output_dir: {cv.folder} holds a cross-validation with another {key} "
                                  f"({json.dumps(known.get(key))}); give another folder, or the same options")
    else:
        write_json_atomic(path, record)


def finished(cv, fold):
    return (cv.fold_folder(fold) / "results.json").is_file()


def run_folds(cv, env, stop, say):
    """Run every fold not finished and not owned by another process, in order, a line at each of its validations.
    Returns 'done' (every fold finished), 'others' (some still run in other processes), 'interrupted' (`stop` was
    signalled: the running fold saved) or 'failed: <its line>'."""
    following = Progress("crossval.py")
    for fold in range(cv.folds):
        if stop.name is not None:
            return "interrupted"
        if finished(cv, fold) or (owner := own(cv.fold_folder(fold))) is None:
            continue
        try:
            if finished(cv, fold) or not run_unlocked(cv.fold_folder(fold)):
                continue
            resumed = any((cv.fold_folder(fold) / "checkpoints").glob("*"))
            say(f"fold {fold} of {cv.folds} {'continues (--resume latest)' if resumed else 'starts'} in "
                f"{cv.fold_folder(fold)}")
            run = TrialRun(cv.command(fold), cv.fold_folder(fold), env)
            stop.run = run.start()
            after = sum(not finished(cv, other) for other in range(fold + 1, cv.folds))
            for epoch, key, value in run.validations("tracked"):
                if epoch > run.validated_epoch:  # (not those of an earlier start)
                    following.validated(run, f"fold {fold} of {cv.folds}", epoch, key, value, after)
            code = run.wait()
            stop.run = None
            if stop.name is not None:
                return "interrupted"
            if code != 0 or not finished(cv, fold):
                return f"failed: fold {fold}: {run.last_line()}"
            say(f"fold {fold} done: {fold_line(cv, fold)}")
        finally:
            owner.close()
    return "done" if all(finished(cv, fold) for fold in range(cv.folds)) else "others"


def fold_line(cv, fold):
    """A finished fold's tracked figure, as its results.json says."""
    results = json.loads((cv.fold_folder(fold) / "results.json").read_text())
    key = results["tracked_metric"]
    return f"{key} {results[key]:.4f} on {results['val_samples']} held-out samples"


def say(line, file=sys.stdout):
    print(f"crossval.py: {line}", file=file, flush=True)


def held_out_pictures(cv, picked):
    """Each picked row's sample as its fold's run loads it for validation, placed by its index in the training split
    among its fold's held-out samples: a (H, W, 3) uint8 array, or None (utils/reporting/failures.py picture)."""
    from utils.config.options import parse
    from utils.reporting.failures import picture

    pictures = {}
    for fold in sorted({row[2] for row in picked}):
        settings = parse([*cv.base, "--folds", str(cv.folds), "--fold", str(fold), "--fold_seed", str(cv.fold_seed)])
        _, val, _, _ = settings.source.datasets(settings.data, settings.input)
        place = {index: position for position, index in enumerate(settings.source.remade.held_index)}
        for row in picked:
            if row[2] == fold:
                pictures[row[0]] = picture(val, place[row[0]])
    return [pictures[row[0]] for row in picked]
