"""Bad input, one kind: an error a user can fix, told in one line, exit code 2, nothing written after it."""

import sys


class UserError(Exception):
    """Input that cannot be used as asked. The message is one line saying what was wrong and what to do;
    the scripts' main() prints it with `report`. Each subsystem has its subclass (DataError, ModelError,
    FolderError, CheckpointError, MetricError, PushError, ConfigError, RunError, TeacherError), so a caller can tell
    them apart."""

    @classmethod
    def fail(cls, message):
        """Raise this kind of error: `DataError.fail("train_dir: ...; pass ...")`."""
        raise cls(message)


class ConfigError(UserError, ValueError):
    """A bad option value, or options that do not go together; the message names the option."""


def requirement(options):
    """`need(ok, key, problem)` over the parsed options ({option: value}): when not ok, a ConfigError `key: problem,
    got <value>`. Each subsystem checks its own options with it, next to its code (`check_options`);
    utils/config/checks.py runs them all before anything is built."""
    def need(ok, key, problem):
        if not ok:
            raise ConfigError(f"{key}: {problem}, got {options[key]!r}")
    return need


def at_least(options, need, keys, low, optional=False):
    """need() each option of `keys` >= low (or None, when optional), each a field of `options` (a typed section)."""
    for key in keys:
        value = getattr(options, key)
        need((optional and value is None) or value >= low, key, f"must be >= {low}")


def report(prog, message):
    """`prog: error: message` on stderr, exit code 2. One write: lines of several ranks do not interleave."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)
