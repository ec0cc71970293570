"""The training loader of --streaming (utils/data/streaming/rows.py reads the shards): the same number of
batches on every process each epoch, padded when a process's shards run out, and a position that each
rank writes into every checkpoint and reads back to resume exactly where it stood."""

import math
import os
import pickle
import time
import warnings
from pathlib import Path

import torch

from utils.data.errors import DataError

# torchdata 0.11's StatefulDataLoader calls torch.set_vital, which torch deprecated after it: noise, not ours to fix.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated")

PADDING = "padding: this process's shards ran out before the epoch's steps"
STATE_FILE = "stream_state_{rank}.pkl"  # in each checkpoint folder, one per rank


class Turns:
    """How the loader deals an epoch's batches to the workers of a StreamRows, and when a worker may stop.

    A DataLoader takes an iterable dataset's batches from its workers in turn (batch i from worker i mod W),
    and once a worker runs out, from the others in turn. An epoch takes `micro_batches` batches, so a worker
    whose turns are done is needed again only if another ran out before its own were; otherwise whatever it
    made past its turns would be thrown away: a partial batch at the end of its pass, or the batches the loader
    asks ahead (prefetch_factor a worker), each decoded and then waited for when the next epoch starts (4 % of
    the work of a 1,200-image epoch, measured). So a worker that has made its turns waits until every other
    worker has made its own or run out, or the loader has left the epoch, and goes on only if one ran out:
    the batches handed out are those it would make without stopping, in the same order.

    `state` is shared memory: one entry a worker, round * 3 + READING, DONE (its turns made) or SHORT (ran out
    before them), and the loader's last, 2 x round while it takes that round's batches, + 1 once it has left
    it. A round is one epoch's `batches()`, numbered by the loader (an epoch asked for twice is two rounds).
    """

    READING, DONE, SHORT = range(3)

    def __init__(self, batch_size=None, micro_batches=None, workers=1):
        """Without a batch size: no loader deals the batches (a StreamRows read on its own), its pass is read whole."""
        self.batch_size, self.micro_batches, self.workers = batch_size, micro_batches, max(1, workers)
        self.state = torch.full((self.workers + 1,), -1, dtype=torch.int64).share_memory_()
        self.pid = self.parent = None  # a worker's own process, and its parent (the loader's, or a fork server)

    def begin(self):
        """(the loader) A new round: its number."""
        round = int(self.state[-1]) // 2 + 1
        self.state[-1] = round * 2
        return round

    def end(self, round):
        """(the loader) `round` takes no more batches (if it is still the loader's: a late close of an old one
        leaves the new one alone)."""
        if int(self.state[-1]) == round * 2:
            self.state[-1] = round * 2 + 1

    def round(self):
        return int(self.state[-1]) // 2

    def samples(self, worker):
        """The samples of `worker`'s turns in an epoch."""
        if self.batch_size is None:
            return math.inf
        return len(range(worker, self.micro_batches, self.workers)) * self.batch_size

    def mark(self, worker, round, what):
        if self.batch_size is not None:  # (read whole, nobody waits for it)
            self.state[worker] = round * 3 + what
            if self.pid != os.getpid():  # first here: the parent to watch while waiting
                self.pid, self.parent = os.getpid(), os.getppid()

    def deal(self, worker, handed, samples):
        """`samples` (`worker`'s of this round, from its `handed`-th) as the loader takes them: its turns, and past
        them only if another worker ran out first (asked before the next sample is made)."""
        round, turns = self.round(), self.samples(worker)
        self.mark(worker, round, self.DONE if handed >= turns else self.READING)
        while handed != turns or self.needed_past_turns(worker, round):
            sample = next(samples, None)
            if sample is None:
                if handed < turns:  # ran out before its turns: the others make its batches
                    self.mark(worker, round, self.SHORT)
                return
            handed += 1
            if handed == turns:
                self.mark(worker, round, self.DONE)
            yield sample

    def needed_past_turns(self, worker, round):
        """Once `worker`'s turns are made: whether the loader will take more of its batches this round (another
        worker ran out first). Waits for the others to make theirs; False once the loader has left the round or
        the worker's parent is gone."""
        others = [w for w in range(self.workers) if w != worker]
        while True:
            states = self.state.tolist()
            if any(states[w] == round * 3 + self.SHORT for w in others):
                return True
            if (all(states[w] >= round * 3 + self.DONE for w in others) or states[-1] != round * 2
                    or os.getppid() != self.parent):
                return False
            time.sleep(0.001)


class StreamLoader:
    """The training loader of --streaming: exactly len(self) batches an epoch on every process, on the device.

    A torchdata StatefulDataLoader underneath, which asks each worker's StreamRows where it stands
    after every batch, so that state_dict() is the position after the last batch handed out (not
    the ones prefetched). Its workers are kept from epoch to epoch (started again, each cost an epoch's
    start a fork and the shards' reopening; kept, each reads the next epoch's first block as soon as
    its pass runs out: utils/data/streaming/blocks.py); StreamRows reads the epoch from shared memory. Past the end of
    this process's shards it hands out padding batches: one blank image marked not valid (the loop trains on none, and
    still joins the all-reduce).
    """

    def __init__(self, rows, batch_size, num_workers, micro_batches, device, worker_init_fn, decode=None):
        from torchdata.stateful_dataloader import StatefulDataLoader

        self.dataset, self.micro_batches, self.device, self.num_workers = rows, micro_batches, device, num_workers
        rows.turns = Turns(batch_size, micro_batches, num_workers)
        self.decode = decode or (lambda batch: batch)  # --decode_on_device (utils/data/decoding/on_device.py)
        self.loader = StatefulDataLoader(rows, batch_size=batch_size, num_workers=num_workers,
                                         worker_init_fn=worker_init_fn, pin_memory=device.type == "cuda",
                                         snapshot_every_n_steps=1, persistent_workers=num_workers > 0,
                                         # Own generator: an epoch's iterator draws nothing from the global RNG,
                                         # which a checkpoint restores (as build_dataloaders does).
                                         generator=torch.Generator())
        self.position = {"epoch": None, "taken": 0, "exhausted": False, "loader": None}

    def __len__(self):
        return self.micro_batches

    def batches(self, epoch, skipped=0):
        """This epoch's batches after the first `skipped` (a resumed run: from the state loaded)."""
        from accelerate.utils import send_to_device

        if skipped and (self.position["epoch"] != epoch or self.position["taken"] != skipped):
            raise DataError(f"resume: the checkpoint's stream position ({self.position['taken']} batches into epoch "
                            f"{self.position['epoch']}) is not where training resumes ({skipped} into {epoch})")
        self.dataset.set_epoch(epoch)
        exhausted = self.position["exhausted"] if skipped else False
        if skipped and not exhausted:
            self.loader.load_state_dict(self.position["loader"])
        self.position = {"epoch": epoch, "taken": skipped, "exhausted": exhausted, "loader": None}
        round = self.dataset.turns.begin()
        stream = iter(()) if exhausted else iter(self.loader)
        _, size = self.dataset.preset(epoch)
        try:
            for taken in range(skipped, self.micro_batches):
                batch = next(stream, None)
                if batch is None:
                    self.position["exhausted"] = True
                    batch = {"pixel_values": torch.zeros(1, 3, size, size, dtype=torch.uint8),
                             "labels": torch.zeros(1, dtype=torch.int64), "valid": torch.zeros(1, dtype=torch.bool),
                             "source": [""], "error": [PADDING]}
                self.position["taken"] = taken + 1
                yield self.decode(send_to_device(batch, self.device, non_blocking=True))
        finally:  # all taken, or left early (a run's last step, a preemption): no worker waits on this round
            self.dataset.turns.end(round)

    def close(self):
        """Its workers stopped now: the round they may wait on ended first, then the loader's own shutdown."""
        self.dataset.turns.end(self.dataset.turns.round())
        iterator, self.loader._iterator = self.loader._iterator, None
        if iterator is not None:
            getattr(iterator, "_shutdown_workers", lambda: None)()

    def state_dict(self):
        # Only mid-epoch, from the live iterator: without one, StatefulDataLoader.state_dict() would start
        # workers reading ahead with whatever epoch StreamRows holds then (and the next epoch would reuse them).
        position = self.position
        live = (position["epoch"] is not None and 0 < position["taken"] < self.micro_batches
                and not position["exhausted"])
        return {**position, "loader": self.loader.state_dict() if live else None, "num_workers": self.num_workers}

    def load_state_dict(self, state):
        if state["num_workers"] != self.num_workers:
            raise DataError(f"num_workers: the checkpoint's stream was read by {state['num_workers']} workers per "
                            f"process, and its position is each worker's own: resume with --num_workers "
                            f"{state['num_workers']}")
        self.position = {key: state[key] for key in ("epoch", "taken", "exhausted", "loader")}

    def save_position(self, folder, rank):
        """This rank's stream position into a checkpoint folder (every rank writes its own)."""
        with open(Path(folder) / STATE_FILE.format(rank=rank), "wb") as f:
            pickle.dump(self.state_dict(), f)

    def load_position(self, folder, rank):
        """The position `save_position` wrote, read back before `batches(epoch, skipped)` continues."""
        path = Path(folder) / STATE_FILE.format(rank=rank)
        if not path.is_file():
            raise DataError(f"resume: {path} is missing: the checkpoint was not written by a --streaming run "
                            f"(or by fewer processes)")
        with open(path, "rb") as f:
            self.load_state_dict(pickle.load(f))
