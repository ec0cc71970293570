"""The parser of every command-line option, each declared once with its default, help and whether a resume must
keep it (the one source of config; the tables: data_options.py, training_options.py); parse_args applies the YAML
recipes (recipes.py) and the checks (checks.py)."""

import argparse
import contextlib
from dataclasses import fields
import functools
import io
import sys

import yaml

from utils.config.checks import check_args
from utils.core.errors import ConfigError
from utils.core.cli import OneLineParser
from utils.config.data_options import add_data_options
from utils.config.recipes import DATA_RECIPES, load_recipe
from utils.config.training_options import (add_balance_options, add_distillation_options, add_model_options,
                                           add_probe_options, add_run_options, add_schedule_options)
from utils.config.settings import TYPED, option_name, read_options, settle, typed_options
from utils.data.sources.catalog import source_for
from utils.data.sources.protocol import DataOptions


TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")  # a switch's words in --name=WORD (any case)


class _OneLineParser(OneLineParser):
    """One line and exit 2 on an error, whole option names only (utils/core/cli.py); and the forms a wandb sweep agent
    writes (`${args}`: --name=value for every option): a switch as --model_ema=True / --nesterov=False, a list as
    --mean=[0.5, 0.5, 0.5]. argparse alone refuses a value given to a switch ("ignored explicit argument") and would
    take a list's brackets for one value."""

    def parse_known_args(self, args=None, namespace=None):
        args, switched_off = self._sweep_forms(sys.argv[1:] if args is None else list(args))
        namespace, rest = super().parse_known_args(args, namespace)
        for dest in switched_off:  # --x=False of a switch that has no --no-x
            setattr(namespace, dest, False)
        return namespace, rest

    def _sweep_forms(self, argv):
        """`argv` with --switch=WORD and --list=[..] written as argparse reads them; and the dests of the
        switches without a --no- form that a --name=False turns off."""
        tokens, switched_off = [], []
        for token in argv:
            flag, _, value = token.partition("=")
            action = self._option_string_actions.get(flag) if token.startswith("--") and "=" in token else None
            if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
                if value.lower() not in TRUE + FALSE or flag.startswith("--no-"):
                    self.error(f"argument {flag}: a switch takes no value, or True or False (got {value!r})")
                on = value.lower() in TRUE
                if on or isinstance(action, argparse.BooleanOptionalAction):
                    tokens.append(flag if on else "--no-" + flag[2:])
                else:
                    switched_off.append(action.dest)
            elif action is not None and action.nargs not in (None, "?") and value.startswith("["):
                items = _listed(value)
                if items is None:
                    self.error(f"argument {flag}: {value!r} is not a list of values")
                tokens += [flag, *map(str, items)]
            else:
                tokens.append(token)
        return tokens, switched_off


def _listed(text):
    """The items of `text` written as a list ([1, 2] or ['a', 'b']), or None."""
    try:  # a list as wandb writes it is a YAML flow sequence
        items = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return items if isinstance(items, list) and all(not isinstance(i, (list, dict)) for i in items) else None


@functools.cache
def _actions():
    """{dest: its argparse action}, of the parser every run has."""
    return {action.dest: action for action in get_args_parser()._actions}


def argv_for(name, value):
    """The command-line tokens that give option `name` (a dest) `value`: --name=value, a switch as --name or
    --name=False, a list as --name v1 v2 ...: how a trial's options reach its run."""
    action = _actions()[name]
    flag = action.option_strings[0]
    if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        return [flag if value else f"{flag}=False"]
    if isinstance(value, (list, tuple)):
        return [flag, *map(str, value)]
    return [f"{flag}={value}"]


def check_argv(argv):
    """None if train_classification.py accepts the options `argv` (parsed and checked as a run would, nothing
    started or written), else the one line it would stop with."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parse(argv)
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else "refused"
    return None


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default once: appended by argparse, unless its help already says what the default is (one
    that follows from the data or the model, e.g. --image_size)."""

    def _get_help_string(self, action):
        return action.help if "(default" in (action.help or "") else super()._get_help_string(action)


class _Declared:
    """A parser or argument group whose every option declares `resume_key`: whether a resumed run must keep
    its value. An option that declares nothing cannot be added (TypeError), so none is forgotten."""

    def __init__(self, container):
        self._container = container

    def add_argument(self, *flags, resume_key, **kwargs):
        action = self._container.add_argument(*flags, **kwargs)
        action.resume_key = resume_key
        return action

    def add_argument_group(self, title):
        return _Declared(self._container.add_argument_group(title))


@functools.cache
def resume_keys():
    """The options whose value a resumed run must share with its checkpoint (`resume_key=True` above).

    The LR schedule is laid out in steps of the epochs, batch, accumulation and LR options; the sample
    order and every augmentation of a sample come from the seed and the augmentation switches; the
    optimizer state only fits the optimizer (and the model) it was made with. Every other option may
    differ: the data is compared by its signature instead (run_folder.check_data), and the rest changes
    how later steps read, evaluate, report or checkpoint, not whether the state fits.
    """
    return tuple(action.dest for action in get_args_parser()._actions if getattr(action, "resume_key", False))


def get_args_parser(prog="train_classification.py"):
    """Every option, with its default and help. YAML keys are these dest names (snake_case)."""
    parser = _OneLineParser(prog=prog, description="Train an image or video classifier with HuggingFace Accelerate.",
                            formatter_class=_HelpFormatter)
    p = _Declared(parser)
    p.add_argument("--config", resume_key=False, type=str, default=None,
                   help="YAML recipe whose keys (option names) set defaults; the command line wins")
    add_data_options(p)
    add_model_options(p)
    add_distillation_options(p)
    add_probe_options(p)
    add_balance_options(p)
    add_schedule_options(p)
    add_run_options(p)
    return parser


def flat_options(settings):
    """{option: value} of every option, in the parser's order, as Settings `settings` hold it now (the batch and LR in
    force; a list as a list): the one way back from the typed configuration to option names, which config.yaml, a
    checkpoint's resume values, the dashboards' config and a driver's argv are written from."""
    values = {}
    for name, kind in TYPED.items():
        section = getattr(settings, name)
        for field in fields(kind):  # an option read into two sections holds one value in both
            value = getattr(section, field.name)
            values.setdefault(option_name(kind, field.name), list(value) if isinstance(value, tuple) else value)
    return {dest: values[dest] for dest in _actions() if dest != "help"}


def resume_values(settings):
    """{option: value} of the options of `settings` whose value a resumed run must share (resume_keys): what a
    checkpoint records and a resumed run is compared with. With --batch_size auto, the micro-batch and accumulation
    are the checkpoint's (what its run found), so only its global batch is compared; with --lr auto, the LR is the
    checkpoint's. (Once found, they are numbers, recorded as such.)"""
    options = flat_options(settings)
    found = ("batch_size", "grad_accum_steps") if options["batch_size"] == "auto" else ()
    found += ("lr",) if options["lr"] == "auto" else ()
    return {key: options[key] for key in resume_keys() if key not in found}


def parse(argv=None, prog="train_classification.py"):
    """The Settings of `argv` (default sys.argv[1:]): parsed over the recipes' defaults, the data source picked and
    the model's input resolved once, all checked together; exit 2 with one line on bad input. The namespace stays
    here: below the parser, the run reads its typed configuration only."""
    parser = get_args_parser(prog)
    defaults = parser_defaults()  # the parser's own, before any recipe
    config_path, dataset = _find_config_arg(argv if argv is not None else sys.argv[1:], parser)
    try:
        recipe = load_recipe(config_path, parser) if config_path is not None else {}
        data_recipe = DATA_RECIPES.get(dataset or recipe.get("dataset"))
        if data_recipe is not None:
            parser.set_defaults(**load_recipe(data_recipe, parser))
        parser.set_defaults(**recipe)
        args = parser.parse_args(argv)
        source = source_for(read_options(args, DataOptions))  # the one place a run picks its data source
        if args.model is None:
            args.model = "r2plus1d_18" if source.video else "resnet18"
        typed = typed_options(args)
        inp = check_args(args, source, defaults, typed)
    except ConfigError as e:
        parser.exit(2, f"{prog}: error: {e}\n")
    return settle(args, source, inp, typed)


def given_options(argv):
    """{option: value} of what `argv` itself sets: its flags, over the keys of the recipe its --config names; no
    default, nothing a --dataset's own recipe or this machine supplies (the worker count, the launch's precision). A
    recipe as a person would write it, which fills in the rest wherever it is trained."""
    parser = get_args_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS  # an option absent from argv is absent from the namespace
    config_path, _ = _find_config_arg(argv, parser)
    try:
        recipe = load_recipe(config_path, parser) if config_path is not None else {}
    except ConfigError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    given = vars(parser.parse_args(argv))
    given.pop("config", None)
    return {**recipe, **given}


def parser_defaults():
    """{option: the parser's own default}, before any recipe: what "left at its default" means in the checks."""
    return {action.dest: action.default for action in get_args_parser()._actions}


def parse_args(argv=None, prog="train_classification.py"):
    """The options as parse reads them, in argparse's namespace, for the tools that list or compare options by name
    (tune.py's search space, the tests); a run takes parse's Settings."""
    return flat_namespace(parse(argv, prog))


def flat_namespace(settings):
    """The options of `settings` in argparse's namespace (flat_options)."""
    return argparse.Namespace(**flat_options(settings))


def _find_config_arg(argv, parser):
    """Read --config and --dataset alone first: the recipes they name set the defaults of the full parse."""
    pre = _OneLineParser(prog=parser.prog, add_help=False)
    pre.add_argument("--config", type=str, default=None)
    pre.add_argument("--dataset", type=str, default=None)
    known, _ = pre.parse_known_args(argv)
    return known.config, known.dataset


