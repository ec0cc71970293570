"""A search space: a YAML file of train_classification.py options, each a range (low, high, log, step) or a list of
choices, every name and value checked against the script's own parser before a trial starts; what the run's
options refuse left out of the default space (and named), refused in a user's own."""

import difflib
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from utils.core.errors import ConfigError
from utils.config.options import argv_for, check_argv, get_args_parser
from utils.config.recipes import check_yaml_value
from utils.config.training_options import learning_rate, micro_batch

DEFAULT_SPACE = Path(__file__).parents[2] / "configs" / "search" / "tune_space.yaml"
LONG_TAIL_SPACE = DEFAULT_SPACE.with_name("long_tail.yaml")
BALANCE = ("sampler", "class_weights", "logit_adjust")  # how long_tail.yaml balances the classes
LONG_TAILED = 10  # the head/tail of the training class counts from which the default space searches the balance too
RANGE_KEYS = {"low", "high", "log", "step"}
NUMBERS = {int: "int", float: "float", learning_rate: "float", micro_batch: "int"}  # an option's type: its range's


@dataclass(frozen=True)
class Param:
    """One option searched: over [low, high] (log-uniform with `log`, on a grid of `step`), or one of `choices`."""
    name: str
    kind: str  # "float", "int" or "categorical"
    low: float = None
    high: float = None
    log: bool = False
    step: float = None
    choices: tuple = None

    def suggest(self, trial):
        """This option's value for the Optuna `trial` (sampled by its study's sampler)."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, log=self.log, step=self.step or 1)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)

    def extremes(self):
        """The values checked against the run's other options before a trial: every choice, or both ends."""
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]

    def describe(self):
        if self.kind == "categorical":
            return f"{self.name} in {list(self.choices)}"
        return f"{self.name} in [{self.low:g}, {self.high:g}]{' log' if self.log else ''}"


def _param(name, spec, action, path):
    where = f"{name} in {path}"
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"{where}: give {{low: .., high: ..}} (and log, step) or {{choices: [..]}}, got {spec!r}")
    if "choices" in spec:
        if set(spec) != {"choices"} or not isinstance(spec["choices"], list) or not spec["choices"]:
            raise ConfigError(f"{where}: choices is a non-empty list, on its own (no low/high/log/step beside it)")
        return Param(name, "categorical", choices=tuple(_checked(action, v, where) for v in spec["choices"]))
    unknown = set(spec) - RANGE_KEYS
    if unknown or not {"low", "high"} <= set(spec):
        raise ConfigError(f"{where}: a range has low and high (and log, step), got {', '.join(map(str, spec))}")
    if action.type not in NUMBERS or action.nargs is not None:
        raise ConfigError(f"{where}: --{name} takes no number: give its choices")
    low, high = (_checked(action, spec[key], where) for key in ("low", "high"))
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log is true or false, got {log!r}")
    if not low < high or (log and low <= 0):
        raise ConfigError(f"{where}: needs low < high{' and low > 0 (log)' if log else ''}, got {low!r}, {high!r}")
    if step is not None and (log or _checked(action, step, where) <= 0):
        raise ConfigError(f"{where}: step is > 0, and not with log")
    if "auto" in (low, high):
        raise ConfigError(f"{where}: a range is of numbers; auto is a choice")
    return Param(name, NUMBERS[action.type], low, high, log, step)


def _checked(action, value, where):
    try:
        return check_yaml_value(action, value)
    except ConfigError as e:
        raise ConfigError(f"{where}: {str(e).split(': ', 1)[1]}") from None


def load_space(path):
    """The Params of the space file `path`; ConfigError (one line) for an unknown option or a value it cannot take."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"space: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"space: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"space: {path} must hold a mapping of option: range or choices")
    actions = {a.dest: a for a in get_args_parser()._actions if a.dest not in ("help", "config")}
    params = []
    for name, spec in data.items():
        if name not in actions:
            close = difflib.get_close_matches(str(name), actions, n=1)
            raise ConfigError(f"{name}: not an option of train_classification.py (in {path})"
                              f"{f'; did you mean {close[0]}?' if close else ''}")
        if name in ("output_dir", "resume", "seed"):
            raise ConfigError(f"{name}: set by tune.py for each trial (in {path}); not searchable")
        params.append(_param(name, spec, actions[name], path))
    return params


def default_space(base_argv, say):
    """The default space's Params for the run `base_argv`: tune_space.yaml's; on long-tailed data (one label a sample,
    its most frequent class LONG_TAILED times its rarest or more, or a class without samples), long_tail.yaml's
    balance options beside them (said), where the default recipe trains every class alike."""
    from utils.config.options import parse_args
    from utils.config.settings import class_counts

    params = load_space(DEFAULT_SPACE)
    counts = class_counts(parse_args(list(base_argv)))
    if counts is None or counts.max() < LONG_TAILED * counts.min():
        return params
    balance = [param for param in load_space(LONG_TAIL_SPACE) if param.name in BALANCE]
    ratio = f"{counts.max() / counts.min():.3g}x" if counts.min() else "a class without samples"
    say(f"the training classes are long-tailed (head/tail {ratio}): the default space searches how to balance them "
        f"too ({', '.join(param.describe() for param in balance)}, from {LONG_TAIL_SPACE.name})")
    return params + balance


def as_argv(values):
    """The options {name: value} as a trial's command line gives them (--name=value, a switch --name or --name=False);
    a choice of None (null) gives nothing: the option as the base options have it."""
    return [token for name, value in values.items() if value is not None for token in argv_for(name, value)]


def refused(params, base_argv):
    """{name: the line} of the Params that the run `base_argv` refuses: each tried alone, at every choice or both ends
    of its range (a combination of them may still be refused: its trial fails, and says why)."""
    lines = {}
    for param in params:
        for value in param.extremes():
            line = check_argv([*base_argv, *as_argv({param.name: value})])
            if line is not None:
                lines[param.name] = line
                break
    return lines


def grid_size(params):
    return math.prod(len(p.choices) for p in params)
