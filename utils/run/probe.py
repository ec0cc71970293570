"""--probe linear|knn: the run's model kept frozen, its features (what its classifier reads) computed once over the
training and validation splits with the validation's transform, cached in the run folder, then classified by a sweep of
linear heads (utils/training/probes.py) or the kNN vote (utils/evaluation/knn.py). The run folder is an ordinary one:
the linear probe's chosen head is the model's classifier; the kNN's memory bank is knn_bank.safetensors beside it.

The cache, <run>/features/{train,val}/chunk_<C>.safetensors (utils/run/chunks.py): chunk C holds samples [C * size,
(C + 1) * size) of its split in batches of --batch_size, each chunk computed by process C % world and written whole.
The same chunks and batches on any number of processes make the same bytes; a run killed during the pass and started
again with --resume latest computes only the chunks that are missing. features/key.json says what the cache was made
from (weights, input, data, batches): another run's cache is refused, not mixed in."""

import math
import time

import torch
from accelerate.utils import broadcast, gather_object
from safetensors.torch import save

from utils.core.io import write_bytes_atomic
from utils.data.datasets.images import evaluated
from utils.data.errors import DataError
from utils.evaluation.knn import KNN_FILE, knn_log_probs, normalised
from utils.models.features import Features
from utils.models.libraries import classifier
from utils.models.weights import tensors_sha256
from utils.run import chunks
from utils.run.records import run_summary, start_pictures
from utils.training.probes import fit_linear, head_logits
from utils.training.run_folder import FolderError

CACHE = "features"
VAL_BLOCK = 256  # queries the kNN compares at once: blocks of the validation split, whatever the world size


def probe(job, num_workers):
    """(summary, figures) of the probe that the job's options ask for, as train() returns them for a trained run."""
    options, accelerator, task = job.settings.probe, job.accelerator, job.task
    model = job.bare_model().eval()
    t0 = time.perf_counter()
    check_key(job, cache_key(job, model))  # never another run's cache mixed in
    train_ds = evaluated(job.train_loader.loader.dataset, job.val_loader.dataset)  # no augmentation
    train, train_valid = cached(job, model, "train", train_ds, num_workers)
    val, val_valid = cached(job, model, "val", job.val_loader.dataset, num_workers)
    labels = torch.as_tensor(job.settings.source.labels(job.train_loader.loader.dataset))[train_valid]
    val_labels = torch.as_tensor(job.settings.source.labels(job.val_loader.dataset))
    train, positions = train[train_valid], torch.nonzero(val_valid).flatten()
    classes = len(job.class_names)
    if options.probe == "linear":
        head, sweep, steps = fit_linear(train, labels, val[val_valid], val_labels[val_valid], classes, options,
                                        job.settings.schedule.epochs, job.settings.plan.micro, job.settings.data.seed,
                                        accelerator.device)
        weight, bias = (broadcast(t.to(accelerator.device)).cpu() for t in (head.weight, head.bias))
        layer = classifier(model, job.settings.model.name)
        with torch.no_grad():
            layer.weight.copy_(weight.to(layer.weight))
            layer.bias.copy_(bias.to(layer.bias))
        logits = head_logits(val[positions], weight.T, bias)
        record = {"probe": "linear", "lr": head.lr, "weight_decay": head.weight_decay,
                  "sweep": [{"lr": lr, "weight_decay": wd, "val_top1": top1} for lr, wd, top1 in sweep]}
        accelerator.print(f"linear probe: {len(sweep)} heads, {steps} steps each; chosen lr {head.lr:g} weight decay "
                          f"{head.weight_decay:g} (val top-1 {head.val_top1:.4f})")
    else:
        bank = normalised(train)
        logits = knn_scores(accelerator, normalised(val[positions]), bank, labels, classes, options)
        steps, record = 0, {"probe": "knn", "k": options.knn_k, "temperature": options.knn_temperature}
        if accelerator.is_main_process:
            write_bytes_atomic(job.out / KNN_FILE, save({"bank": bank.contiguous(), "labels": labels.contiguous()},
                                                       {"k": str(options.knn_k), "classes": str(classes),
                                                        "temperature": repr(options.knn_temperature)}))
    fields = task.fields(logits, val_labels[positions])
    figures = task.figures(fields)
    figures["samples"] = task.samples(fields, positions)
    row = {"step": steps, "epoch": job.settings.schedule.epochs if steps else 0, **task.row(figures, job.class_names)}
    job.logger.write(row, f"{options.probe} probe val: {task.line(figures)} ({figures['val_samples']} "
                          f"{job.settings.sample_unit})")
    start_pictures(job, figures)
    epochs = job.settings.schedule.epochs if steps else 0
    return run_summary(job, epochs, steps, round(time.perf_counter() - t0, 3), probe=record), figures


def knn_scores(accelerator, queries, bank, labels, classes, options):
    """(queries, classes) kNN log-probabilities: blocks of VAL_BLOCK queries, block b on process b % world, gathered;
    each block computed alike on any number of processes."""
    blocks = range(math.ceil(len(queries) / VAL_BLOCK))
    bank, labels = bank.to(accelerator.device), labels.to(accelerator.device)  # once, not a block at a time
    mine = {b: knn_log_probs(queries[b * VAL_BLOCK:(b + 1) * VAL_BLOCK].to(accelerator.device), bank, labels, classes,
                             options.knn_k, options.knn_temperature).cpu()
            for b in blocks if b % accelerator.num_processes == accelerator.process_index}
    every = {b: part for found in gather_object([mine]) for b, part in found.items()}
    return torch.cat([every[b] for b in blocks]) if every else torch.zeros(0, classes)


def cache_key(job, model):
    """What the cache is made from: the model's weights, its eval input, the data and the batches."""
    inp = job.settings.input
    return {"weights_sha256": tensors_sha256(model.state_dict().items()), "model": job.settings.model.name,
            "data": job.data,
            "val_samples": len(job.val_loader.dataset), "batch_size": job.settings.plan.micro,
            "chunk_batches": chunks.CHUNK_BATCHES, "input": [inp.val_crop_size, inp.val_resize_size, inp.interpolation,
                                                      inp.mean_std, inp.channels, inp.pixel_max]}


def check_key(job, key):
    """features/key.json written by the main process, or found equal to `key`: never another run's cache mixed in."""
    if not chunks.same_key(job.accelerator, job.out / CACHE / "key.json", key):
        raise FolderError(f"probe: {job.out / CACHE} holds features of other weights, input, data or --batch_size "
                          f"than this run's; give another --output_dir")


def cached(job, model, split, dataset, num_workers):
    """(features (n, dim) float32, valid (n,) bool) of every sample of `split` (utils/run/chunks.py: this process
    computes its missing chunks, then every process reads them all). A file that could not be decoded is one line
    (--skip_bad_images: left out)."""
    with Features(model, job.settings.model.name) as reader:
        def measure(batch):
            model(job.inputs(batch["pixel_values"].to(job.accelerator.device)))
            return {"features": reader.take(len(batch["valid"])).cpu()}

        found, bad = chunks.cached(job.accelerator, job.out / CACHE / split, dataset, job.settings.plan.micro,
                                   num_workers, measure, job.stop, ("features", split),
                                   "rerun the same command with --resume latest")
    if bad:  # every process reads every file's list: the same line everywhere, or the same skipped files
        if not job.bad_images.skip:
            first, error = next(iter(bad.items()))
            raise DataError(f"probe: {len(bad)} {split} file(s) could not be decoded, the first {first} ({error}); "
                            f"--skip_bad_images leaves them out")
        job.bad_images.found.update(bad)  # results.json's skipped_images, bad_images.txt
    return found["features"], found["valid"]
