"""What a run whose training split was remade (--folds, --flip_labels: utils/data/sources/folds.py) writes of it:
flipped_labels.csv when it starts; fold_predictions.csv once trained, the held-out fold's class probabilities under the
final weights (those model/ holds), or with --keep_best its best (best/), which crossval.py gathers into the
out-of-fold predictions."""

import csv
import io

from utils.core.io import write_text_atomic
from utils.evaluation.calibration import validation_logits
from utils.models.weights import read_state_dict
from utils.run.job import new_model


def write_flipped(out, remade, class_names):
    """flipped_labels.csv: sample, its label, the label it was given instead."""
    text = io.StringIO()
    table = csv.writer(text)
    table.writerow(["sample", "label", "given_label"])
    table.writerows([name, class_names[label], class_names[given]] for name, label, given in remade.flipped)
    write_text_atomic(out / "flipped_labels.csv", text.getvalue())


def label_cell(label, class_names):
    """A given label as a cell: its class's name; for several labels a sample (a multi-hot row), their names joined
    by spaces."""
    if isinstance(label, list):
        return " ".join(class_names[k] for k, on in enumerate(label) if on)
    return class_names[label]


def scored_model(job):
    """The weights a fold is scored with: --keep_best's best/ when it kept any (a fresh copy of the model, every rank
    the same), else the final ones model/ holds (the EMA's with --model_ema)."""
    best = job.out / "best" / "model.safetensors"
    if job.settings.checkpoints.keep_best and best.is_file():
        model = new_model(job.settings.model, job.class_names, False, job.settings.input)
        model.load_state_dict(read_state_dict(best))
        return model.to(job.accelerator.device)
    return job.ema.module if job.ema is not None else job.model


def fold_probabilities(job):
    """(each held-out sample's position in the validation set, its label, its class probabilities), gathered exactly
    from every rank (calibration's validation_logits), under the fold's final weights, or its best with --keep_best."""
    logits, labels, positions = validation_logits(job, scored_model(job))
    return positions, labels, job.task.activate(logits)


def write_fold_predictions(job):
    """fold_predictions.csv (main process; every rank scores its shard): the sample's place in the training split and
    its name there, its fold, its given label, then each class's probability, in the fold's order."""
    remade = job.settings.source.remade
    positions, labels, probabilities = fold_probabilities(job)
    if not job.accelerator.is_main_process:
        return
    text = io.StringIO()
    table = csv.writer(text)
    table.writerow(["index", "sample", "fold", "label", *job.class_names])
    for position, label, row in zip(positions.tolist(), labels.tolist(), probabilities.tolist()):
        table.writerow([remade.held_index[position], remade.held_out[position], remade.fold,
                        label_cell(label, job.class_names), *map(repr, row)])
    write_text_atomic(job.out / "fold_predictions.csv", text.getvalue())
