"""A pass over a split cached as chunk files: what --probe computes of each sample (its features) and what audit.py
does (utils/audit/survey.py), sharded over the launch's processes and resumable after a kill.

<folder>/chunk_<C>.safetensors holds samples [C * size, (C + 1) * size) of the split, read in batches of `batch_size`
(size = batch_size x CHUNK_BATCHES); chunk C is computed by process C % world and written whole. The same chunks and
batches on any number of processes make the same bytes; a pass stopped (SIGTERM, or killed) and started again computes
only the chunks that are missing."""

import json
import math

import torch
from accelerate.utils import gather_object
from safetensors import safe_open
from safetensors.torch import load, save
from torch.utils.data import DataLoader

from utils.core.io import write_bytes_atomic, write_json_atomic
from utils.core.preemption import Interrupted, worker_init_fn

CHUNK_BATCHES = 8  # batches a cache file holds: what a killed pass recomputes at most, per process


def cached(accelerator, folder, dataset, batch_size, num_workers, measure, stop, what, again):
    """({name: (n, ...) tensor} of every sample of `dataset` (`valid` among them: whether it was decoded), {file:
    error} of those that were not): this process computes its missing chunks, each batch's tensors given by
    `measure(batch)` ({name: (rows, ...) tensor}), then every process reads them all. `stop`: the StopRequest whose
    signal ends the pass once the chunk under way is written. `what`: (what is cached, of which split), as lines name
    them ("features", "train"); `again`: how the line of a stopped pass says to go on."""
    size = batch_size * CHUNK_BATCHES
    chunks = range(math.ceil(len(dataset) / size))
    missing = [c for c in chunks if not chunk_file(folder, c).is_file()]
    if len(missing) < len(chunks):  # a pass that was stopped: what it computed is kept
        accelerator.print(f"{what[0]}: {len(chunks) - len(missing)} of {len(chunks)} {what[1]} files cached")
    todo = [c for c in missing if c % accelerator.num_processes == accelerator.process_index]
    batches = [list(range(start, min(start + batch_size, (c + 1) * size, len(dataset))))
               for c in todo for start in range(c * size, min((c + 1) * size, len(dataset)), batch_size)]
    if todo:
        loader = DataLoader(dataset, batch_sampler=batches, num_workers=num_workers, worker_init_fn=worker_init_fn())
        compute(loader, todo, size, folder, measure, stop, f"{what[1]} {what[0]}: cached up to here; {again}")
    accelerator.wait_for_everyone()
    files = [chunk_file(folder, c) for c in chunks]
    parts = [load(f.read_bytes()) for f in files]
    found = {name: torch.cat([p[name] for p in parts]) for name in (parts[0] if parts else ())}
    bad = dict(pair for f in files for pair in undecodable(f)) if parts and not found["valid"].all() else {}
    return found, bad


def same_key(accelerator, path, key):
    """Whether the cache's `path` (its key.json: what it was made from) holds `key`, on every process alike; the main
    process writes it where there is none. A cache made of other data or weights is never mixed in."""
    key = json.loads(json.dumps(key))  # as JSON gives it back
    same = True
    if accelerator.is_main_process:
        if path.is_file():
            same = json.loads(path.read_text()) == key
        else:
            write_json_atomic(path, key)
    return all(gather_object([same]))


def chunk_file(folder, chunk):
    return folder / f"chunk_{chunk:05d}.safetensors"


def undecodable(path):
    """[(file, error)] of the samples of cache file `path` that could not be decoded."""
    with safe_open(path, "pt") as f:
        return json.loads(f.metadata()["bad"])


def compute(loader, todo, size, folder, measure, stop, stopped):
    """This process's chunks `todo` of the split, each written whole once its batches are done; a stop signal ends it
    after the chunk under way, with the line `stopped`."""
    parts, valid, bad, chunk = [], [], [], iter(todo)
    current, filled = next(chunk), 0
    with torch.no_grad():
        for batch in loader:
            parts.append(measure(batch))
            valid.append(batch["valid"].bool())
            bad += [(source, error) for source, error, ok in zip(batch["source"], batch["error"], batch["valid"])
                    if not ok]
            filled += len(batch["valid"])
            if filled == min(size, len(loader.dataset) - current * size):
                tensors = {name: torch.cat([p[name] for p in parts]).contiguous() for name in parts[0]}
                write_bytes_atomic(chunk_file(folder, current), save({**tensors, "valid": torch.cat(valid)},
                                                                     {"bad": json.dumps(bad)}))  # the undecodable
                parts, valid, bad, filled = [], [], [], 0
                if stop.requested:
                    raise Interrupted(f"interrupted by {stop.signal_name} during the {stopped}")
                current = next(chunk, None)
