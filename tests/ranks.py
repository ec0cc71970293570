"""Ranks forked from a warm process: N training processes as `accelerate launch` would start them, without
its interpreters.

    from ranks import run_ranks
    job = run_ranks(["--dataset", "synthetic", ...], nproc=2)             # train_classification.main
    job = run_ranks([...], nproc=2, target="helpers.signal_at:main")      # any main(argv) under tests/
    assert job.returncode == 0, job.report()

Each rank is a child of a forkserver that has imported torch, Accelerate and the script once for the whole
session (multiprocessing.set_forkserver_preload), so a rank starts in milliseconds instead of paying the
8-10 s of imports that every interpreter of a launch pays on a slow machine. The forkserver is a clean
process: it never trained, so it has no OpenMP thread pool, no Accelerate singletons and no process group
for a child to inherit. (Forking the pytest process itself, `start_method="fork"`, is faster still, but the
pytest process trains in-process in other tests, and a child forked after OpenMP work can hang in its
first parallel region; see tests/README.md for the measurements.)

What a rank gets is what `accelerate launch` gives its processes: the environment Accelerate's own launcher
code prepares for those launcher options (accelerate.utils.launch), plus torchrun's per-worker variables
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT on 127.0.0.1 with a free port, ...), a session of its own
(torchrun starts each worker so: a signal to the rank's process group reaches its DataLoader workers and
nothing else), the thread count the launcher's OMP_NUM_THREADS would give at import, the repository as
working directory. Its stdout and stderr (file descriptors 1 and 2: C libraries and workers too) go to
files that come back to the test.

As torchrun does, when one rank fails the others get SIGTERM on their process groups (unless they end on
their own within a few seconds), then SIGKILL after a grace period; past `timeout` every rank does. At the end every
rank's process group is SIGKILLed, so no rank or worker outlives the call whatever happened.

What this cannot stand in for is the launcher itself: signals sent to a launcher, a launcher that dies,
torchrun's restarts, several nodes, SLURM. Those tests keep real launchers (conftest.launch).
"""

import importlib
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import ROOT, environment, free_port

GRACE_S = 10  # between SIGTERM and SIGKILL when the job is torn down (torchrun waits 30 s)
SETTLE_S = 3  # after a rank failed, how long the others may take to end on their own (torchrun's monitor: 5 s)
PRELOAD = ["helpers.warm"]  # torch, Accelerate, the script, evaluate, matplotlib: tests/helpers/warm.py
START_METHOD = os.environ.get("TEST_RANKS_START_METHOD", "forkserver")  # "fork": from the pytest process itself
_context = None


def context():
    """The multiprocessing context that starts ranks; the forkserver starts (and imports) at the first call."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context(START_METHOD)
        if START_METHOD == "forkserver":
            _context.set_forkserver_preload(PRELOAD)
        probe = _context.Process(target=_check_warm)
        # The forkserver starts with the first process, from this environment; Python 3.11's ignores the
        # sys.path it is handed, so it finds the preload (and the repository's modules) through PYTHONPATH.
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), *filter(None, [saved])])
        try:
            probe.start()
        finally:
            os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)
        probe.join(timeout=600)
        # The forkserver ignores a preload that fails to import: its children would start cold, not fail.
        assert probe.exitcode == 0, f"the forkserver did not import {PRELOAD} (exit {probe.exitcode}); import it " \
                                    f"by hand to see why"
    return _context


def _check_warm():
    os._exit(0 if all(name in sys.modules for name in PRELOAD) or START_METHOD == "fork" else 3)


@dataclass
class Rank:
    returncode: int  # as subprocess gives it: negative for a signal; None if it never ended on its own
    stdout: str
    stderr: str


@dataclass
class Ranks:
    """What the ranks of one job left: exit codes and output, rank by rank."""

    ranks: list
    timed_out: bool = False
    seconds: float = 0.0
    torn_down: list = field(default_factory=list)  # ranks stopped by the teardown, not by themselves

    @property
    def returncode(self):
        """0 if every rank exited 0, else the first failing rank's code, as torchrun reports it."""
        if self.timed_out:
            return 124
        return next((r.returncode for r in self.ranks if r.returncode != 0), 0)

    @property
    def stdout(self):
        return "".join(r.stdout for r in self.ranks)

    @property
    def stderr(self):
        return "".join(r.stderr for r in self.ranks)

    def report(self, chars=3000):
        lines = [f"{'timed out' if self.timed_out else 'ended'} after {self.seconds:.1f} s"]
        for i, r in enumerate(self.ranks):
            lines.append(f"--- rank {i}: exit {r.returncode}{' (torn down)' if i in self.torn_down else ''}\n"
                         f"{r.stdout[-chars:]}\n--- rank {i} stderr\n{r.stderr[-chars:]}")
        return "\n".join(lines)


def launcher_environment(nproc, launcher_args=()):
    """The environment `accelerate launch [launcher_args]` gives its processes, as Accelerate prepares it."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    options = list(launcher_args)
    if nproc > 1 and "--config_file" not in options:
        options = ["--config_file", str(ROOT / "accel_configs" / "cpu_2proc.yaml"), *options]
    options += ["--num_processes", str(nproc), "--num_machines", "1", "--dynamo_backend", "no"]
    if "--mixed_precision" not in options:
        options += ["--mixed_precision", "no"]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*options, "script.py"]))
    if nproc == 1 and not args.multi_gpu:
        return prepare_simple_launcher_cmd_env(args)[1]
    return prepare_multi_gpu_env(args)


def torchrun_environment(rank, nproc, port):
    """The variables torchrun's agent sets for each worker of a one-node job."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(nproc),
            "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}


def _rank_main(target, argv, env, stdout_path, stderr_path):
    """In the child: become what a launched rank is, run `target(argv)`, exit with its code."""
    os.setsid()  # a session and process group of its own, as torchrun starts each worker
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(file, fd)
        os.close(file)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # PYTHONUNBUFFERED's line-by-line output
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    # multiprocessing handed this child its parent's start method; a launched rank has the platform's default
    # (fork on Linux before Python 3.14), which its DataLoader workers use. Inherited, it would be "forkserver":
    # a new forkserver per rank, started cold, ~10 s before the first batch.
    default = multiprocessing.context._default_context._default_context  # what get_start_method() says first
    multiprocessing.set_start_method(default._name, force=True)
    import torch

    import train_classification

    # The interpreter of a launched rank reads OMP_NUM_THREADS when torch loads; this one loaded torch earlier.
    if "OMP_NUM_THREADS" in env:
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    # The script notes its parent at import (to tell a launcher that died before it armed the parent-death
    # signal); it was imported in the forkserver, whose parent is pytest. This rank's parent is the forkserver.
    train_classification.PARENT_AT_START = os.getppid()
    code = 1
    try:
        module, _, name = target.partition(":")
        imported = importlib.import_module(module)
        sys.argv = [module, *argv]
        getattr(imported, name)(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    # What interpreter exit does, which a multiprocessing child skips: atexit handlers (our DataLoader
    # workers' closing flag, wandb's and TensorBoard's flushes).
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_ranks(argv, nproc=2, target="train_classification:main", timeout=300, env=None, launcher_args=(),
              launcher=True, on_start=None, leftovers=None):
    """Run `target(argv)` in `nproc` forked ranks; returns Ranks when every rank has ended.

    `env`: extra variables; `launcher_args`: the `accelerate launch` options whose environment the ranks
    get (default: accel_configs/cpu_2proc.yaml for several processes, plain for one); `launcher=False`: one
    process as plain `python script` starts it, no launcher's variables. `on_start(pids)`: called once the
    ranks run (e.g. to watch or signal them); it may return a callable, then polled every 0.05 s. `leftovers`: a
    list that gets the processes (psutil) still alive in the ranks' process groups once every rank has ended, left
    running (a killed rank's DataLoader workers, say) for the caller to examine and end; by default they are killed."""
    assert launcher or nproc == 1
    ctx = context()
    port = free_port()
    launched = launcher_environment(nproc, launcher_args) if launcher else {}
    base = {**environment(env), **{k: v for k, v in launched.items() if os.environ.get(k) != v}}
    if env:  # the caller's variables win over the launcher's (e.g. OMP_NUM_THREADS)
        base.update(env)
    logs = Path(tempfile.mkdtemp(prefix="ranks-"))
    processes, paths = [], []
    for rank in range(nproc):
        rank_env = {**base, **(torchrun_environment(rank, nproc, port) if nproc > 1 else {})}
        out, err = logs / f"{rank}.out", logs / f"{rank}.err"
        p = ctx.Process(target=_rank_main, args=(target, [str(a) for a in argv], rank_env, str(out), str(err)))
        p.start()
        processes.append(p)
        paths.append((out, err))
    start = time.monotonic()
    result = Ranks([])
    try:
        poll = on_start([p.pid for p in processes]) if on_start else None
        deadline, tearing, failed_at = start + timeout, None, None
        while any(p.is_alive() for p in processes):
            if poll is not None:
                poll()
            now = time.monotonic()
            if failed_at is None and any(p.exitcode not in (None, 0) for p in processes):
                failed_at = now
            failed = failed_at is not None and now > failed_at + SETTLE_S
            if tearing is None and (failed or now > deadline):
                result.timed_out = now > deadline and not failed
                result.torn_down = [i for i, p in enumerate(processes) if p.is_alive()]
                _signal_groups(processes, signal.SIGTERM)
                tearing = now
            elif tearing is not None and now > tearing + GRACE_S:
                _signal_groups(processes, signal.SIGKILL)
            for p in processes:
                p.join(timeout=0.05)
    finally:
        if leftovers is not None and not result.torn_down:
            leftovers.extend(_in_groups([p.pid for p in processes]))
        else:
            _signal_groups(processes, signal.SIGKILL, alive_only=False)  # leftover workers of any rank
        for p in processes:
            p.join(timeout=30)
        result.seconds = time.monotonic() - start
    for p, (out, err) in zip(processes, paths):
        result.ranks.append(Rank(p.exitcode, out.read_text(errors="replace"), err.read_text(errors="replace")))
        out.unlink()
        err.unlink()
    logs.rmdir()
    return result


def _in_groups(pgids):
    """The live processes whose process group is one of `pgids`."""
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) in pgids and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):
            pass
    return found


def _signal_groups(processes, signum, alive_only=True):
    for p in processes:
        if p.pid is None or (alive_only and not p.is_alive()):
            continue
        try:
            os.killpg(p.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def ranks_ok(argv, nproc=2, **kw):
    """run_ranks, asserting that every rank exited 0."""
    job = run_ranks(argv, nproc=nproc, **kw)
    assert job.returncode == 0, job.report()
    return job


def ranks_killed(argv, when, nproc=1, target="group", leftovers=None):
    """The job in forked ranks, SIGKILLed from `target` of rank 0 at `when` (tests/helpers/signal_at.py; "group":
    the rank's process group, its DataLoader workers too; "alone": the rank alone, as a crash or the OOM killer
    kills it, its workers left stopped); asserts that it failed, returns Ranks. `leftovers`: see run_ranks."""
    job = run_ranks([when, "KILL", target, "0", *argv], nproc=nproc, target="helpers.signal_at:main",
                    leftovers=leftovers)
    assert job.returncode != 0 and not job.timed_out, job.report()
    return job
