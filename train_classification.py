"""Train an image or video classifier on a laptop CPU, one GPU, N GPUs or several nodes, unchanged.

The hardware is chosen by the launcher's config, never here. Runbook:

    # this machine, CPU, embedded digits (offline): val top-1 >= 0.99
    accelerate launch train_classification.py
    # 2 processes on CPU (gloo), e.g. to see sharding at work
    accelerate launch --config_file accel_configs/cpu_2proc.yaml train_classification.py
    # one GPU / all GPUs of one node (bf16)
    accelerate launch --config_file accel_configs/single_gpu.yaml train_classification.py --train_dir D --val_dir V
    accelerate launch --config_file accel_configs/multi_gpu.yaml train_classification.py \
        --config configs/<recipe>.yaml --lr 0.2
    # several nodes: accel_configs/multi_node.yaml, or sbatch accel_configs/slurm_multi_node.sbatch
    # torchrun works too
    torchrun --nproc_per_node 8 train_classification.py --config configs/<recipe>.yaml
    # your data: image folders, a Hub dataset (cached offline: HF_HUB_OFFLINE=1), a save_to_disk folder
    accelerate launch train_classification.py --train_dir data/train --val_dir data/val
    accelerate launch train_classification.py --dataset cifar10 --image_size 32
    # a training split too big for a disk: parquet/arrow/webdataset shards (or a Hub dataset), streamed
    accelerate launch train_classification.py --dataset shards/ --streaming
    # video: embedded moving digits (offline, val top-1 1.00), <class>/<video> folders, list files;
    # multi-view test (10 clips x 3 crops per video) after training or on a checkpoint
    accelerate launch train_classification.py --dataset moving_digits
    accelerate launch train_classification.py --train_dir ucf/train --val_dir ucf/val --model r2plus1d_18
    accelerate launch train_classification.py --train_list train.txt --val_list val.txt --data_root videos/ \
        --eval_only --resume runs/r/checkpoints/epoch_29 --test_clips 10 --test_crops 3
    # the recipe's global batch on any hardware, in the largest micro-batches that fit; the LR range test
    accelerate launch train_classification.py --global_batch_size 1024 --batch_size auto --config configs/<recipe>.yaml
    accelerate launch train_classification.py --lr_find            # lr_find.png and a suggested LR, then exits
    accelerate launch train_classification.py --lr auto            # the range test, then training at its suggestion
    # checkpoint every 500 steps; after a kill or preemption, the same command with --resume latest
    accelerate launch train_classification.py --output_dir runs/r --checkpoint_every_steps 500
    accelerate launch train_classification.py --output_dir runs/r --checkpoint_every_steps 500 --resume latest
    # tests
    python -m pytest

Every option: `python train_classification.py --help`. A YAML recipe (`--config`) sets defaults; the command line
wins. What a run folder holds: docs/outputs.md. Dashboards: --report_to wandb|tensorboard|all (WANDB_MODE=offline).

Read top to bottom, a run in order: main (parse -> the run's Settings -> [the LR range test, find_lr] -> build the
job -> train, evaluate or probe (work) -> export -> report), the epoch loop (train, after_epoch; when it validates,
checkpoints and ends: utils/training/cadence.py), one epoch (train_one_epoch, update, training_loss, agree_on_step),
validation (evaluate_only, validate, evaluate), and the checkpoint. What a run is made of and how it is built:
utils/run/job.py; below the parse, everything reads the Settings (utils/config/settings.py), never the options.
"""

import gc
import os

PARENT_AT_START = os.getppid()  # before the slow imports: a launcher that dies meanwhile is still noticed

import sys
import time
from functools import partial
from typing import NamedTuple

import torch
from accelerate.utils import set_seed

from utils.config.options import parse, resume_values
from utils.config.settings import as_checkpointed
from utils.core.errors import UserError, report as report_error
from utils.core.preemption import EXIT_INTERRUPTED, Interrupted, follow_launcher
from utils.core.threads import use_all_cores
from utils.evaluation.metrics import dump_rank_sums, figure_name
from utils.evaluation.scoring import kept_positions, kept_rows, scored_batches, without
from utils.evaluation.tasks import tracked_key
from utils.models.ema import update_ema
from utils.models.lora import FROZEN_FILE, write_frozen
from utils.reporting import trackers
from utils.reporting.model_folder import push_model_folder
from utils.run.accelerator import build_accelerator, cannot_go_on, check_fsdp
from utils.run.job import build_job, resume
from utils.run.probe import probe
from utils.run.lr_range import find_lr, resumed_choices, with_found
from utils.run.records import (command_line, export_weights, log_validation_media, report_results, run_summary,
                               start_pictures, start_records)
from utils.training import checkpoints
from utils.training.cadence import checkpoint_due, reached_end, validation_due
from utils.training.objective import NonFiniteLoss
from utils.training.run_folder import output_dir_for, resume_folder
from utils.training.run_lock import lock_run_folder

PROG = "train_classification.py"


def fail(message):
    """Bad input: one line, exit code 2, nothing written."""
    report_error(PROG, message)


def main(argv=None):
    follow_launcher(PARENT_AT_START)  # a launcher killed without passing SIGTERM on: we get it (core/preemption.py)
    settings = parse(argv, prog=PROG)  # the run's configuration, typed: the data source picked, the input resolved
    if (problem := trackers.check_wandb_login(settings.trackers.report_to)) is not None:
        fail(problem)
    accelerator = build_accelerator(settings)
    if (problem := check_fsdp(settings, accelerator)) is not None:
        fail(problem)
    lock = job = None
    try:
        out = output_dir_for(settings.folder, accelerator, settings.source_name)
        lock = lock_run_folder(accelerator, out)  # one live run per folder
        resume_from = resume_folder(settings.folder, accelerator, out, resume_values(settings), settings.probe.probe)
        settings = resumed_choices(settings, resume_from, accelerator.print)  # --batch_size/--lr auto: its own
        settings = as_checkpointed(settings, resume_from, accelerator.print)  # a checkpoint's own train crop
        accelerator.wait_for_everyone()  # every rank has checked the folder before any rank writes to it
        use_all_cores(accelerator.device)
        found, plan = find_lr(settings, accelerator, out, train_one_epoch)  # --lr_find, --lr auto; else None
        if settings.range_test.lr_find:  # the range test alone
            return {"lr_find": found, "batch": plan.record()}
        settings = with_found(settings, found, plan)  # --lr auto: from here on, the run with its LR typed
        set_seed(settings.data.seed)
        job, train_samples, num_workers = build_job(settings, accelerator, out, found)
        position, state = resume(job, resume_from) if resume_from is not None else (checkpoints.Position(), {})
        job.stop.install()
        start_records(job, num_workers, previous_run=state.get("tracker_run_id"))
        summary, figures = work(job, position, num_workers)
        if not settings.folder.eval_only:
            export_weights(job, figures)  # model.safetensors, the EMA's, --calibrate's temperature, model/
        results = report_results(job, summary, figures, train_samples, command_line(argv))
        if (repo := settings.end.push_to_hub) and accelerator.is_main_process:  # asked for, after the local files
            push_model_folder(out / "model", repo, settings.model, results, results["command"])
        return results
    except UserError as e:  # bad input (DataError, ModelError, FolderError, ...): one line, exit 2
        problem = str(e)
        if lock is not None:
            lock.release(failed=True)
    except Interrupted as e:
        if accelerator.is_main_process or job.stop.signal_name:  # and the rank that got the signal
            print(f"{PROG}: {e}", file=sys.stderr, flush=True)
        accelerator.end_training()  # close the dashboards' runs properly
        raise SystemExit(EXIT_INTERRUPTED) from None
    except (NonFiniteLoss, RuntimeError) as e:  # NaN losses past the allowance, the device out of memory: exit 1
        cannot_go_on(e, settings if job is None else job.settings, accelerator, PROG)
    finally:
        if job is not None:
            job.close()  # whatever ended the run: its loaders' workers stop with it
        if lock is not None:
            lock.release()
        if job is not None:
            job.stop.restore()  # last: until the folder is released, a stop signal is only noted
    fail(problem)  # outside the handler: the error's frames (and what they hold) are gone by now


def work(job, position, num_workers):
    """(summary, figures): --eval_only's scoring, --probe's of the frozen model (utils/run/probe.py), or training."""
    if job.settings.probe.probe:
        return probe(job, num_workers)
    return evaluate_only(job, position) if job.settings.folder.eval_only else train(job, position)


def train(job, start):
    """The epoch loop from Position `start`: train, validate every val_every epochs and at the end, checkpoint.

    Returns what the results say of its training and the last validation's full figures (whose pictures it starts
    drawing before its last checkpoint). A stop signal ends it with a checkpoint and Interrupted; when it came at an
    epoch's last step (or training's), that epoch's validation is owed (`owed_epoch`) and the resumed run does it
    first, where the uninterrupted run would have (same RNG stream).
    """
    settings, accelerator = job.settings, job.accelerator
    loop, epochs = settings.loop, settings.schedule.epochs
    start_epoch, done_steps, global_step, owed_epoch, validated = start
    first_step, figures, epochs_completed = global_step, None, start_epoch
    epoch_end = done_steps == 0
    if job.patience.stopped:  # a resumed run that had stopped early stays stopped
        accelerator.print(f"resumed a run that stopped early: {job.patience.line()}; nothing to train")
    if owed_epoch is not None:
        figures = after_epoch(job, owed_epoch, global_step, reached_end(loop, epochs, owed_epoch, global_step, True))
    for epoch in range(start_epoch, epochs):
        if job.patience.stopped or loop.max_train_steps is not None and global_step >= loop.max_train_steps:
            break
        job.train_time.start()
        global_step, epoch_end, stop = train_one_epoch(job, epoch, global_step,
                                                       done_steps if epoch == start_epoch else 0)
        job.train_time.stop()
        epochs_completed = epoch + 1 if epoch_end else epoch
        finished = reached_end(loop, epochs, epoch, global_step, epoch_end)
        if stop:  # at the epoch's end, or at the end of training, its validation is owed
            owed = (epoch_end or finished) and validation_due(loop, epoch, finished)
            save_checkpoint(job, epoch, global_step, epoch_end, validation_pending=owed)
            raise Interrupted(f"interrupted by {job.stop.signal_name or 'a signal on another rank'} at step "
                              f"{global_step}: checkpoint saved; rerun the same command with --resume latest")
        figures = after_epoch(job, epoch, global_step, finished) or figures
    if figures is None:  # nothing trained (resumed at the end, or --max_train_steps 0): score the weights (a finished
        figures = validate(job, epochs_completed - 1, global_step, logged=validated)  # run's row is written already)
    start_pictures(job, figures)  # drawn by a child process while the run saves and exports (records.py)
    if global_step > first_step or owed_epoch is not None:  # else: the checkpoint it came from is the last
        save_checkpoint(job, epochs_completed - 1 if epoch_end else epochs_completed, global_step, epoch_end,
                        val_score=tracked_figure(job, figures))
    train_time = round(job.train_time.seconds(), 3)
    return run_summary(job, epochs_completed, global_step, train_time, **job.patience.results()), figures


def after_epoch(job, epoch, global_step, finished):
    """Validation when due (its figures, else None), the best weights, and the epoch's checkpoint."""
    settings = job.settings
    figures = validate(job, epoch, global_step) if validation_due(settings.loop, epoch, finished) else None
    if figures is not None and job.patience.update(tracked_figure(job, figures), epoch):  # gathered: alike everywhere
        job.accelerator.print(job.patience.line())
        finished = True  # the end-of-training checkpoint follows, not an epoch's
    if figures is not None and settings.checkpoints.keep_best:  # gathered figures: every rank takes the same branch
        best_model = job.saved_model(ema=job.ema is not None)
        key = tracked_key(job.task, job.ema)
        checkpoints.keep_if_best(job.accelerator, best_model, job.out, job.best_score, {
            "epoch": epoch, "global_step": global_step, **job.task.results(figures, job.class_names),
            key: figures[key]}, key=key)
    if checkpoint_due(settings.checkpoints, epoch, global_step, epoch_end=True, finished=finished,
                      validated=figures is not None):
        save_checkpoint(job, epoch, global_step, epoch_end=True, val_score=figures and tracked_figure(job, figures))
    return figures


class EpochOutcome(NamedTuple):
    global_step: int  # reached
    completed: bool  # the epoch ran to its end (not cut by --max_train_steps or a stop)
    stop: bool  # a stop signal on any rank: the caller checkpoints and exits


def train_one_epoch(job, epoch, global_step, done_steps=0):
    """This process's shard of one epoch, after `done_steps` optimizer steps of it (a resumed run)."""
    accelerator, model, loop = job.accelerator, job.model, job.settings.loop
    accumulation = job.settings.plan.accumulation  # the batch plan in force
    model.train()
    batches = len(job.train_loader)
    skipped = done_steps * accumulation
    loader = job.train_loader.batches(epoch, skipped)
    job.logger.start_epoch(epoch, first_step=done_steps)
    # accelerator.backward divides every loss by grad_accum_steps. When an epoch's micro-batches do
    # not divide evenly, its last group is shorter, and its gradient would come out too small.
    short_group = batches % accumulation
    nonfinite = torch.zeros((), device=accelerator.device)  # micro-batches of this group with a NaN/inf loss
    # valid images in this group, the model's buffers at its start (--skip_nonfinite_steps); how the epoch ended
    group_images, saved, stop, completed, limit = 0, None, False, False, False
    fetch_start = time.perf_counter()
    for index, batch in enumerate(loader, start=skipped):
        data_time = time.perf_counter() - fetch_start
        valid_images = job.bad_images.check(batch)
        saved = saved if saved is not None else buffers_at_step_start(job)
        with accelerator.accumulate(model):
            loss, used_images = training_loss(job, batch, valid_images, epoch, index)
            in_short_group = short_group and index >= batches - short_group
            accelerator.backward(loss * (accumulation / short_group) if in_short_group else loss)
            nonfinite += ~torch.isfinite(loss.detach())
            group_images, skip = group_images + used_images, False
            if accelerator.sync_gradients:
                skip, stop = agree_on_step(job, nonfinite, group_images, global_step + 1, saved)
                nonfinite.zero_()
                group_images, saved = 0, None
            update(job, skip)
        job.logger.micro_batch(loss, used_images, data_time)  # the images it trained on (padding and skips: none)
        if accelerator.sync_gradients:
            # Stepped once per optimizer step on every rank (see build_accelerator), so the LR
            # follows epoch progress whatever the world size or accumulation.
            job.scheduler.step()
            global_step += 1
            update_ema(job.ema, job.bare_model(), global_step, job.settings.model.ema_steps)
            job.logger.optimizer_step(global_step, max(job.scheduler.get_last_lr()))  # the head's (--layer_decay)
            mid_epoch = index + 1 < batches
            limit = loop.max_train_steps is not None and global_step >= loop.max_train_steps and mid_epoch
            if limit or stop and mid_epoch:
                break
            if mid_epoch and checkpoint_due(job.settings.checkpoints, epoch, global_step, epoch_end=False):
                save_checkpoint(job, epoch, global_step, epoch_end=False)
        fetch_start = time.perf_counter()
    else:
        completed = True
    if completed or limit:  # a stopped epoch is not over: the resumed run's line will close it
        job.logger.end_epoch(global_step)
    return EpochOutcome(global_step, completed, stop)


def update(job, skip):
    """The optimizer step (a no-op on micro-batches that only accumulate), or, when every rank agreed to
    `skip` it (nothing to learn from, or a poisoned loss), the gradient dropped."""
    if not skip:
        ceiling = job.settings.loop.clip_grad_norm
        if ceiling is not None and job.accelerator.sync_gradients:
            job.accelerator.clip_grad_norm_(job.model.parameters(), ceiling)
        job.optimizer.step()
    job.optimizer.zero_grad(set_to_none=True)


def training_loss(job, batch, valid_images, epoch, index):
    """(mean loss over the batch's valid images, how many it used), for micro-batch `index` of `epoch`.
    Images that could not be decoded never reach the model, so they shift neither the loss nor
    BatchNorm's batch and running statistics; nor are they erased or mixed."""
    pixels, labels = job.inputs(batch["pixel_values"]), batch["labels"]
    if 2 <= valid_images < len(labels):
        pixels, labels = pixels[batch["valid"]], labels[batch["valid"]]
    if valid_images >= 2:  # BatchNorm cannot train on a single image: one left alone waits an epoch
        pixels, targets = job.inputs.augment(pixels, labels, epoch, index)
        return job.objective(job.model(pixels), targets, pixels), valid_images
    # Nothing to train on here, yet the others' gradient all-reduce needs this rank's share: a zero
    # loss through the model in eval mode (BatchNorm's running statistics stay as they are).
    job.model.eval()
    try:
        return job.model(pixels[:1]).sum() * 0.0, 0
    finally:
        job.model.train()


def buffers_at_step_start(job):
    """--skip_nonfinite_steps: the model's buffers at an optimizer step's start (BatchNorm's running statistics),
    which its forward passes move, to put back if the step is skipped; [] without the option."""
    return [buffer.clone() for buffer in job.model.buffers()] if job.settings.loop.skip_nonfinite_steps else []


def agree_on_step(job, nonfinite, images, step, saved=()):
    """What every rank must decide alike at optimizer step `step`: skip its update? stop after it?

    One small all-reduce carries this rank's NaN/inf count, valid images, stop signal and whether it met a file it
    may not skip (then every rank stops here, naming it). An update is skipped when a loss was NaN/inf anywhere
    (DDP has already spread that rank's NaN gradients to all; past --skip_nonfinite_steps this raises; `saved`,
    the buffers as the step found them, are put back), or when no rank had images to learn from.
    """
    accelerator = job.accelerator
    host = torch.tensor([images, job.stop.requested, job.bad_images.stopping], dtype=torch.float32,
                        device=accelerator.device)
    mine = torch.cat([nonfinite.float().view(1), host])
    nonfinite_total, images_total, stops, bad_files = accelerator.reduce(mine, "sum").tolist()
    if bad_files:
        job.bad_images.stop(accelerator)
    if nonfinite_total:
        allowed = job.settings.loop.skip_nonfinite_steps
        job.nonfinite_steps.append(step)
        if len(job.nonfinite_steps) > allowed:
            raise NonFiniteLoss(f"non-finite loss at global step {step}; stopped without saving (the last "
                                f"checkpoint is untouched); --skip_nonfinite_steps K skips up to K such steps")
        if saved:  # the poisoned batch went through BatchNorm in training mode
            torch._foreach_copy_(list(job.model.buffers()), saved)
        job.accelerator.print(f"step {step}: non-finite loss, update skipped "
                              f"({len(job.nonfinite_steps)} of {allowed} allowed)")
    elif not images_total:
        job.accelerator.print(f"step {step}: no batch of this step held 2 or more decodable images, update skipped")
    return bool(nonfinite_total or not images_total), bool(stops)


def evaluate_only(job, position):
    """--eval_only: score the loaded weights; the same figures on any number of processes."""
    figures = validate(job, position.epoch - 1, position.global_step)
    start_pictures(job, figures)
    return run_summary(job, position.epoch, position.global_step, 0.0), figures


def validate(job, epoch, global_step, logged=False):
    """Evaluate, log a validation row (and wandb's chart and image table), write the per-rank dump if asked; `logged`:
    these weights' row is in metrics.jsonl already (a finished run resumed), so their figures are only said again."""
    task = job.task  # one label a sample or several: what is scored (utils/evaluation/tasks.py)
    figures, own, examples = evaluate(job)
    if job.ema is not None:  # the averaged weights, scored the same exact way
        ema_figures, _, _ = evaluate(job, job.ema.module)
        figures.update({figure_name(key, ema=True): ema_figures[key] for key in task.ema_keys})
        for key in ("samples", "calibration_bins"):  # the failures and calibration of the weights model/ holds
            figures[key] = ema_figures[key]
    row = {"step": global_step, "epoch": round(global_step / job.steps_per_epoch, 6),
           **task.row(figures, job.class_names)}
    line = (f"epoch {epoch} val: {task.line(figures)} ({figures['val_samples']} {job.settings.sample_unit})"
            f"{task.ema_line(figures) if job.ema is not None else ''}")
    if logged:
        job.accelerator.print(f"{line}, as its checkpoint was validated (its row is in metrics.jsonl)")
        return figures
    job.logger.write(row, line)
    log_validation_media(job, global_step, figures, examples)  # wandb: a chart, images, a new best's predictions
    if job.settings.evaluation.dump_rank_metrics:  # init: scored before any epoch
        dump_rank_sums(job.out / "eval" / (f"epoch_{epoch}" if epoch >= 0 else "init"), task.global_sums(figures),
                       own, job.accelerator)
    return figures


@torch.no_grad()
def evaluate(job, model=None):
    """Exact figures over the whole validation set for `model` (default: the trained one), this rank's own sums,
    and its first images with their predictions (for the wandb table; None without a wandb run on this process).
    Each sample is counted once whatever the world size (utils/evaluation/scoring.py)."""
    model, examples = model or job.model, []
    job.share_buffers(only=model)
    model.eval()

    task = job.task

    def score(batch):
        logits = task.outputs(model, job.inputs(batch["pixel_values"]))  # --tta flip: the mean of 2 views
        if not examples and job.tracker_run_id is not None:  # wandb's table of images and their predicted labels
            examples.append(trackers.examples(batch, logits, task.decided))
        return task.fields(logits, batch["labels"])

    batches = list(scored_batches(job.accelerator, job.val_loader, score, job.bad_images))
    *fields, owners = kept_rows(batches)
    figures = task.figures(fields)
    positions = kept_positions(batches)
    figures["samples"] = task.samples(fields, positions)  # top_losses (utils/reporting/failures.py)
    if job.leaked is not None:  # --audit: the figures without its leaked validation samples too
        figures["leak_free"] = without(task, fields, positions, job.leaked, job.class_names)
    own = task.own(fields, owners, job.accelerator.process_index)
    return figures, own, examples[0] if examples else None


def save_checkpoint(job, epoch, global_step, epoch_end, val_score=None, validation_pending=False):
    """Model, optimizer, scheduler, RNG and sampler states, plus where training stood, what it depends on
    (options, data), and whether the epoch's validation is still to come (an interrupt at its end)."""
    state = {"epoch": epoch, "step_in_epoch": 0 if epoch_end else global_step - epoch * job.steps_per_epoch,
             "global_step": global_step, "epoch_end": epoch_end, "world_size": job.accelerator.num_processes,
             "options": resume_values(job.settings), "data": job.data,
             "validation_pending": validation_pending, "val_score": val_score, "tracker_run_id": job.tracker_run_id,
             "early_stop": job.patience.state(), "teacher": job.teacher and job.teacher.identity,
             "train_time_s": job.train_time.seconds(), "lr_found": job.lr_found, "batch": job.batch.record(),
             **({"frozen_sha256": job.frozen} if job.frozen else {})}  # --lora: the weights checkpoints leave out
    name = f"epoch_{epoch}" if epoch_end else f"step_{global_step}"
    job.share_buffers()  # FSDP's checkpoint keeps one copy of what is not sharded: let it be rank 0's, as saved
    own = partial(job.train_loader.save_position, rank=job.accelerator.process_index)  # a stream's position
    folder = checkpoints.save(job.accelerator, job.out, name, state, own_files=own)
    if job.frozen and job.accelerator.is_main_process:  # --lora: the frozen weights once, beside the checkpoints
        write_frozen(job.bare_model(), job.out / FROZEN_FILE, job.frozen)
    if job.accelerator.is_main_process:
        checkpoints.prune(job.out, job.settings.checkpoints.keep_last, job.settings.checkpoints.keep_best)
    job.accelerator.print(f"checkpoint: {folder}")


def tracked_figure(job, figures):
    """The figure --keep_best and --early_stop follow: val top-1, or mAP for multi-label data; the EMA's with
    --model_ema."""
    return figures[tracked_key(job.task, job.ema)]


if __name__ == "__main__":
    try:
        main()
    finally:  # every file is written and closed by now: the interpreter's exit then skips collecting each object
        gc.freeze()  # that torch and its imports made (a second or more), which it would free only to end anyway
