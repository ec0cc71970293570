"""Where a test's time goes: runs of the script (launched, forked or in-process), their training loops, the rest.

    python -m pytest -p tests.helpers.suite_timing --suite-timing timing.jsonl   # a JSON line per test
    python tests/helpers/suite_timing.py timing.jsonl [--top 40]                 # the slowest, as a table

(With pytest-xdist each worker writes its own file, timing.jsonl.gw0, .gw1, ...; the table reads them all.)

For each test: its wall time (setup, call and teardown, as --durations counts them); how many runs of the
script or a helper it started and their wall time, by kind: subprocesses (a launcher or plain python),
forked ranks (tests/ranks.py), main() in this process; the training-loop seconds those runs reported
(results.json train_time_s of the run folders in the temporary folders made during the test, its fixtures'
included); the remainder is the test's own
work: building inputs, reading outputs, asserting. Start-up is a run's wall time minus its training loop
(imports, launcher, data and model building, validation, the report).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--suite-timing", default=None, help="write where each test's time goes to this JSONL file")


class _Clock:
    def __init__(self):
        self.runs = {"subprocess": [0, 0.0], "forked": [0, 0.0], "in_process": [0, 0.0]}
        self.depth = 0

    def timed(self, kind, function):
        def wrapper(*args, **kwargs):
            if self.depth:  # a run inside a run (a launcher's own subprocess): counted once, outside
                return function(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                self.runs[kind][0] += 1
                self.runs[kind][1] += time.perf_counter() - start
        return wrapper


_clock = _Clock()
_popen_wait = subprocess.Popen.wait


def _timed_popen_init(original):
    def init(self, *args, **kwargs):
        self._suite_timing_start = time.perf_counter()
        original(self, *args, **kwargs)
    return init


def _timed_wait(self, *args, **kwargs):
    code = _popen_wait(self, *args, **kwargs)
    if not getattr(self, "_suite_timing_counted", False) and hasattr(self, "_suite_timing_start"):
        self._suite_timing_counted = True
        _clock.runs["subprocess"][0] += 1
        _clock.runs["subprocess"][1] += time.perf_counter() - self._suite_timing_start
    return code


def pytest_configure(config):
    path = config.getoption("--suite-timing")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # pytest-xdist: a file per worker, read together by table()
    if worker is None and config.pluginmanager.hasplugin("dsession"):
        return  # the xdist controller runs no test
    config._suite_timing = Path(f"{path}.{worker}" if worker else path).open("w")
    subprocess.Popen.__init__ = _timed_popen_init(subprocess.Popen.__init__)
    subprocess.Popen.wait = _timed_wait
    try:
        import train_classification

        train_classification.main = _clock.timed("in_process", train_classification.main)
    except ImportError:
        pass
    try:
        import ranks

        ranks.run_ranks = _clock.timed("forked", ranks.run_ranks)
    except ImportError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = getattr(item.config, "_suite_timing", None)
    if out is None:
        yield
        return
    for counts in _clock.runs.values():
        counts[:] = [0, 0.0]
    base = item.config._tmp_path_factory.getbasetemp()
    item._suite_timing = (base, set(base.iterdir()), time.time(), 0.0)
    start = time.perf_counter()
    yield
    total = time.perf_counter() - start
    trained = item._suite_timing[3]
    runs = {kind: {"n": n, "s": round(s, 2)} for kind, (n, s) in _clock.runs.items()}
    out.write(json.dumps({"test": item.nodeid, "total_s": round(total, 2), "runs": runs,
                          "train_s": round(trained, 2), "slow": item.get_closest_marker("slow") is not None}) + "\n")
    out.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Reads the training seconds before the fixtures are torn down: a passing test's tmp_path is removed then
    (pyproject.toml's tmp_path_retention_policy)."""
    if getattr(item, "_suite_timing", None) is not None:
        base, before, start_wall, _ = item._suite_timing
        item._suite_timing = (base, before, start_wall, _trained(base, before, start_wall))
    yield


def _trained(base, before, start_wall):
    """The train_time_s of the results.json files written since start_wall in the folders made since `before`."""
    trained = 0.0
    for folder in set(base.iterdir()) - before:  # the folders this test (or a fixture it set up) made
        if folder.is_symlink():  # pytest's <name>current links to the newest numbered folder
            continue
        for results in folder.rglob("results.json"):
            try:
                if results.stat().st_mtime >= start_wall:
                    trained += float(json.loads(results.read_text()).get("train_time_s", 0.0))
            except (OSError, ValueError):
                pass
    return trained


def table(path, top=40):
    workers = sorted(Path(path).parent.glob(f"{Path(path).name}.gw*"))  # pytest-xdist: one file per worker
    files = workers or [Path(path)]
    per_file = {f: [json.loads(line) for line in f.read_text().splitlines()] for f in files}
    rows = sorted((r for f in files for r in per_file[f]), key=lambda r: -r["total_s"])
    total = sum(r["total_s"] for r in rows)
    busy = ", ".join(f"{f.suffix[1:]} {sum(r['total_s'] for r in per_file[f]):.0f} s" for f in workers)
    print(f"{len(rows)} tests, {total:.0f} s in all{f' ({busy})' if busy else ''}; the {min(top, len(rows))} slowest:")
    print("| test | total s | runs: subprocess / forked / in-process (n, s) | training s | start-up s | own s |")
    print("|---|---|---|---|---|---|")
    for r in rows[:top]:
        runs = r["runs"]
        run_s = sum(v["s"] for v in runs.values())
        kinds = " / ".join(f"{v['n']}, {v['s']:.0f}" if v["n"] else "-" for v in runs.values())
        print(f"| `{r['test'].split('::', 1)[1]}` ({r['test'].split('::')[0].split('/')[-1]}) | {r['total_s']:.1f} | "
              f"{kinds} | {r['train_s']:.1f} | {max(run_s - r['train_s'], 0):.1f} | "
              f"{max(r['total_s'] - run_s, 0):.1f} |")


if __name__ == "__main__":
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    table(sys.argv[1], top)
