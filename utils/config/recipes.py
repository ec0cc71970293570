"""YAML recipes: a file of option: value that sets the parser's defaults (unknown keys and wrong types
stop the run), and the options in force written back as one (config.yaml), which reproduces the run."""

import difflib
from pathlib import Path

import yaml

from utils.core.errors import ConfigError
from utils.config.data_options import stat_value
from utils.config.training_options import learning_rate, micro_batch
from utils.core.io import write_text_atomic

# Defaults that follow from the data: a recipe (configs/) applied before --config and the command line.
DATA_RECIPES = {"moving_digits": Path(__file__).parents[2] / "configs" / "moving_digits_mc3_18.yaml"}


def check_yaml_value(action, value):
    """Return `value` if it fits `action`'s type and choices; raise ConfigError otherwise."""
    def one(v):
        if action.type is int:
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif action.type is float:
            if isinstance(v, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
                try:
                    v = float(v)
                except ValueError:
                    pass
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            v = float(v) if ok else v
        elif action.type is str:
            ok = isinstance(v, str)
        elif action.type is micro_batch:
            ok = (isinstance(v, int) and not isinstance(v, bool)) or v == "auto"
        elif action.type is learning_rate:
            if isinstance(v, str) and v != "auto":  # YAML 1.1 reads 1e-3 (no dot) as a string
                try:
                    v = float(v)
                except ValueError:
                    pass
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool)) or v == "auto"
            v = float(v) if ok and v != "auto" else v
        elif action.type is stat_value:  # --mean/--std: numbers, or auto
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool)) or v == "auto"
            v = float(v) if ok and v != "auto" else v
        else:  # flags: store_true / --x/--no-x
            ok = isinstance(v, bool)
        if not ok:
            want = {int: "an integer", float: "a number", str: "a string",
                    micro_batch: "an integer or auto", learning_rate: "a number or auto",
                    stat_value: "a number or auto"}.get(action.type, "true or false")
            hint = " (YAML reads no/yes/off/on as booleans: quote the word)" if isinstance(v, bool) else ""
            raise ConfigError(f"{action.dest}: expected {want}, got {v!r}{hint}")
        if action.choices is not None and v not in action.choices:
            raise ConfigError(f"{action.dest}: {v!r} is not one of {', '.join(map(str, action.choices))}")
        return v

    if value is None:
        return None
    fixed = isinstance(action.nargs, int) and action.nargs > 0  # e.g. --mean R G B
    if action.nargs in ("+", "*") or fixed:
        if not isinstance(value, list) or (action.nargs == "+" and not value):
            raise ConfigError(f"{action.dest}: expected a list, got {value!r}")
        if fixed and len(value) != action.nargs:
            raise ConfigError(f"{action.dest}: expected {action.nargs} values, got {value!r}")
        return [one(v) for v in value]
    return one(value)


def load_recipe(path, parser):
    """Read a YAML recipe into {dest: value}, rejecting unknown keys and wrong types."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping of option: value")
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    for key in data:
        if key not in actions:
            close = difflib.get_close_matches(str(key), actions, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{key}: unknown key in {path}{hint}")
    return {key: check_yaml_value(actions[key], value) for key, value in data.items()}


def save_config(options, path, notes=(), **resolved):
    """Write the options in force ({option: value}, options.flat_options) with `resolved` values (e.g. the real
    output_dir) as a recipe;
    `notes` become comment lines at its top (values derived from options, not options themselves).

    `--config <that file>` reproduces the run; the recipe it came from is not a key of its own.
    """
    options = {key: value for key, value in options.items() if key not in ("config", "resume")}
    comments = "".join(f"# {note}\n" for note in notes)
    write_text_atomic(path, comments + yaml.safe_dump({**options, **resolved}, sort_keys=False))
