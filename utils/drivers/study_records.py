"""What a study folder gets: trials.csv (rewritten as trials end), best.yaml (the best trial's recipe), Optuna's own
plots of the objective over trials and of each option's importance, study.html (all of it in one self-contained
page, linking each trial's report.html), and with wandb the study's table in a run of the study's group."""

import csv
import html
import io
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
import yaml  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from utils.core.io import write_text_atomic  # noqa: E402
from utils.reporting.html_report import STYLE, embedded  # noqa: E402

FIELDS = ("number", "state", "objective", "epochs", "wall_s", "run_folder")
# as tune.py's lines say it; the others by Optuna's name (complete, pruned, running)
STATES = {TrialState.FAIL: "failed"}


def wall_s(frozen):
    """A finished trial's wall time, from its first start to its end (a resumed trial's attempts and the gap
    between)."""
    if frozen.datetime_start is None or frozen.datetime_complete is None:
        return None
    return round((frozen.datetime_complete - frozen.datetime_start).total_seconds(), 1)


def rows(study):
    """One dict a trial: its number, state, objective (a complete trial's), epochs run, wall time, run folder, then its
    options (the space's names) and, for a failed one, its last line."""
    names = list(dict.fromkeys(name for t in study.get_trials(deepcopy=False) for name in t.params))
    table = []
    for t in study.get_trials(deepcopy=False):
        row = {"number": t.number, "state": STATES.get(t.state, t.state.name.lower()), "objective": t.value,
               "epochs": t.user_attrs.get("epochs"), "wall_s": wall_s(t), "run_folder": t.user_attrs.get("run_folder")}
        table.append({**row, **{name: t.params.get(name) for name in names}, "line": t.user_attrs.get("line", "")})
    return table


def write_trials_csv(study, folder):
    buffer = io.StringIO()
    table = rows(study)
    fields = list(table[0]) if table else list(FIELDS)
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    write_text_atomic(folder / "trials.csv", buffer.getvalue())


def best_trial(study):
    """The best complete trial, or None."""
    return study.best_trial if any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)) else None


def write_best_yaml(study, folder, base):
    """best.yaml: the best trial's recipe, what the study's options after -- (`base`) set and what the search chose
    for it, nothing else: the defaults, and what a machine resolves for itself (its worker count, its precision), are
    filled in where it is trained. `train_classification.py --config best.yaml` trains it again (on the same data,
    seed and hardware: bitwise)."""
    from utils.config.options import given_options

    best = best_trial(study)
    if best is None:
        return None
    options = {**given_options(list(base)), **best.params}
    head = (f"# the best trial of study {study.study_name}: trial {best.number}, objective {best.value:.6g}\n"
            f"# the search chose: {', '.join(f'{k}={v}' for k, v in best.params.items()) or 'the base options'}\n"
            f"# train it again: accelerate launch train_classification.py --config best.yaml --output_dir DIR\n")
    write_text_atomic(folder / "best.yaml", head + yaml.safe_dump(options, sort_keys=False))
    return folder / "best.yaml"


def write_plots(study, folder):
    """history.png (the objective over trials) and importance.png (each option's importance: fANOVA on the complete
    trials, from two of them on); the paths written, and a line for each plot not drawn."""
    drawn, notes = [], []
    plots = (("history.png", optuna.visualization.matplotlib.plot_optimization_history),
             ("importance.png", optuna.visualization.matplotlib.plot_param_importances))
    for name, plot in plots:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
                axes = plot(study)
            axes.figure.set_size_inches(7, 4.5)
            axes.figure.tight_layout()
            axes.figure.savefig(folder / name, dpi=100)
            drawn.append(folder / name)
        except (ValueError, RuntimeError, ZeroDivisionError) as e:
            notes.append(f"{name}: not drawn ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        finally:
            plt.close("all")
    return drawn, notes


def _within(path, folder):
    """`path` relative to the study folder where it lies in it (its trials do), else as it is."""
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return str(path)


def _cell(value):
    return f"{value:.6g}" if isinstance(value, float) else html.escape("" if value is None else str(value))


def write_study_html(study, folder, pictures, best_path):
    """study.html: the table of trials (each linked to its report.html), the plots embedded, best.yaml."""
    table = rows(study)
    fields = list(table[0]) if table else list(FIELDS)
    head = "".join(f"<th>{html.escape(f)}</th>" for f in fields)
    body = []
    for row in table:
        run = Path(row["run_folder"] or "")
        shown = {**row, "run_folder": _within(run, folder) if row["run_folder"] else None}  # trials/0003, not a path
        link = (f'<a href="{html.escape(_within(run / "report.html", folder))}">{row["number"]}</a>'
                if row["run_folder"] and (run / "report.html").is_file() else str(row["number"]))
        body.append("<tr>" + "".join(f"<td>{link if f == 'number' else _cell(shown[f])}</td>" for f in fields)
                    + "</tr>")
    title = f"tune.py: {study.study_name}"  # (a study is named after its folder: "study study" said nothing)
    parts = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<h2>{len(table)} trials ({study.direction.name.lower()} the objective)</h2>",
             f'<div class="wide"><table><tr>{head}</tr>{"".join(body)}</table></div>']
    parts += [f"<h2>{html.escape(p.stem)}</h2>{embedded(p)}" for p in pictures]
    if best_path is not None:
        parts.append(f"<h2>best.yaml</h2><pre>{html.escape(best_path.read_text())}</pre>")
    write_text_atomic(folder / "study.html", "\n".join(parts) + "</body></html>")
    return folder / "study.html"


def log_to_wandb(study, folder, project, pictures):
    """The study's table and plots, in a wandb run of the study's group (its trials are the group's other runs)."""
    import wandb

    table = rows(study)
    fields = list(table[0]) if table else list(FIELDS)
    run = wandb.init(project=project, group=study.study_name, job_type="study", name=f"{study.study_name}-study",
                     dir=str(folder))
    run.log({"trials": wandb.Table(columns=fields, data=[[row[f] for f in fields] for row in table]),
             **{p.stem: wandb.Image(str(p)) for p in pictures}})
    run.finish()
