"""What a run writes beside its loop: config.yaml, labels.json and the dashboards' run at the start; the trained
weights in the forms their users take; results.json, the plots, where the model fails, the per-class table,
report.html and the closing line at the end (the pictures drawn by a child while the run ends)."""

import shlex
import shutil
import sys

from accelerate.utils import gather_object

from utils.config.options import flat_options
from utils.config.recipes import save_config
from utils.core.io import usual_permissions, write_json_atomic
from utils.evaluation.calibration import calibrate
from utils.evaluation.tasks import tracked_key, tuned_thresholds
from utils.models.ema import save_ema
from utils.reporting import report, trackers
from utils.reporting.drawing import Drawing
from utils.reporting.failures import failure_pictures, prediction_rows, write_failures
from utils.reporting.html_report import write_html
from utils.reporting.model_folder import save_model_folder
from utils.evaluation.multiview import multiview_test
from utils.evaluation.knn import KNN_FILE
from utils.run.split_records import write_flipped, write_fold_predictions
from utils.run.trained import trained_run, write_record


def run_summary(job, epochs_completed, global_step, train_time_s, **more):
    """What results.json says of the run's work, whichever it was (training, --eval_only, --probe): `more` after it."""
    return {"epochs_completed": epochs_completed, "global_step": global_step,
            "world_size": job.accelerator.num_processes, "train_time_s": train_time_s, "model": job.settings.model.name,
            "dataset": job.settings.source_name, **more}


def start_records(job, num_workers, previous_run=None):
    """config.yaml (a resumed run keeps the one it started with), labels.json and run.json (what a user of its
    weights needs: utils/run/trained.py), then the dashboards' run (the checkpoint's, continued, when resuming)."""
    accelerator, out, options = job.accelerator, job.out, flat_options(job.settings)
    if accelerator.is_main_process:
        if not (out / "config.yaml").exists():
            save_config(options, out / "config.yaml", output_dir=str(out), num_workers=num_workers,
                        mixed_precision=accelerator.mixed_precision, notes=job.lr_notes)
        write_json_atomic(out / "labels.json", dict(enumerate(job.class_names)))
        write_record(out, trained_run(job.settings, job.class_names, job.task.multi_label, batch=job.batch,
                                      lr_found=job.lr_found))
        if (remade := job.settings.source.remade) is not None and remade.flipped:  # --flip_labels
            write_flipped(out, remade, job.class_names)
    config = {**options, "output_dir": str(out), "num_workers": num_workers, "world_size":
              accelerator.num_processes, "mixed_precision": accelerator.mixed_precision}
    job.tracker_run_id = trackers.start(accelerator, job.settings.trackers, out, config, run_id=previous_run)


def export_weights(job, figures):
    """What the trained weights leave for their users once training is over (`figures`: its last validation's):
    model.safetensors (every rank takes part: FSDP gathers it), model_ema.safetensors, --calibrate's temperature
    fitted to the validation split's logits, model/ in its library's own form with, for multi-label data,
    thresholds.json; with --folds, the held-out fold's probabilities (fold_predictions.csv)."""
    accelerator, evaluation = job.accelerator, job.settings.evaluation
    accelerator.save_model(job.saved_model(), str(job.out))  # <out>/model.safetensors, a plain state dict
    if accelerator.is_main_process:
        usual_permissions(job.out / "model.safetensors")
    if job.ema is not None and accelerator.is_main_process:
        save_ema(job.saved_model(ema=True), job.out / "model_ema.safetensors")
    temperature = calibrate(job, figures) if evaluation.calibrate else None
    if (model := job.plain_copy()) is not None:  # the weights validation followed, on the main process
        folder = save_model_folder(model, job.settings.model.name, job.settings.input, job.class_names,
                                   job.out / "model", job.task, temperature)
        if job.settings.probe.probe == "knn":  # the kNN's memory bank beside the weights it votes with
            shutil.copyfile(job.out / KNN_FILE, folder / KNN_FILE)
        if (tuned := tuned_thresholds(figures, evaluation.threshold, job.ema is not None)) is not None:  # multi-label
            write_json_atomic(folder / "thresholds.json", {"threshold": evaluation.threshold,
                                                           "tuned": dict(zip(job.class_names, tuned))})
    if (remade := job.settings.source.remade) is not None and remade.held_out is not None:  # --folds
        write_fold_predictions(job)


def log_validation_media(job, step, figures, examples):
    """wandb's chart and image table of a validation; and at a new best of the tracked figure, the table of predictions
    (the top losses and a spread of the rest, utils/reporting/failures.py)."""
    trackers.log_validation_media(job.accelerator, step, figures, job.class_names, examples, job.task.label_text)
    trackers.log_best_predictions(job.accelerator, step, figures[tracked_key(job.task, job.ema)],
                                  lambda: prediction_rows(figures.get("samples"), job.class_names,
                                                          job.val_loader.dataset, job.settings.evaluation.top_losses,
                                                          job.task))


def command_line(argv):
    """The command that runs this run again (`argv`: main's; None: the process's), as results.json and the model card
    record it."""
    return f"accelerate launch train_classification.py {shlex.join(map(str, sys.argv[1:] if argv is None else argv))}"


def start_pictures(job, figures):
    """The main process starts drawing the run's pictures of its last validation's `figures` (the report's and
    top_losses.png: utils/reporting/drawing.py), which report_results collects; none with --no_plots."""
    pictures = []
    if job.accelerator.is_main_process and not job.settings.end.no_plots:
        pictures = report.pictures(job.out, figures, job.class_names) + failure_pictures(
            job.out, figures, job.class_names, job.val_loader.dataset, job.settings.evaluation.top_losses, job.task)
    job.pictures = Drawing.start(pictures)


def report_results(job, summary, figures, train_samples, command):
    """The results: the task's figures of the last validation and the run's `summary`, the multi-view test's (video),
    the `command`; results.json, the pictures and the per-class table (main process), and the closing line."""
    accelerator, out, class_names = job.accelerator, job.out, job.class_names
    results = {**job.task.results(figures, class_names), **summary}
    if "leak_free" in figures:  # --audit: beside the whole split's, the figures without its leaked samples
        results["leak_free"] = {"audit": job.settings.data.audit, **figures["leak_free"]}
        accelerator.print(f"without the {figures['leak_free']['left_out']} validation {job.settings.sample_unit} the "
                          f"audit found leaked: {job.task.line(figures['leak_free'])}")
    if job.test_loader is not None:
        views = (job.settings.data.test_clips or 1, job.settings.data.test_crops or 1)  # clips x crops of each video
        results.update(multiview_test(job, results["global_step"], views, job.settings.evaluation.dump_rank_metrics))
    results["command"] = command
    # Every rank met its own broken files; the report holds all of them, once each.
    errors = {path: error for found in gather_object([job.bad_images.found]) for path, error in found.items()}
    skipped = sorted(errors)
    results.update(train_samples=train_samples, class_names=class_names, skipped_images=skipped,
                   nonfinite_steps_skipped=job.nonfinite_steps)
    results.update(job.balance.results(class_names))  # the class counts; --class_weights', --pos_weight's weights
    results["tracked_metric"] = job.task.tracked
    results["batch"] = job.batch.record()  # micro-batch x accumulation x processes, and --batch_size auto's tries
    if job.lr_found is not None:
        results["lr_found"] = job.lr_found  # --lr auto: the range test's suggestions; the run trained at "suggested"
    if job.pictures is None:  # (train and evaluate_only start them as soon as their figures are final)
        start_pictures(job, figures)
    if accelerator.is_main_process:
        if "temperature" in results:  # --calibrate: predict.py, ONNX and a teacher divide the logits by it
            write_record(out, trained_run(job.settings, class_names, job.task.multi_label,
                                            results["temperature"], job.batch, job.lr_found))
        report.write(out, results, figures, errors)
        confused = write_failures(out, figures, class_names, job.val_loader.dataset, job.settings.evaluation.top_losses,
                                  job.task)
        pictures = job.pictures.collect()
        trackers.log_pictures(accelerator, results["global_step"], pictures)
        trackers.log_predictions(accelerator, results["global_step"], lambda: prediction_rows(
            figures.get("samples"), class_names, job.val_loader.dataset, job.settings.evaluation.top_losses, job.task))
        table = report.per_class_table(figures, class_names, job.balance.counts)
        print("\n".join([table, *confused]))
        write_html(out, results, pictures, table, confused)  # all of it in one file: report.html
    accelerator.print(f"done: val {job.task.line(figures)} on {results['val_samples']} {job.settings.sample_unit}"
                      f"{f' ({len(skipped)} skipped, see bad_images.txt)' if skipped else ''}; "
                      f"train {results['train_time_s']:.1f} s -> {out}")
    accelerator.end_training()
    return results
