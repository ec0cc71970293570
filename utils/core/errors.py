"""Bad input, one kind: an error a user can fix, told in one line, exit code 2, nothing written after it."""

import sys


class UserError(Exception):
    """Input that cannot be used as asked. The message is one line saying what was wrong and what to do;
    the scripts' main() prints it with `report`. Each subsystem has its subclass (DataError, ModelError,
    FolderError, MetricError, PushError, ConfigError, RunError), so a caller can tell them apart."""

    @classmethod
    def fail(cls, message):
        """Raise this kind of error: `DataError.fail("train_dir: ...; pass ...")`."""
        raise cls(message)


def report(prog, message):
    """`prog: error: message` on stderr, exit code 2. One write: lines of several ranks do not interleave."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)
