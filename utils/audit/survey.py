"""The audit's pass over both splits: each sample's look (utils/audit/look.py) and, with a model, its features (what
its classifier reads, as predict.py --embeddings reads them), computed in chunks sharded over the launch's processes
and cached in <output>/cache/{train,val}/ (utils/run/chunks.py): the same bytes on any number of processes, and a pass
that was killed goes on from the chunks it wrote when the same command is run again. <output>/cache/key.json says
what the cache was made from (the data, the model's weights, its input, the batches): another audit's is refused."""

from dataclasses import asdict

import numpy as np
import torch

from utils.audit.findings import Samples
from utils.audit.look import Look
from utils.core.errors import UserError
from utils.data.sources.folds import read_names, split_names, unwrapped_split
from utils.export.graph import EvalGraph
from utils.models.features import Features
from utils.models.weights import tensors_sha256
from utils.run import chunks

CACHE = "cache"
# The data options that do not change what a sample is: how it is loaded, and the training's own
NOT_DATA = ("num_workers", "skip_bad_images", "decode_on_device", "epochs", "batch_size", "grad_accum_steps",
            "steps_per_epoch", "eval_only", "ra_reps", "shuffle_buffer", "test_clips", "test_crops", "audit")
SPLITS = ("train", "val")


class AuditError(UserError, ValueError):
    """Bad input to the audit: one line, exit 2 (utils/core/errors.py)."""


def surveyed(dataset, val, pixel_max):
    """The split `dataset` as the audit reads it: through the validation `val`'s transform, no random draws, each item
    with its look."""
    return unwrapped_split(dataset).evaluated_like(unwrapped_split(val), look=Look(pixel_max))


def cache_key(data_name, data, inp, model, model_name, batch_size, lengths):
    """What the cache is made from: the data and the sizes of its splits, the model's weights and input, the
    batches."""
    options = {k: v for k, v in asdict(data).items() if k not in NOT_DATA}
    return {"data": data_name, "options": options, "samples": list(lengths), "model": model_name,
            "weights_sha256": tensors_sha256(model.state_dict().items()) if model is not None else None,
            "input": [inp.val_crop_size, inp.val_resize_size, inp.interpolation, inp.mean_std, inp.channels,
                      inp.pixel_max, inp.frames], "batch_size": batch_size, "chunk_batches": chunks.CHUNK_BATCHES}


def check_key(accelerator, folder, key):
    """<folder>/key.json written by the main process, or found equal to `key`: never another audit's cache mixed in."""
    if not chunks.same_key(accelerator, folder / "key.json", key):
        raise AuditError(f"{folder} holds what another audit computed (other data, model weights, input or "
                         f"--batch_size); give another --output, or remove the folder")


def survey(accelerator, splits, inp, model, model_name, folder, batch_size, num_workers, stop):
    """Samples of both `splits` ((train, val) datasets as the source built them), their looks and, with `model`,
    features; every process gets them all."""
    names, labels, tensors, errors, split = [], [], [], {}, []
    graph = EvalGraph(model, inp, None).eval() if model is not None else None
    for number, (what, dataset) in enumerate(zip(SPLITS, splits)):
        reading = surveyed(dataset, splits[1], inp.pixel_max)
        found, bad = chunks.cached(accelerator, folder / what, reading, batch_size, num_workers,
                                   measure(graph, model, model_name, accelerator.device), stop, ("looks", what),
                                   "run the same command again to go on")
        names += split_names(dataset)
        labels += [tuple(v) if isinstance(v, (list, tuple)) else int(v) for v in unwrapped_split(dataset).labels]
        split += [number] * len(dataset)
        errors.update(bad)
        tensors.append(found)
    joined = {key: torch.cat([part[key] for part in tensors]) for key in tensors[0]}
    joined.setdefault("features", None)
    by_name = {str(file): why for file, why in errors.items()}
    return Samples(np.asarray(split), names, labels, by_name, joined)


def measure(graph, model, model_name, device):
    """A batch's tensors for the cache: its looks and, with a model, its features."""
    reader = Features(model, model_name) if model is not None else None

    def of(batch):
        out = dict(batch["look"])
        if reader is not None:
            with reader:
                graph(batch["pixel_values"].to(device))
                out["features"] = reader.take(len(batch["valid"])).cpu()
        return out

    return of


def read_groups(path, names):
    """Each sample's group (`names`: both splits' samples, train first), from --groups' 'sample,group' lines (samples
    named by path, as both splits name them)."""
    if len(set(names)) < len(names):
        raise AuditError(f"--groups: the samples of this data have no paths of their own (each split names them by "
                         f"index), so {path} cannot name them; give the data as files")
    _, rows, at = read_names(path, "groups")
    given = {row[at]: row[1 - at] if len(row) > 1 else "" for row in rows}
    missing = [name for name in names if not given.get(name)]
    if missing:
        raise AuditError(f"--groups: {len(missing)} samples have no group in {path}, e.g. {missing[0]!r} (a header, "
                         f"then 'sample,group' a line, samples by path)")
    return [given[name] for name in names]
