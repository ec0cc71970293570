"""One run of train_classification.py started by a driver (a trial of tune.py, a fold of crossval.py), as its user
would start it (`accelerate launch ...`), watched from outside: its own process group, its console in
<run>/console.log, its validation rows read from <run>/metrics.jsonl as they are written. Stopped (pruned, or the
driver preempted) by SIGTERM to its whole group, as SLURM signals a job step: every rank finishes its step, saves a
checkpoint and exits 75; nothing in the run waits on a decision. The driver process that runs it owns its folder
through an flock (`own`), which dies with it: the next driver finds the run unowned and continues it."""

import ctypes
import fcntl
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from utils.evaluation.tasks import read_kind, tracked_figure
from utils.reporting.progress import elapsed_and_left
from utils.training.checkpoints import STATE_FILE, complete_checkpoints
from utils.training.run_lock import is_held

SCRIPT = Path(__file__).parents[2] / "train_classification.py"
CONSOLE = "console.log"  # in the run folder: what the trial's processes printed
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
GROUP_EXIT_WAIT_S = 120  # how long a stopped trial's processes get to save and leave after their launcher
OWNER = ".owner"  # in a run folder: locked by the driver process running it
RUN_LOCK_WAIT_S = 120  # how long an orphaned run may still be saving (its ranks got SIGTERM as its owner died)
POLL_S = 0.5  # how often a running run's metrics.jsonl is read


@dataclass
class Outcome:
    """How a trial's run ended: complete (its figure: `value`), pruned, failed (its `line`), or interrupted (this
    tune.py was stopped: the trial continues in the next one)."""
    state: str
    value: float = None
    epochs: int = 0  # the validations it ran (an interrupted trial's: so far)
    line: str = ""


def _signalled_when_tune_dies():
    """In the launcher, before it runs: when tune.py dies, even by SIGKILL, the launcher gets SIGTERM and passes it to
    its ranks (a one-process launch's rank gets it from its own parent-death signal), so the trial saves a checkpoint
    for the next tune.py instead of training on unowned."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


class Stop:
    """SIGTERM or SIGINT to the driver (tune.py, crossval.py): `name` says which; the run it is running (`run`, a
    TrialRun) is passed the signal, saves a checkpoint, and is left for the next driver to continue (`stopped`: that
    run, once signalled)."""

    def __init__(self):
        self.name, self.run, self.stopped = None, None, None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame):
        self.name = self.name or signal.Signals(signum).name
        if self.run is not None:
            self.stopped = self.run
            self.run.stop()

    def line(self, what):
        """The driver's last line, once the stopped run has ended (`what`: "trial", "fold"): what the same command
        continues from, as the run's folder says it."""
        if self.stopped is None:
            return f"stopped by {self.name} between {what}s: rerun the same command to continue"
        return f"stopped by {self.name}; {self.stopped.left(what)}"


def own(folder):
    """The open owner lock of run folder `folder`, or None if a live process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    file = open(folder / OWNER, "a")
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.close()
        return None
    return file


def run_unlocked(folder):
    """Whether the run in `folder` has let go of its lock (waits while a rank of a dead owner's run still saves)."""
    deadline = time.monotonic() + RUN_LOCK_WAIT_S
    while is_held(folder):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def launcher(words):
    """The launcher's words (shlex-split), with a free --main_process_port for `accelerate launch`: several runs at
    once on one node (two drivers) need two ports."""
    import socket

    accelerate = words[:2] == ["accelerate", "launch"] or "accelerate.commands.launch" in words
    if accelerate and not any(word.startswith("--main_process_port") for word in words):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            words = [*words, "--main_process_port", str(s.getsockname()[1])]
    return words


def _group_alive(pgid):
    """Whether a process of group `pgid` still runs (a rank saving after its launcher left; zombies do not count)."""
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


class TrialRun:
    """`command` (the launcher's words, the script, its options) running in `folder` (its --output_dir)."""

    def __init__(self, command, folder, env):
        self.command, self.folder, self.env = command, Path(folder), env
        self.process, self.signalled, self._offset, self._partial = None, None, 0, b""
        self.started = None  # time.time() at its start
        self.validated_epoch = 0  # the last epoch a driver's Progress saw validated

    def start(self):
        self.started = time.time()
        self.validated_epoch = max(epochs_of(self.new_rows(), "val_loss"), default=0)  # by an earlier start
        self._offset, self._partial = 0, b""  # (its caller reads them too)
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / CONSOLE, "ab") as console:
            console.write(f"$ {' '.join(self.command)}\n".encode())
            console.flush()
            self.process = subprocess.Popen(self.command, stdout=console, stderr=subprocess.STDOUT, env=self.env,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_signalled_when_tune_dies)
        return self

    def running(self):
        return self.process.poll() is None

    def new_rows(self):
        """The rows of metrics.jsonl written since the last call (a line still being written waits for the next)."""
        try:
            with open(self.folder / "metrics.jsonl", "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def validations(self, objective):
        """Follow the started run until it ends: (epoch, figure's key, value) of each validation as its row is written,
        once each (an epoch validated again keeps its first), rows of an earlier start first; `objective`: the figure
        (objective_key)."""
        rows, key, seen = [], None, set()
        while True:
            alive = self.running()
            rows += self.new_rows()
            key = key or objective_key(self.folder, objective)
            for epoch, value in sorted(epochs_of(rows, key).items()) if key else ():
                if epoch not in seen:
                    seen.add(epoch)
                    yield epoch, key, value
            if not alive:
                return
            time.sleep(POLL_S)

    def stop(self, signum=signal.SIGTERM):
        """Signal every process of the trial (its launcher, its ranks, their workers: they leave it to their rank)."""
        self.signalled = self.signalled or signal.Signals(signum).name
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def wait(self):
        """Its launcher's exit code, once every process of its group has ended (a rank may still be saving)."""
        code = self.process.wait()
        deadline = time.monotonic() + GROUP_EXIT_WAIT_S
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        return code

    def left(self, what):
        """Where this stopped run (a `what`: "trial", "fold") stands, and what the driver's same command does with it:
        continue from the checkpoint it saved, or from an older one, or start it again (none yet)."""
        saved = complete_checkpoints(self.folder)
        if saved and (saved[-1] / STATE_FILE).stat().st_mtime >= self.started:
            return f"the running {what} saved its checkpoint {saved[-1].name}: rerun the same command to continue"
        if saved:
            return (f"the running {what} saved nothing since it started: rerun the same command to continue it from "
                    f"{saved[-1].name}")
        return f"the running {what} had not reached its first checkpoint: rerun the same command to start it again"

    def last_line(self):
        """What a failed run said last: its own one-line error if it printed one, else its console's last line."""
        try:
            lines = [line.strip() for line in (self.folder / CONSOLE).read_text(errors="replace").splitlines()]
        except OSError:
            return "(no output)"
        lines = [line for line in lines if line]
        own = [line for line in lines if line.startswith(f"{SCRIPT.name}:")]
        return (own or lines or ["(no output)"])[-1]


class Progress:
    """A driver's line at each validation of the run it follows (a trial, a fold), as a training's own lines go: which
    run of how many, its epoch of its epochs, the figure it is judged by, elapsed and left. Left: the epochs still to
    come, this run's and those of the runs after it (each as long as this one), at the pace of the epochs this driver
    has seen trained."""

    def __init__(self, prog, say=print):
        self.prog, self.say, self.started, self.trained = prog, say, time.monotonic(), 0

    def validated(self, run, label, epoch, key, value, runs_after):
        """`run` (a TrialRun, called `label`) validated `epoch` (its `key` figure: `value`); `runs_after`: how many runs
        are to follow it."""
        epochs = planned_epochs(run.folder)
        self.trained += max(0, epoch - run.validated_epoch)  # (an epoch of an earlier start was not trained now)
        run.validated_epoch = max(run.validated_epoch, epoch)
        left = (epochs - epoch) + runs_after * epochs if epochs else 0
        self.say(f"{self.prog}: {label}: epoch {epoch}/{epochs or '?'}, {key} {value:.4f}; "
                 f"{elapsed_and_left(time.monotonic() - self.started, self.trained, self.trained + left)}", flush=True)


def planned_epochs(folder):
    """The epochs the run in `folder` trains, as its config.yaml says (None before it is written)."""
    try:
        return yaml.safe_load((Path(folder) / "config.yaml").read_text()).get("epochs")
    except (OSError, AttributeError, yaml.YAMLError):
        return None


def objective_key(folder, objective):
    """The figure of a validation row that a trial's objective is, once the run in `folder` has written its
    config.yaml and run.json: `objective` val_loss, or the figure the run tracks (of its kind of labels, for its
    --track_metric, the EMA's with --model_ema: what its best/ and --early_stop follow)."""
    if objective == "val_loss":
        return "val_loss"
    try:
        options = yaml.safe_load((folder / "config.yaml").read_text())
        kind = read_kind(folder)
    except (OSError, ValueError, yaml.YAMLError):
        return None  # not written yet
    return tracked_figure(kind, options.get("track_metric"), options.get("model_ema", False))


def epochs_of(rows, key):
    """{epoch: figure} of the validation rows among `rows` that hold `key` (a redone epoch: its last row)."""
    return {round(row["epoch"]): row[key] for row in rows if key in row}
