"""Run train_classification.py and send a signal from inside the run at an exact point of it.

    python tests/helpers/signal_at.py WHEN SIGNAL TARGET RANK [train_classification.py options...]
    accelerate launch ... tests/helpers/signal_at.py WHEN SIGNAL TARGET RANK [options...]

WHEN: step:N (right after optimizer step N is counted, before its checkpoint) or save:NAME (while
checkpoint NAME is being written: its files are in .partial-NAME, its state file not yet) or chunk:SPLIT/C (right
after --probe's (or audit.py's) cache file C of SPLIT is written) or features:N (right after this process's N-th
batch of --probe's features is computed). Options that start with audit.py run audit.py with the rest.
SIGNAL: TERM, INT or KILL. TARGET: self; alone (this process only, as a crash or the OOM killer ends it, its
DataLoader workers stopped first so that they outlive it, as workers do that have not yet noticed); group (this
process's process group: its DataLoader workers too, as SLURM and torchrun deliver signals); parent (the launcher
that started this process); parent_group (the launcher's process group). RANK: the rank that sends it (the others do
not; nor does any rank after torchrun restarted the group).

Tests use it to hit a precise moment without polling for files, in the conditions users have: under a
real launcher, or in ranks forked by tests/ranks.py (target "helpers.signal_at:main", the same arguments).
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import train_classification  # noqa: E402
from utils.reporting import progress  # noqa: E402
from utils.training import checkpoints  # noqa: E402


def fire(signame, target):
    signum = getattr(signal, f"SIG{signame}")
    if target == "self":
        os.kill(os.getpid(), signum)
    elif target == "alone":
        import psutil

        for child in psutil.Process().children():  # workers left as they are, to be found by whoever comes next
            child.send_signal(signal.SIGSTOP)
        os.kill(os.getpid(), signum)
    elif target == "parent":
        os.kill(os.getppid(), signum)
    elif target in ("group", "parent_group"):
        # Sent by another process, as SLURM's, torchrun's or a job manager's would be: workers tell
        # their own rank's signals (it ends them with SIGTERM) from the others.
        group = os.getpgid(0 if target == "group" else os.getppid())
        subprocess.run(["kill", f"-{int(signum)}", "--", f"-{group}"])
    else:
        raise SystemExit(f"unknown target {target}")


def main(argv=None):
    when, signame, target, rank, *argv = sys.argv[1:] if argv is None else argv
    # Under torchrun --max_restarts, the restarted workers (TORCHELASTIC_RESTART_COUNT > 0) run undisturbed.
    if os.environ.get("RANK", "0") == rank and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        kind, _, value = when.partition(":")
        if kind == "step":
            original = progress.StepLogger.optimizer_step

            def optimizer_step(self, global_step, lr):
                original(self, global_step, lr)
                if global_step == int(value):
                    fire(signame, target)
            progress.StepLogger.optimizer_step = optimizer_step
        elif kind == "save":
            original = checkpoints.write_json_atomic

            def write_state(path, obj):
                if Path(path).parent.name == f".partial-{value}":
                    fire(signame, target)
                original(path, obj)
            checkpoints.write_json_atomic = write_state
        elif kind == "chunk":
            from utils.run import chunks

            written = chunks.write_bytes_atomic

            def write_chunk(path, data):
                written(path, data)
                if f"{Path(path).parent.name}/{Path(path).stem.removeprefix('chunk_')}" == value:
                    fire(signame, target)
            chunks.write_bytes_atomic = write_chunk
        elif kind == "features":
            from utils.models.features import Features

            taken, seen = Features.take, []

            def take(self, rows):
                found = taken(self, rows)
                seen.append(rows)
                if len(seen) == int(value):
                    fire(signame, target)
                return found
            Features.take = take
        else:
            raise SystemExit(f"unknown WHEN {when}")
    if argv[:1] == ["audit.py"]:  # audit.py's options after it (its cache is written in chunks too)
        import audit

        audit.main(argv[1:])
    else:
        train_classification.main(argv)


if __name__ == "__main__":
    main()
