"""Files that could not be decoded, met in training or scoring: skipped and listed, or every rank's stop."""

from utils.data.errors import DataError


class BadImages:
    """Files that could not be decoded: skipped and listed (`skip`), or the run's end at the first one met by any
    rank. `check` only records what a batch holds; the stop is agreed by every rank (`stop`, called where they
    all learn of it: the training step's all-reduce, a scoring batch's gather), so that no rank is left waiting
    in a collective for one that has already stopped."""

    def __init__(self, skip, hint="pass --skip_bad_images to skip such files (they are then listed in bad_images.txt)"):
        self.skip, self.hint, self.found, self.first = skip, hint, {}, None

    def check(self, batch):
        """The number of valid images in the batch (padding excluded); the bad ones recorded."""
        # Host-side strings: no device sync. A skipped image is left out of loss and metrics.
        bad = {source: error for source, error in zip(batch["source"], batch["error"]) if source}
        if bad and not self.skip and self.first is None:
            self.first = next(iter(bad.items()))
        self.found.update(bad)
        return sum(not source and not error for source, error in zip(batch["source"], batch["error"]))  # not padding

    @property
    def stopping(self):
        """Whether this rank met a file it may not skip."""
        return self.first is not None

    def stop(self, accelerator):
        """Every rank calls it at once (a collective): the DataError naming the first file met, and by which
        process, raised alike on all of them."""
        from accelerate.utils import gather_object

        met = gather_object([self.first]) if accelerator.num_processes > 1 else [self.first]
        rank, (source, error) = next(((rank, first) for rank, first in enumerate(met) if first is not None),
                                     (0, ("a file", "invalid")))
        where = f"; met by process {rank}" if accelerator.num_processes > 1 else ""
        raise DataError(f"cannot decode {source} ({error.splitlines()[0]}{where}); {self.hint}")
