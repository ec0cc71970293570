"""--early_stop PATIENCE: end training when the tracked validation figure (--track_metric's, the EMA's with --model_ema)
has not beaten its best by more than --early_stop_min_delta for PATIENCE validations in a row. Every rank
decides from the same gathered figure, so every rank stops at the same epoch; the count is kept in checkpoints,
so a resumed run stops where the uninterrupted one would, and a run that stopped stays stopped."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EarlyStopOptions:
    """--early_stop PATIENCE and --early_stop_min_delta: when training ends before its last epoch."""

    early_stop: int  # validations in a row without a better tracked figure (None: never)
    early_stop_min_delta: float  # a gain must exceed it to count


@dataclass
class Patience:
    patience: int = None  # None: never stop early
    min_delta: float = 0.0
    best: float = None
    waited: int = 0  # validations since the best
    stopped_epoch: int = None
    figure: str = "val top-1"  # what it follows, as its line names it (the task's tracked figure)

    @property
    def stopped(self):
        return self.stopped_epoch is not None

    def update(self, figure, epoch):
        """Count one validation's figure; True when training stops after this epoch."""
        if self.patience is None:
            return False
        if self.best is None or figure > self.best + self.min_delta:
            self.best, self.waited = figure, 0
        else:
            self.waited += 1
        if self.waited >= self.patience:
            self.stopped_epoch = epoch
        return self.stopped

    def state(self):
        return {"best": self.best, "waited": self.waited, "stopped_epoch": self.stopped_epoch}

    def load(self, state):
        """A checkpoint's count (none in one written without --early_stop, or before it existed: a fresh count)."""
        for key, value in (state or {}).items():
            setattr(self, key, value)

    def results(self):
        if self.patience is None and not self.stopped:  # (a stopped run resumed without the flag still says so)
            return {}
        return {"stopped_early": self.stopped, "stopped_early_epoch": self.stopped_epoch}

    def line(self):
        return (f"early stop: no {self.figure} better than {self.best:.4f} by more than {self.min_delta:g} for "
                f"{self.waited} validations; training ended after epoch {self.stopped_epoch}")

