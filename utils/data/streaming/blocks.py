"""How a --streaming worker reads its pass over the shards (utils/data/streaming/rows.py): in blocks of
--shuffle_buffer rows, each read in a thread while the one before it is used.

The read (parquet decompression and `datasets`' rows, ~0.05 ms a row of JPEG bytes here) and the
samples' decoding then overlap, where reading a block and then decoding it added ~6 % to a stream's
time over a folder's. Once the rows the epoch needs of this worker are read (its turns:
stream_loader.Turns) or its pass has run out, the thread goes on to the next epoch's first block, which
the next epoch takes if it starts there (a DataLoader worker is kept from epoch to epoch): an epoch's
first block is read ahead too, and no block past the needed rows is read unless asked for. Positions
are unchanged: the stream's state after a block is taken in the thread right after reading it, before
anything else reads the stream.
"""

import os
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from torch.utils.data import get_worker_info


class Blocks:
    """One process's (a DataLoader worker's) reading thread, and the next epoch's first block read ahead (not
    past epoch `last`, the run's last)."""

    def __init__(self, size, last):
        self.size, self.last, self.pool, self.ahead, self.pid = size, last, None, None, None

    def __getstate__(self):  # to a DataLoader worker: its thread and read-ahead are its own
        return {**self.__dict__, "pool": None, "ahead": None, "pid": None}

    def read(self, epoch, start, block, open_pass, needed):
        """`epoch`'s blocks from `start` (the stream's state at block number `block`; None: the epoch's start), as
        (state at the block's start, block number, rows); `open_pass(epoch)` gives an epoch's stream. Blocks are
        read ahead until they hold the `needed` rows of the epoch (from its start); past them, when asked for."""
        if self.pid != os.getpid():  # first here, or a forked copy: a thread of its own (a fork copies none)
            self.pool, self.ahead = ThreadPoolExecutor(1, thread_name_prefix="stream-blocks"), None
            self.pid = os.getpid()
        ahead, self.ahead = self.ahead, None
        if ahead is not None and (ahead.epoch, start, block, ahead.needed) == (epoch, None, 0, needed):
            reader = ahead
        else:
            if ahead is not None:
                ahead.close()
            reader = BlockReader(open_pass(epoch), epoch, start, block * self.size, needed, self.size, self.pool)

        def next_epoch():  # in the reading thread, once this epoch's needed rows are read or its pass has run out
            if get_worker_info() is not None and epoch < self.last:  # a kept worker, an epoch still to come
                self.ahead = BlockReader(open_pass(epoch + 1), epoch + 1, None, 0, needed, self.size, self.pool)

        reader.then(next_epoch)
        try:
            for start, rows in reader:
                yield start, block, rows
                block += 1
        finally:
            reader.close()


class BlockReader:
    """One epoch's pass over a process's stream, read a block at a time in `pool`'s thread, one block ahead
    of the one in use until the `needed` rows of the epoch are read (`count`: rows before `start`). Iterating
    gives (the stream's state at the block's start, its rows). Only the thread touches the stream and the
    reader's state."""

    def __init__(self, share, epoch, start, count, needed, size, pool):
        self.share, self.epoch, self.start, self.size, self.pool = share, epoch, start, size, pool
        self.count, self.needed, self.ran_out, self.next, self.closed = count, needed, False, None, False
        if start is not None and start["epoch"] != share.epoch:
            # A position in a pass read otherwise (with shuffle(), before set_epoch: `datasets` would ignore it and
            # start again): the same rows, found again by reading those before them
            start = self.start = None
        share.load_state_dict(start)  # None: from the start of this epoch's pass, `count` rows in
        self.rows, self.skip = iter(share), count if start is None else 0
        self.pending = pool.submit(self._read)

    def then(self, what):
        """Call `what` in the thread once the needed rows are read or the pass has run out (now, if already)."""
        self.pool.submit(self._arm, what)

    def _arm(self, what):
        self.next = what
        self._go_on()

    def _go_on(self):
        if self.next is not None and not self.closed and (self.ran_out or self.count >= self.needed):
            what, self.next = self.next, None
            what()

    def _read(self):
        if self.skip:  # a position without the stream's state: the rows before it read again
            deque(islice(self.rows, self.skip), maxlen=0)
            self.start, self.skip = self.share.state_dict(), 0
        rows = list(islice(self.rows, self.size))
        start, self.start = self.start, self.share.state_dict()  # where the next block starts
        self.count += len(rows)
        self.ran_out = len(rows) < self.size
        self._go_on()  # what comes next, read while this is used
        return start, rows, self.count < self.needed

    def __iter__(self):
        while True:
            start, rows, more = self.pending.result()
            if not rows:
                return
            # The next block now, while this one is used; past the rows needed, only if asked for
            self.pending = self.pool.submit(self._read) if more else None
            yield start, rows
            if self.pending is None:
                self.pending = self.pool.submit(self._read)

    def close(self, finalizing=sys.is_finalizing):  # (bound here: at exit the module's names may be gone)
        """After the read under way, the stream's files are closed in the thread (not by the garbage collector
        at exit, when pyarrow is half gone); here when the pool is shutting down; not at all once the interpreter
        is (a pass left open at exit, as without workers: the files close with the process). A pass left before
        its needed rows (a loader started again mid-epoch) reads no epoch ahead."""
        self.closed = True
        if finalizing():
            return
        try:
            self.pool.submit(self.rows.close).result()
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
            self.rows.close()
