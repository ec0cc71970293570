"""SIGTERM / SIGINT on any rank: every rank finishes its optimizer step, checkpoints, and exits."""

import signal

EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: "try again" -- rerun with --resume latest


class Interrupted(Exception):
    """Raised on every rank once the interrupt checkpoint is saved."""


class StopRequest:
    """Remembers a signal; `pending` agrees on it across ranks through Accelerate's trigger."""

    def __init__(self):
        self.signal_name = None

    def install(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._note)

    def _note(self, signum, frame):
        self.signal_name = signal.Signals(signum).name

    def pending(self, accelerator):
        """True on every rank as soon as any rank got a signal (one small all-reduce: call it once a step)."""
        if self.signal_name is not None:
            accelerator.set_trigger()
        return accelerator.check_trigger()
