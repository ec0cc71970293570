"""tune.py: a search on Optuna whose trials are launches of the script; and the argv forms of a wandb sweep agent.

Checks of a space and of the options after `--` run tune.py's main() in this process (no trial starts). Studies run
tune.py as its user does, a process that launches each trial (plain `python` for one process, `accelerate launch` for
two), on tiny runs of the embedded digits: 200-300 images, 2-3 epochs.
"""

import csv
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import ROOT, assert_same_weights, environment, read_json, resumed_from, run_main
from ranks import ranks_ok

sys.path.insert(0, str(ROOT))
import tune  # noqa: E402

TINY = ["--max_train_samples", "200", "--num_workers", "0", "--no_plots"]
TWO_PROCESSES = (f"{sys.executable} -m accelerate.commands.launch --config_file "
                 f"{ROOT / 'accel_configs' / 'cpu_2proc.yaml'} --monitor_interval 0.1")
ONE_PROCESS = sys.executable
REFUSED = "train_classification.py: error: min_lr: must not exceed lr=0.001, got 0.01"  # each option alone passes


def write_space(path, text):
    path.write_text(text)
    return str(path)


def study(folder, *options, base=(), timeout=300):
    """tune.py in its own process (its session: a signal to a trial's group never reaches pytest)."""
    return subprocess.run([sys.executable, str(ROOT / "tune.py"), "--study", str(folder), *options, "--",
                           *map(str, base)], cwd=ROOT, env=environment(), capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)


def trials_table(folder):
    with open(folder / "trials.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("space, base, said", [
    ("lrr: {low: 0.01, high: 1.0}", [], "lrr: not an option of train_classification.py (in {space}); did you mean lr?"),
    ("epochs: {low: 1.5, high: 3}", [], "epochs in {space}: expected an integer, got 1.5"),
    ("report_to: {choices: [none, slack]}", [], "report_to in {space}: 'slack' is not one of none, wandb"),
    ("optimizer: {choices: [sgd, adamx]}", [], "optimizer in {space}: the run refuses it: train_classification.py: "
     "error: optimizer: neither sgd, adamw nor a timm.optim name (did you mean adamax"),
    ("model_ema: {low: 0, high: 1}", [], "model_ema in {space}: --model_ema takes no number: give its choices"),
    ("lr: {low: 0.0, high: 1.0, log: true}", [], "lr in {space}: needs low < high and low > 0 (log)"),
    ("lr: {low: 0.1, high: 1.0, spread: 2}", [], "lr in {space}: a range has low and high (and log, step)"),
    ("output_dir: {choices: [a, b]}", [], "output_dir: set by tune.py for each trial"),
    ("label_smoothing: {choices: [0.1, 1.5]}", [], "label_smoothing in {space}: the run refuses it: "
     "train_classification.py: error: label_smoothing: must be in [0, 1)"),
    ("label_smoothing: {low: 0.0, high: 1.0}", [], "label_smoothing in {space}: the run refuses it: "
     "train_classification.py: error: label_smoothing: must be in [0, 1)"),  # its high end
    ("rand_augment: {low: 5, high: 9}", [], "rand_augment in {space}: the run refuses it: train_classification.py: "
     "error: rand_augment: the embedded digits keep their own recipe"),
    ("lr: {low: 0.01, high: 1.0}", ["--output_dir", "x"], "--output_dir: set by tune.py for each trial"),
    ("lr: {low: 0.01, high: 1.0}", ["--label_smoothing", "2"], "the options after -- are refused: "
     "train_classification.py: error: label_smoothing: must be in [0, 1)"),
    ("lr: {low: 0.01, high: 1.0}", ["--sampler_grid"], "the options after -- are refused"),
])
def test_a_bad_space_or_bad_options_are_one_line_before_any_trial(tmp_path, capsys, space, base, said):
    path = write_space(tmp_path / "space.yaml", space)
    code = tune.main(["--study", str(tmp_path / "study"), "--trials", "2", "--space", path, "--", *base])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("tune.py: error: " + said.format(space=path)) and err.count("\n") == 1, err
    assert not (tmp_path / "study").exists()  # nothing written


def test_grid_needs_choices_and_the_baseline_is_no_grid_point(tmp_path, capsys):
    path = write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 1.0}\n")
    assert tune.main(["--study", str(tmp_path / "s"), "--trials", "2", "--space", path, "--sampler", "grid"]) == 2
    assert capsys.readouterr().err == "tune.py: error: sampler: grid needs choices for every option of the space, " \
                                      "not ranges\n"
    with pytest.raises(SystemExit) as stopped:
        tune.main(["--study", str(tmp_path / "s"), "--trials", "2", "--sampler", "grid", "--baseline"])
    assert stopped.value.code == 2 and "--baseline: a grid's trials are its points" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune.main(["--study", str(tmp_path / "s"), "--trials", "2", "--pruner", "none", "--prune_startup", "1"])
    assert "--prune_startup: the median pruner's" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_the_default_space_leaves_out_and_names_what_the_run_refuses(capsys):
    args = tune.get_parser().parse_args(["--study", "unused", "--trials", "1"])
    names = [p.name for p in tune.preflight(args, ["--dataset", "digits"])]
    out = capsys.readouterr().out
    assert "tune.py: left out of the default space: rand_augment (rand_augment: the embedded digits keep their own " \
           "recipe" in out
    assert "tune.py: left out of the default space: model_ema_decay (model_ema_decay: sets the moving average of the " \
           "weights: add --model_ema" in out
    assert names == ["lr", "weight_decay", "label_smoothing", "mixup_alpha", "cutmix_alpha"]
    with_ema = [p.name for p in tune.preflight(args, ["--dataset", "digits", "--model_ema"])]
    assert with_ema == names + ["model_ema_decay"]


def test_on_long_tailed_data_the_default_space_searches_how_to_balance_the_classes_too(tmp_path, capsys):
    """The digits made long-tailed (class 0 whole, class 9 about a hundredth of it): the default space adds
    long_tail.yaml's sampler, class weights and logit adjustment, and says why; the digits as they are, or a space of
    one's own, do not."""
    args = tune.get_parser().parse_args(["--study", "unused", "--trials", "1"])
    names = [p.name for p in tune.preflight(args, ["--dataset", "digits", "--imbalance", "100"])]
    said = capsys.readouterr().out
    assert names == ["lr", "weight_decay", "label_smoothing", "mixup_alpha", "cutmix_alpha", "sampler", "class_weights",
                     "logit_adjust"]
    assert re.search(r"^tune\.py: the training classes are long-tailed \(head/tail \d+x\): the default space searches "
                     r"how to balance them too \(sampler in \['shuffle', 'balanced'\], class_weights in \[None, "
                     r"'balanced'\], logit_adjust in \[None, 0\.5, 1\.0\], from long_tail\.yaml\)$", said, re.M), said
    assert "long-tailed" not in capsys.readouterr().out + "".join(
        p.name for p in tune.preflight(args, ["--dataset", "digits", "--imbalance", "5"]))  # head/tail 5: not
    space = write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 0.1}\n")
    own = tune.get_parser().parse_args(["--study", "unused", "--trials", "1", "--space", str(space)])
    assert [p.name for p in tune.preflight(own, ["--dataset", "digits", "--imbalance", "100"])] == ["lr"]


@pytest.mark.parametrize("pruner, kind", [("median", "MedianPruner"), ("successive_halving", "SuccessiveHalvingPruner"),
                                          ("hyperband", "HyperbandPruner"), ("none", "NopPruner")])
def test_each_pruner_is_optunas_own(pruner, kind, tmp_path):
    from utils.drivers.study import StudyOptions, _pruner

    options = StudyOptions(tmp_path, "s", None, "tpe", 0, pruner, 5, False, "tracked", 4, ())
    assert type(_pruner(options)).__name__ == kind


# configs/search/: tune.py's spaces (and a wandb sweep), apart from the recipes of configs/
@pytest.mark.parametrize("space", [ROOT / "configs" / "search" / name
                                   for name in ("tune_space.yaml", "long_tail.yaml")],
                         ids=lambda p: p.name)
def test_the_shipped_spaces_load_and_the_digits_keep_most_of_them(space, capsys):
    from utils.drivers.space import load_space

    params = load_space(space)
    args = tune.get_parser().parse_args(["--study", "unused", "--trials", "1", "--space", str(space)])
    base = ["--dataset", "digits", "--imbalance", "100", "--model_ema"]
    if space.name == "tune_space.yaml":  # the default: what the digits refuse is left out, not an error
        args.space = None
    kept = tune.preflight(args, base)
    assert len(params) >= 5 and len(kept) >= len(params) - 1


def valued_example(action):
    """A value the option takes that is not its default (what a sweep would set it to)."""
    from utils.config.data_options import stat_value
    from utils.config.training_options import learning_rate, micro_batch

    if action.choices is not None:
        return [c for c in action.choices if c != action.default][-1]
    one = {int: 3, float: 0.25, learning_rate: 0.25, micro_batch: 3, stat_value: 0.25}.get(action.type, "x")
    if isinstance(action.nargs, int):
        return [one] * action.nargs
    return [one, one] if action.nargs in ("+", "*") else one


def test_every_option_parses_in_the_forms_a_wandb_sweep_agent_sends(capsys):
    # The installed wandb's own function builds the agent's argv (${args}: --name=value; ${args_no_boolean_flags}:
    # a true switch as --name, a false one left out); a change in wandb's forms fails here, not in a user's sweep.
    import argparse

    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    from utils.config.options import get_args_parser

    parser = get_args_parser()
    actions = [a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")]
    switches = [a for a in actions if isinstance(a, (argparse._StoreTrueAction, argparse.BooleanOptionalAction))]
    assert len(switches) >= 20
    checked = 0
    for action in actions:
        values = [True, False] if action in switches else [valued_example(action)]
        for value in values:
            forms = create_sweep_command_args({"args": {action.dest: {"value": value}}})
            for form in ("args", "args_no_boolean_flags"):
                got = getattr(parser.parse_args(forms[form]), action.dest)
                if form == "args_no_boolean_flags" and value is False:
                    assert got == action.default, (action.dest, forms[form])  # left out: its default
                else:
                    assert got == value, (action.dest, value, forms[form], got)
                checked += 1
    assert checked > 2 * len(actions)
    # a switch given a word that is not True or False, and a list that is not one: one line each
    for bad, said in ((["--model_ema=maybe"], "argument --model_ema: a switch takes no value, or True or False"),
                      (["--mean=[0.5, [1]]"], "argument --mean: '[0.5, [1]]' is not a list of values")):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
        assert said in capsys.readouterr().err


def test_a_false_switch_from_a_sweep_turns_off_what_a_recipe_turned_on(tmp_path):
    from utils.config.options import parse_args

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_ema: true\nnesterov: false\nchannels_last: true\n")
    args = parse_args(["--config", str(recipe), "--model_ema=False", "--nesterov=True", "--channels_last=false"])
    assert (args.model_ema, args.nesterov, args.channels_last) == (False, True, False)


def test_the_wandb_sweep_config_launches_through_accelerate_and_its_parameters_parse():
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    from utils.config.options import parse_args

    sweep = yaml.safe_load((ROOT / "configs" / "search" / "sweep_wandb.yaml").read_text())
    # a list of words: one "accelerate launch" word would be run as a program of that name (wandb #4135)
    assert (sweep["command"][:4] == ["${env}", "accelerate", "launch", "${program}"]
            and sweep["command"][-1] == "${args}")
    assert sweep["program"] == "train_classification.py"
    for name, spec in sweep["parameters"].items():
        values = spec.get("values") or [spec.get("value")] if "min" not in spec else [spec["min"], spec["max"]]
        for value in values:
            argv = create_sweep_command_args({"args": {name: {"value": value}}})["args"]
            assert getattr(parse_args(argv), name) == value, (name, value)


def test_a_trials_command_and_environment(tmp_path):
    from utils.drivers.study import Claim

    claim = Claim(trial=None, values={"lr": 0.05, "model_ema": False, "mean": [0.5, 0.4, 0.3], "class_weights": None},
                  folder=tmp_path / "trials" / "0003", resumed=True, owner=None, reported=set())
    args = tune.get_parser().parse_args(["--study", "s", "--trials", "1",
                                         "--launch", "accelerate launch --num_processes 2", "--devices", "2,3"])
    command = tune.command_for(args, claim, ["--epochs", "2"])
    port = command.index("--main_process_port")  # a free port of its own: two trials at once on one node
    assert command[:3] == ["accelerate", "launch", "--num_processes"] and int(command[port + 1]) > 0
    script = command.index(str(ROOT / "train_classification.py"))
    assert command[script + 1:] == ["--epochs", "2", "--lr=0.05", "--model_ema=False", "--mean", "0.5", "0.4", "0.3",
                                    "--output_dir", str(claim.folder), "--resume", "latest"]  # null: not given
    args.launch = "accelerate launch --main_process_port 29999"
    assert tune.command_for(args, claim, []).count("--main_process_port") == 1  # the user's port kept
    env = tune.trial_env(args, "study_a")
    assert (env["CUDA_VISIBLE_DEVICES"], env["WANDB_RUN_GROUP"]) == ("2,3", "study_a")


def test_a_study_continued_with_another_space_or_base_options_is_refused(tmp_path, capsys):
    space = write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 0.1}\n")
    other = write_space(tmp_path / "other.yaml", "lr: {low: 0.01, high: 0.2}\n")
    args = tune.get_parser().parse_args(["--study", str(tmp_path / "s"), "--trials", "1", "--space", space])
    from utils.drivers.study import StudyOptions, open_study

    options = StudyOptions(tmp_path / "s", "s", None, "tpe", 0, "median", 5, False, "tracked", 1, ("--epochs", "1"))
    open_study(options, tune.preflight(args, ["--epochs", "1"]))
    before = sorted(p.name for p in (tmp_path / "s").iterdir())
    cases = ((["--space", other], ["--epochs", "1"], "space"), (["--space", space], ["--epochs", "2"], "base"),
             (["--space", space, "--objective", "val_loss"], ["--epochs", "1"], "objective"))
    for own, base, said in cases:
        code = tune.main(["--study", str(tmp_path / "s"), "--trials", "1", *own, "--", *base])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"tune.py: error: study: s was made with another {said} ("), err
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == before  # no trial started


def test_each_option_is_searched_over_the_distribution_its_space_says(tmp_path):
    import optuna

    from utils.drivers.space import load_space

    params = load_space(write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 1.0, log: true}\n"
                                    "label_smoothing: {low: 0.0, high: 0.2, step: 0.05}\nepochs: {low: 2, high: 8}\n"
                                    "rand_augment: {low: 1, high: 9, step: 2}\n"
                                    "sampler: {choices: [shuffle, balanced]}\n"
                                    "batch_size: {low: 16, high: 128, log: true}\n"))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    values = {p.name: p.suggest(trial) for p in params}
    got = {name: (type(d).__name__, getattr(d, "log", None), getattr(d, "step", None))
           for name, d in trial.distributions.items()}
    assert got == {"lr": ("FloatDistribution", True, None), "label_smoothing": ("FloatDistribution", False, 0.05),
                   "epochs": ("IntDistribution", False, 1), "rand_augment": ("IntDistribution", False, 2),
                   "sampler": ("CategoricalDistribution", None, None), "batch_size": ("IntDistribution", True, 1)}
    assert isinstance(values["epochs"], int) and values["rand_augment"] % 2 == 1 and 0.01 <= values["lr"] <= 1.0


@pytest.mark.parametrize("options, record, key", [  # run.json names the kind; one written before, by a bool
    ({}, {"label_kind": "single_label"}, "val_top1"), ({"model_ema": True}, {"multi_label": False}, "val_ema_top1"),
    ({"track_metric": "balanced_accuracy"}, {}, "val_balanced_accuracy"), ({}, {"multi_label": True}, "val_map"),
    ({"track_metric": "macro_f1", "model_ema": True}, {"label_kind": "multi_label"}, "val_ema_f1_macro"),
])
def test_a_trials_objective_is_the_figure_its_run_tracks(tmp_path, options, record, key):
    import json

    from utils.drivers.trial_run import objective_key

    assert objective_key(tmp_path, "tracked") is None  # the run has not written its files yet
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"track_metric": None, "model_ema": False, **options}))
    (tmp_path / "run.json").write_text(json.dumps(record))
    assert objective_key(tmp_path, "tracked") == key and objective_key(tmp_path, "val_loss") == "val_loss"


def test_the_same_seed_proposes_the_same_trials_whichever_process_asks(tmp_path):
    # A trial's suggestions are drawn by a sampler seeded with (--seed, the trial's number): two studies of one seed
    # propose the same first trials, and trial 1 is the same whether the process that ran trial 0 asks for it or not.
    from optuna.trial import TrialState

    from utils.drivers.space import load_space
    from utils.drivers.study import StudyOptions, claim_next, open_study

    params = load_space(write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 1.0, log: true}\n"
                                    "mixup_alpha: {choices: [0.0, 0.2, 0.8]}\n"))

    def proposed(name, seed):
        options = StudyOptions(tmp_path / name, name, None, "tpe", seed, "median", 5, False, "tracked", 3, ())
        studies = [open_study(options, params), open_study(options, params)]  # two processes' views of one study
        values = []
        for number, study in zip(range(3), (studies[0], studies[1], studies[0])):
            claim = claim_next(study, options, params)
            assert claim.trial.number == number
            values.append(claim.values)
            study.tell(claim.trial, state=TrialState.FAIL)
            claim.owner.close()
        assert claim_next(studies[1], options, params) is None  # 3 in all
        return values

    first = proposed("a", 0)
    assert proposed("b", 0) == first and proposed("c", 1) != first
    assert len({v["lr"] for v in first}) == 3


@pytest.mark.slow
def test_a_pruned_trial_saves_on_both_ranks_and_best_yaml_trains_the_best_trial_again_bitwise(tmp_path):
    # Trial 0, the baseline, trains at lr 1e-6 (its val loss stays at ln 10); trial 1's lr, 0.5-0.6, sends its loss
    # far above that at epoch 1: the median rule (from one complete trial on) prunes it there. Two processes a trial.
    space = write_space(tmp_path / "space.yaml", "lr: {low: 0.5, high: 0.6}\n")
    folder = tmp_path / "study"
    # (--max_failures 1: a pruned trial is no failure, the study goes on past it)
    proc = study(folder, "--trials", "2", "--space", space, "--baseline", "--objective", "val_loss",
                 "--prune_startup", "1", "--max_failures", "1", "--launch", TWO_PROCESSES,
                 base=["--epochs", "2", "--lr", "1e-6", *TINY])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = trials_table(folder)
    assert [(r["number"], r["state"], r["epochs"]) for r in rows] == [("0", "complete", "2"), ("1", "pruned", "1")]
    assert rows[0]["lr"] == "" and 0.5 <= float(rows[1]["lr"]) <= 0.6
    pruned = folder / "trials" / "0001"
    console = (pruned / "console.log").read_text()
    # every rank got the SIGTERM, saved its part of the checkpoint and left with 75 (the line is printed before)
    assert len(re.findall(r"^train_classification\.py: interrupted by SIGTERM at step \d+: checkpoint saved",
                          console, re.M)) == 2, console[-3000:]
    assert list((pruned / "checkpoints").iterdir()) and not (pruned / "results.json").exists()
    assert "tune.py: trial 1 pruned after 1 validations" in proc.stdout
    said = re.findall(r"^tune\.py: trial (\d) \((\d) of 2\): epoch (\d)/2, val_loss \S+; elapsed \S+, ~\S+ left$",
                      proc.stdout, re.M)  # each validation as it comes, as a run's own lines
    assert said == [("0", "1", "1"), ("0", "1", "2"), ("1", "2", "1")], proc.stdout
    # best.yaml: the baseline's recipe, what the options after -- set, nothing this machine resolved (its workers, its
    # precision, its folder); trained again on two processes, its weights bitwise
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best == {"epochs": 2, "lr": 1e-6, "max_train_samples": 200, "num_workers": 0, "no_plots": True}, best
    ranks_ok(["--config", folder / "best.yaml", "--output_dir", tmp_path / "again"])
    assert_same_weights(folder / "trials" / "0000", tmp_path / "again")
    page = (folder / "study.html").read_text()
    assert 'href="trials/0000/report.html"' in page and "data:image/png;base64," in page
    assert (folder / "history.png").stat().st_size > 0


def start_study(command):
    return subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def after_first_validation(process, trial_folder, signum):
    """Send `signum` to tune.py once the trial in `trial_folder` has validated its first epoch; tune.py's output."""
    metrics = trial_folder / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and "val_loss" in metrics.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    os.kill(process.pid, signum)
    return process.communicate(timeout=120)


def test_the_options_a_command_line_sets_are_its_flags_over_its_recipes_keys(tmp_path):
    """best.yaml's recipe: what the options after -- set (a --config recipe's keys under the flags, a sweep's forms),
    not the defaults nor what the machine resolves (num_workers, the precision)."""
    from utils.config.options import given_options

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("lr: 0.05\nepochs: 9\nmodel_ema: true\n")
    assert given_options(["--config", str(recipe), "--epochs", "3", "--model_ema=False", "--mean", "0.5", "0.5",
                          "0.5", "--dataset", "moving_digits"]) == {"lr": 0.05, "epochs": 3, "model_ema": False,
                                                                    "mean": [0.5, 0.5, 0.5], "dataset": "moving_digits"}
    assert given_options([]) == {}


def study_page(tmp_path):
    """study.html of a study of 3 trials in a folder of a long name, each with a long last line: its text."""
    import optuna

    from utils.drivers.study_records import write_study_html

    folder = tmp_path / "a_study_folder_of_a_long_name" / "study"
    study = optuna.create_study(study_name="study")
    for number in range(3):
        run = folder / "trials" / f"{number:04d}"
        run.mkdir(parents=True)
        (run / "report.html").write_text("<html></html>")
        study.add_trial(optuna.trial.create_trial(
            params={"lr": 0.01 * (number + 1), "label_smoothing": 0.1}, value=0.9 + number / 100,
            distributions={"lr": optuna.distributions.FloatDistribution(0.001, 1, log=True),
                           "label_smoothing": optuna.distributions.FloatDistribution(0, 0.3)},
            user_attrs={"run_folder": str(run), "epochs": 3, "line": "train_classification.py: error: " + "x" * 300}))
    return write_study_html(study, folder, [], None).read_text()


TABLE_ON_A_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
import optuna
from utils.drivers.study_records import write_trials_csv

optuna.logging.set_verbosity(optuna.logging.ERROR)
folder, study = Path(sys.argv[1]), optuna.create_study()
lr = optuna.distributions.FloatDistribution(0.001, 1, log=True)
for number in range(40):
    study.add_trial(optuna.trial.create_trial(params={"lr": 0.001 * (number + 1)}, distributions={"lr": lr}, value=0.5,
                                              user_attrs={"epochs": 3, "line": "a line " * 20}))
    if number == 0:
        write_trials_csv(study, folder)  # the table as the study had it after its first trial
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
try:
    write_trials_csv(study, folder)
except OSError as error:
    print(error.strerror)
"""


def test_a_table_that_cannot_be_written_leaves_the_one_before_whole(tmp_path):
    """trials.csv is rewritten whole or not at all: a write that fails (here a file-size limit, as a full disk fails
    it) leaves the table of the trials before, never a truncated one, and no temporary file."""
    done = subprocess.run([sys.executable, "-c", TABLE_ON_A_FULL_DISK, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.strip() == "File too large", done.stderr
    table = trials_table(tmp_path)
    assert [row["number"] for row in table] == ["0"] and table[0]["lr"] == "0.001"
    assert [p.name for p in tmp_path.iterdir()] == ["trials.csv"]


def test_the_study_page_is_titled_by_its_study_and_shows_each_trials_folder_within_it(tmp_path):
    page = study_page(tmp_path)  # (a study is named after its folder: the title said "study study")
    assert "<title>tune.py: study</title>" in page and 'href="trials/0002/report.html"' in page
    assert "<td>trials/0001</td>" in page and str(tmp_path) not in page


@pytest.mark.slow
def test_the_study_page_fits_its_window(tmp_path):
    """study.html in headless chromium, 1200 px wide: no horizontal scroll however long a trial's last line."""
    from helpers.browser import chromium, measured

    fits = measured(chromium(), study_page(tmp_path), "document.title = document.documentElement.scrollWidth + ' ' + "
                    "innerWidth", tmp_path)
    wide, window = map(int, fits.split())
    assert wide <= window, fits


def test_a_stopped_driver_says_what_the_same_command_continues_from(tmp_path):
    """tune.py's and crossval.py's last line when stopped, from what the run's folder holds: nothing running, a run
    stopped before its first checkpoint (it starts again), one that saved nothing since it started (it continues from
    an older checkpoint), one that saved."""
    from utils.drivers.trial_run import Stop, TrialRun

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = Stop()
    finally:
        for signum, handler in handlers.items():  # this test's process keeps its own
            signal.signal(signum, handler)
    stop.name = "SIGINT"
    assert stop.line("trial") == "stopped by SIGINT between trials: rerun the same command to continue"

    def checkpoint(run, step, when):
        folder = run.folder / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / "training_state.json").write_text(f'{{"global_step": {step}, "epoch_end": false}}')
        os.utime(folder / "training_state.json", (when, when))

    stop.stopped = run = TrialRun(["true"], tmp_path / "trial", {})
    run.started = time.time() - 10
    assert stop.line("fold") == ("stopped by SIGINT; the running fold had not reached its first checkpoint: rerun the "
                                 "same command to start it again")
    checkpoint(run, 4, run.started - 100)  # from an earlier start
    assert stop.line("fold").endswith("saved nothing since it started: rerun the same command to continue it from "
                                      "step_4")
    checkpoint(run, 9, run.started + 5)
    assert stop.line("trial") == ("stopped by SIGINT; the running trial saved its checkpoint step_9: rerun the same "
                                  "command to continue")


@pytest.mark.slow
def test_a_study_stopped_by_sigterm_then_sigkilled_finishes_each_interrupted_trial_bitwise(tmp_path):
    # SIGTERM to tune.py during trial 0: passed to the trial's processes, which save; tune.py exits 75. Started again,
    # it continues trial 0; SIGKILLed during trial 1, whose launcher then gets SIGTERM as its parent dies: it saves too.
    # The third start finishes trial 1 from its checkpoint (not from zero): each trial bitwise an uninterrupted run.
    space = write_space(tmp_path / "space.yaml", "lr: {low: 0.01, high: 0.1, log: true}\n")
    folder, base = tmp_path / "study", ["--epochs", "3", "--max_train_samples", "300", "--num_workers", "0"]
    options = ["--trials", "2", "--space", space, "--pruner", "none", "--launch", ONE_PROCESS]
    command = [sys.executable, str(ROOT / "tune.py"), "--study", str(folder), *options, "--", *base]
    trials = [folder / "trials" / f"{n:04d}" for n in range(2)]

    # the first start launches through a shell that passes no signal on: tune.py signals every process of the group
    wrapped = [*command[:command.index("--launch") + 1], f"sh -c '{sys.executable} \"$@\"; exit $?' sh",
               *command[command.index("--launch") + 2:]]
    first = start_study(wrapped)
    out, err = after_first_validation(first, trials[0], signal.SIGTERM)
    saved = sorted((trials[0] / "checkpoints").iterdir(), key=lambda c: c.stat().st_mtime)
    assert first.returncode == 75 and err.strip().splitlines()[-1] == (
        f"tune.py: stopped by SIGTERM; the running trial saved its checkpoint {saved[-1].name}: rerun the same command "
        f"to continue"), err
    assert not (trials[0] / "results.json").exists()
    second = start_study(command)
    out, err = after_first_validation(second, trials[1], signal.SIGKILL)
    assert "tune.py: trial 0 continues (--resume latest)" in out and "tune.py: trial 0 complete" in out, out + err
    proc = study(folder, *options, base=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tune.py: trial 1 continues (--resume latest)" in proc.stdout
    rows = trials_table(folder)
    assert [(r["number"], r["state"], r["epochs"]) for r in rows] == [("0", "complete", "3"), ("1", "complete", "3")]
    for trial, row in zip(trials, rows):
        console = (trial / "console.log").read_text()
        assert "interrupted by SIGTERM" in console
        assert resumed_from(console.split("--resume latest\n")[-1]) is not None  # continued, not restarted
        run_main(["--config", trial / "config.yaml", "--output_dir", tmp_path / f"uninterrupted_{row['number']}"])
        assert_same_weights(trial, tmp_path / f"uninterrupted_{row['number']}")
        assert read_json(trial / "results.json")["val_top1"] == float(row["objective"])


@pytest.mark.slow
def test_two_tune_processes_share_one_journal_and_a_refused_combination_is_recorded_as_failed(tmp_path):
    # A grid of 4 points, two of them refused by the script (--min_lr above --lr: each alone passes the checks before
    # the trials): the two processes run 3 trials in all (the grid would allow 4), none twice, and the study goes on
    # past a failure.
    space = write_space(tmp_path / "space.yaml", "lr: {choices: [0.1, 0.001]}\nmin_lr: {choices: [0.01]}\n"
                        "label_smoothing: {choices: [0.0, 0.1]}\n")
    folder = tmp_path / "study"
    command = [sys.executable, str(ROOT / "tune.py"), "--study", str(folder), "--trials", "3", "--space", space,
               "--sampler", "grid", "--pruner", "none", "--launch", ONE_PROCESS, "--",
               "--epochs", "1", "--max_train_samples", "100", "--num_workers", "0"]
    both = [subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in both]
    assert [p.returncode for p in both] == [0, 0], outputs
    rows = trials_table(folder)
    assert len(rows) == 3
    points = {(r["lr"], r["label_smoothing"]) for r in rows}
    assert len(points) == 3 and points <= {(lr, s) for lr in ("0.1", "0.001") for s in ("0.0", "0.1")}  # none twice
    assert {r["state"] for r in rows} == {"failed", "complete"}
    for r in rows:
        if r["lr"] == "0.001":
            assert r["state"] == "failed" and r["line"] == REFUSED, r
        else:
            assert r["state"] == "complete" and float(r["objective"]) >= 0, r
    started = [re.findall(r"^tune\.py: trial (\d+) starts", out, re.M) for out in outputs]
    assert sorted(sum(started, [])) == ["0", "1", "2"] and all(started), outputs  # each process ran some


@pytest.mark.slow
def test_failed_trials_in_a_row_stop_the_study_with_the_last_line(tmp_path):
    space = write_space(tmp_path / "space.yaml", "lr: {choices: [0.001]}\nmin_lr: {choices: [0.01]}\n")
    # (the study in a database this time: any Optuna storage URL)
    proc = study(tmp_path / "study", "--trials", "5", "--space", space, "--sampler", "random", "--max_failures", "2",
                 "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--launch", ONE_PROCESS,
                 base=["--epochs", "1", *TINY])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == f"tune.py: error: 2 failed trials in a row; the last said: {REFUSED}"
    assert [r["state"] for r in trials_table(tmp_path / "study")] == ["failed", "failed"]
    assert (tmp_path / "study.db").stat().st_size > 0 and not (tmp_path / "study" / "journal.log").exists()


@pytest.mark.slow
def test_with_wandb_every_trial_is_a_run_of_the_studys_group_and_the_study_logs_its_table(tmp_path):
    space = write_space(tmp_path / "space.yaml", "label_smoothing: {choices: [0.05]}\n")
    folder = tmp_path / "study"
    proc = study(folder, "--study_name", "grpq7x", "--trials", "1", "--space", space, "--launch", ONE_PROCESS,
                 base=["--epochs", "1", "--report_to", "wandb", *TINY])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial_run,) = (folder / "trials" / "0000" / "wandb").glob("offline-run-*")
    (record,) = trial_run.glob("run-*.wandb")
    assert b"grpq7x" in record.read_bytes()  # the study's name (in no path): the run's group, in its run record
    assert "'label_smoothing': 0.05," in (trial_run / "logs" / "debug.log").read_text()  # its options, its config
    (study_run,) = (folder / "wandb").glob("offline-run-*")
    (table,) = (study_run / "files" / "media" / "table").glob("trials_*.table.json")
    logged = read_json(table)
    assert logged["columns"][:3] == ["number", "state", "objective"] and len(logged["data"]) == 1
    assert logged["data"][0][:3] == [0, "complete", float(trials_table(folder)[0]["objective"])]
    assert b"grpq7x" in next(study_run.glob("run-*.wandb")).read_bytes()


@pytest.mark.parametrize("counts, balanced", [([100, 50, 10], True), ([100, 50, 11], False), ([40, 7, 0], True),
                                              ([3, 3, 3], False)])
def test_the_default_space_balances_the_classes_from_a_head_ten_times_its_tail(counts, balanced, monkeypatch):
    """Long-tailed from a most frequent class 10 times the rarest (LONG_TAILED, included), or a class without
    samples."""
    import numpy as np

    from utils.config import settings
    from utils.drivers.space import default_space

    monkeypatch.setattr(settings, "class_counts", lambda args: np.array(counts))
    names = [p.name for p in default_space(["--dataset", "digits"], lambda line: None)]
    assert ("sampler" in names and names[-3:] == ["sampler", "class_weights", "logit_adjust"]) is balanced


def test_class_counts_count_every_class_the_data_names_even_one_without_training_samples(monkeypatch):
    from types import SimpleNamespace

    from utils.config import settings
    from utils.config.options import parse_args

    source = SimpleNamespace(labels_ahead=True, datasets=lambda data, inp, rank, world: ("train", None, ["a", "b", "c"],
                                                                                         None),
                             labels=lambda train: [0, 1, 0, 1, 1])
    monkeypatch.setattr(settings, "_source_and_input", lambda args: (None, source, None))
    assert settings.class_counts(parse_args(["--dataset", "digits"])).tolist() == [2, 3, 0]
