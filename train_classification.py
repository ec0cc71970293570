"""Train an image classifier on a laptop CPU, one GPU, N GPUs or several nodes, unchanged.

The hardware is chosen by the launcher's config, never here. Runbook:

    # this machine, CPU, embedded digits (offline): val top-1 >= 0.99
    accelerate launch train_classification.py
    # 2 processes on CPU (gloo), e.g. to see sharding at work
    accelerate launch --config_file accel_configs/cpu_2proc.yaml train_classification.py
    # one GPU / all GPUs of one node (bf16)
    accelerate launch --config_file accel_configs/single_gpu.yaml train_classification.py --config configs/digits_resnet18.yaml
    accelerate launch --config_file accel_configs/multi_gpu.yaml train_classification.py --config configs/<recipe>.yaml --lr 0.2
    # several nodes: accel_configs/multi_node.yaml, or sbatch accel_configs/slurm_multi_node.sbatch
    # torchrun works too
    torchrun --nproc_per_node 8 train_classification.py --config configs/<recipe>.yaml
    # continue a run from a saved epoch
    accelerate launch train_classification.py --resume runs/<run>/checkpoints/epoch_9
    # tests
    python -m pytest

Every option: `python train_classification.py --help`. A YAML recipe (`--config`) sets defaults;
the command line wins. Outputs go to --output_dir: config.yaml, metrics.jsonl, results.json,
model.safetensors, checkpoints/ and, with --dump_rank_metrics, eval/epoch_<E>/rank_<R>.json.
"""

import json
import math
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import broadcast_object_list, set_seed

from utils.config import parse_args, save_config
from utils.data import build_dataloaders, build_datasets
from utils.io import append_jsonl, write_json_atomic
from utils.metrics import load_topk_metric, rank_sums, summarize, topk_for
from utils.models import build_model
from utils.progress import StepLogger
from utils.schedule import build_lr_scheduler
from utils.threads import cores_per_process, use_all_cores

PROG = "train_classification.py"


def fail(message):
    """Bad input: one line, exit code 2, nothing written."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_paths(args):
    """Refuse to overwrite another run or to resume from something that is not a checkpoint.

    Runs on every process before the Accelerator exists: process-group setup waits for all ranks,
    so no rank can already have written into the folder while another one checks it.
    """
    if args.resume is not None and not (Path(args.resume) / "training_state.json").is_file():
        fail(f"resume: {args.resume} is not a checkpoint folder (no training_state.json in it)")
    if args.output_dir is not None and args.resume is None and (Path(args.output_dir) / "config.yaml").exists():
        fail(f"output_dir: {args.output_dir} already holds a run; pick another folder or --resume its checkpoint")


def output_dir_for(args, accelerator):
    """The run folder: --output_dir, the resumed run's folder, or runs/<time>-<dataset>-<model>."""
    if args.output_dir is not None:
        return Path(args.output_dir)
    if args.resume is not None:
        return Path(args.resume).resolve().parent.parent
    # The name holds a timestamp: take the main process's, so that every rank writes to one folder.
    name = [f"runs/{datetime.now():%Y%m%d-%H%M%S}-{args.dataset}-{args.model}"]
    broadcast_object_list(name)
    return Path(name[0])


def build_optimizer(model, args):
    # No weight decay on norms and biases, as in timm and the torchvision references.
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=args.lr)
    return torch.optim.SGD(groups, lr=args.lr, momentum=args.momentum, nesterov=args.nesterov and args.momentum > 0)


def train_one_epoch(epoch, global_step, model, optimizer, scheduler, criterion, train_loader, accelerator, args,
                    logger):
    """One pass over this process's shard; returns the global optimizer step reached."""
    model.train()
    # Accelerate's seedable sampler draws the permutation from (seed, epoch): the same on every
    # rank, different every epoch, and independent of which epochs ran before in this process.
    train_loader.set_epoch(epoch)
    logger.start_epoch(epoch, first_step=global_step - epoch * logger.steps_per_epoch)
    # accelerator.backward divides every loss by grad_accum_steps. When an epoch's micro-batches do
    # not divide evenly, its last group is shorter, and its gradient would come out too small.
    short_group = len(train_loader) % args.grad_accum_steps
    fetch_start = time.perf_counter()
    for index, batch in enumerate(train_loader):
        data_time = time.perf_counter() - fetch_start
        with accelerator.accumulate(model):
            loss = criterion(model(batch["pixel_values"]), batch["labels"])
            in_short_group = short_group and index >= len(train_loader) - short_group
            accelerator.backward(loss * (args.grad_accum_steps / short_group) if in_short_group else loss)
            if args.clip_grad_norm is not None and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            optimizer.step()  # a no-op on micro-batches that only accumulate
            optimizer.zero_grad(set_to_none=True)
        logger.micro_batch(loss, batch["labels"].shape[0], data_time)
        if accelerator.sync_gradients:
            # Stepped once per optimizer step on every rank (see build_accelerator), so the LR
            # follows epoch progress whatever the world size or accumulation.
            scheduler.step()
            global_step += 1
            logger.optimizer_step(global_step, scheduler.get_last_lr()[0])
            if args.max_train_steps is not None and global_step >= args.max_train_steps:
                break
        fetch_start = time.perf_counter()
    logger.end_epoch()
    return global_step


@torch.no_grad()
def evaluate(model, val_loader, accelerator, metric, k):
    """Exact figures over the whole validation set, plus this rank's own sums.

    Accelerate pads the last batches so that every rank gets the same number; gather_for_metrics
    drops those repeats, so each sample is counted exactly once whatever the world size.
    """
    model.eval()
    ranked, labels, losses, owners = [], [], [], []
    for batch in val_loader:
        logits = model(batch["pixel_values"]).float()
        per_sample_loss = F.cross_entropy(logits, batch["labels"], reduction="none")
        # Which rank scored each sample: after the gather this tells every rank which of the kept
        # samples are its own, with no shard arithmetic.
        owner = torch.full_like(batch["labels"], accelerator.process_index)
        gathered = accelerator.gather_for_metrics((logits.topk(k, dim=1).indices, batch["labels"],
                                                   per_sample_loss, owner))
        for store, tensor in zip((ranked, labels, losses, owners), gathered):
            store.append(tensor.cpu())
    ranked, labels, losses, owners = (torch.cat(t) for t in (ranked, labels, losses, owners))
    figures = summarize(metric, ranked, labels, losses, k)
    own = rank_sums(ranked, labels, losses, owners, accelerator.process_index, k)
    return figures, own


def dump_rank_metrics(out, epoch, figures, own, accelerator):
    """GluonCV's per-rank eval files, made right: sums that add up exactly to global.json."""
    folder = out / "eval" / (f"epoch_{epoch}" if epoch >= 0 else "init")  # init: scored before any epoch
    write_json_atomic(folder / f"rank_{accelerator.process_index}.json", own)
    if accelerator.is_main_process:
        keys = ("samples", "correct_top1", "correct_topk", "loss_sum")
        write_json_atomic(folder / "global.json", {"samples": figures["val_samples"],
                                                   **{k: figures[k] for k in keys[1:]}})


def save_checkpoint(out, name, epoch, global_step, accelerator):
    """Model, optimizer, scheduler, RNG and sampler states, plus the last completed epoch and the step."""
    folder = out / "checkpoints" / name
    accelerator.save_state(str(folder))
    if accelerator.is_main_process:
        write_json_atomic(folder / "training_state.json", {"epoch": epoch, "global_step": global_step})
    accelerator.wait_for_everyone()


def validate(out, epoch, global_step, steps_per_epoch, model, val_loader, accelerator, metric, k, args, logger):
    """Evaluate, log a validation row, and write the per-rank dump if asked."""
    figures, own = evaluate(model, val_loader, accelerator, metric, k)
    row = {"step": global_step, "epoch": round(global_step / steps_per_epoch, 6),
           **{key: figures[key] for key in ("val_top1", "val_topk", "topk", "val_loss", "val_samples")}}
    logger.write(row, f"epoch {epoch} val: top-1 {figures['val_top1']:.4f} top-{k} {figures['val_topk']:.4f} "
                      f"loss {figures['val_loss']:.4f} ({figures['val_samples']} images)")
    if args.dump_rank_metrics:
        dump_rank_metrics(out, epoch, figures, own, accelerator)
    return figures


def build_accelerator(args):
    return Accelerator(
        # Without this, Accelerate (1.15) treats N processes started by torchrun on a machine with
        # no GPU as N unrelated single-process runs: no process group, no sharding, one set of
        # files written N times. On such a machine we ask for CPU explicitly: gloo, real sharding.
        cpu=not torch.accelerator.is_available(),
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.grad_accum_steps,
        # By default a prepared scheduler steps once per *process* at every call, assuming a schedule
        # counted in single-process batches. Ours is laid out in epochs of this process's steps.
        step_scheduler_with_optimizer=False,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )


def main(argv=None):
    args = parse_args(argv, prog=PROG)
    check_paths(args)
    accelerator = build_accelerator(args)
    threads = use_all_cores(accelerator.device)
    out = output_dir_for(args, accelerator)
    set_seed(args.seed)  # same initial weights on every rank

    with accelerator.main_process_first():  # one rank builds caches, the others reuse them
        train_ds, val_ds, class_names = build_datasets(args)
        metric = load_topk_metric()
    num_workers = args.num_workers if args.num_workers is not None else min(8, cores_per_process() // 2)
    train_loader, val_loader = build_dataloaders(accelerator, train_ds, val_ds, args.batch_size, num_workers)
    model = build_model(args.model, num_classes=len(class_names))
    optimizer = build_optimizer(model, args)
    steps_per_epoch = math.ceil(len(train_loader) / args.grad_accum_steps)
    scheduler = build_lr_scheduler(optimizer, args, steps_per_epoch)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    k = topk_for(len(class_names))

    start_epoch, global_step = 0, 0
    if args.resume is not None:
        accelerator.load_state(args.resume)
        state = json.loads((Path(args.resume) / "training_state.json").read_text())
        start_epoch, global_step = state["epoch"] + 1, state["global_step"]
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        save_config(args, out / "config.yaml", output_dir=str(out))
    accelerator.print(f"{args.model} on {args.dataset}: {len(train_ds)} train / {len(val_ds)} val images, "
                      f"{accelerator.num_processes} process(es) on {accelerator.device.type} "
                      f"({threads} threads, {num_workers} workers each), {steps_per_epoch} steps/epoch -> {out}")

    first_step = global_step
    logger = StepLogger(accelerator, out / "metrics.jsonl", args.log_every, steps_per_epoch)
    figures, epochs_completed, train_time = None, start_epoch, 0.0
    for epoch in range(start_epoch, args.epochs):
        if args.max_train_steps is not None and global_step >= args.max_train_steps:
            break
        t0 = time.perf_counter()
        global_step = train_one_epoch(epoch, global_step, model, optimizer, scheduler, criterion, train_loader,
                                      accelerator, args, logger)
        train_time += time.perf_counter() - t0
        stopped_early = args.max_train_steps is not None and global_step >= args.max_train_steps
        finished = stopped_early or epoch + 1 == args.epochs
        epochs_completed = epoch + 1 if global_step % steps_per_epoch == 0 else epoch
        figures = None
        if (epoch + 1) % args.val_every == 0 or finished:
            figures = validate(out, epoch, global_step, steps_per_epoch, model, val_loader, accelerator, metric, k,
                               args, logger)
        if args.save_every and (epoch + 1) % args.save_every == 0 and not finished:
            save_checkpoint(out, f"epoch_{epoch}", epoch, global_step, accelerator)
    if figures is None:  # nothing trained (resumed at the end, or --max_train_steps 0): score the weights
        figures = validate(out, epochs_completed - 1, global_step, steps_per_epoch, model, val_loader,
                           accelerator, metric, k, args, logger)
    if global_step > first_step:  # a resumed run that trained nothing keeps the checkpoint it came from
        at_epoch_end = global_step % steps_per_epoch == 0
        save_checkpoint(out, f"epoch_{epochs_completed - 1}" if at_epoch_end else f"step_{global_step}",
                        epochs_completed - 1, global_step, accelerator)
    accelerator.save_model(model, str(out))  # <out>/model.safetensors, a plain torchvision state dict
    results = {**{key: figures[key] for key in ("val_top1", "val_topk", "topk", "val_loss", "val_samples")},
               "train_samples": len(train_ds), "epochs_completed": epochs_completed, "global_step": global_step,
               "world_size": accelerator.num_processes, "train_time_s": round(train_time, 3),
               "model": args.model, "dataset": args.dataset}
    if accelerator.is_main_process:
        write_json_atomic(out / "results.json", results)
    accelerator.print(f"done: val top-1 {figures['val_top1']:.4f}, top-{k} {figures['val_topk']:.4f}, "
                      f"loss {figures['val_loss']:.4f} on {figures['val_samples']} images; "
                      f"train {train_time:.1f} s -> {out}")
    accelerator.end_training()
    return results


if __name__ == "__main__":
    main()
