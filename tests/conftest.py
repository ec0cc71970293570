"""Helpers to launch the real script (or a helper) under Accelerate with 1 or 2 CPU processes."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Runs in this process (main() in-process) and in forked ranks see what launched ones get from environment():
# no network (read by huggingface_hub at import, hence here, first), offline dashboards.
os.environ.update(HF_HUB_OFFLINE="1", WANDB_MODE="offline", PYTHONUNBUFFERED="1")
# The cores this process may use (utils/core/threads.py says so too, but imports torch, which must come after).
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
# pytest-xdist workers (pyproject.toml: -n auto) share the cores out: each worker, and every run it starts
# (in-process, forked, launched: the script keeps an OMP_NUM_THREADS it is given), gets its part of them.
# Two workers of two OpenMP threads each on 2 cores ran the suite in 22 min here; of one thread, in 11.
# Set before torch is imported, which reads it once. An OMP_NUM_THREADS of the caller's wins.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


def _warm_matplotlib():
    """A run draws its pictures in a child it forks (utils/reporting/drawing.py): runs in this process (main()
    in-process) hand theirs matplotlib imported and its fonts read, as the forked ranks' forkserver does
    (helpers/warm.py), rather than each child importing and reading them afresh."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 2), layout="constrained")
    figure.subplots().set(title="warm", xlabel="x")
    FigureCanvasAgg(figure).draw()


_warm_matplotlib()

# The model of the runs whose subject is the machinery around a model (resuming, preemption, launchers,
# cross-validation): timm's test_resnet, a ResNet with BatchNorm and zero-initialised last blocks,
# 0.5 M parameters. A tiny run's time follows the model's parameters far more than its pixels (optimizer
# step, gradient all-reduce, a checkpoint every step): 27 steps at 32 px take 0.38 s against resnet18's
# 2.21 s. It learns (the digits at 16 px: top-1 0.997 after 10 epochs, resnet18 0.992), and its
# validation stays sane where torchvision's small BatchNorm models blow up after 15 steps
# (shufflenet_v2_x0_5: val loss 6e27), which would make figures compared between runs tell nothing.
# Tests about resnet18 itself say --model resnet18.
SMALL_MODEL = "timm/test_resnet.r160_in1k"

# A small, fast job: synthetic 16x16 images, SMALL_MODEL, no network; no pictures (drawing them is ~0.7 s of a tiny
# run's 0.9 s: the tests about a picture, or about the child that draws it, leave --no_plots out).
TINY = ["--model", SMALL_MODEL, "--dataset", "synthetic", "--image_size", "16", "--num_classes", "7",
        "--batch_size", "8", "--synthetic_train_samples", "64", "--synthetic_val_samples", "37", "--num_workers", "0",
        "--no_plots"]


def drawn(argv):
    """`argv` with its pictures drawn (TINY's --no_plots left out): for the tests of the pictures themselves."""
    return [a for a in argv if a != "--no_plots"]


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): a worker per core, at most 4. Much of the suite waits on start-up, launchers and
    signals rather than computing, so two workers on 2 cores overlap it; more than 4 is untried."""
    return max(1, min(4, CORES))


# The longest tests (seconds in a fresh clone, 2026-12-05, raw resnet18 loop ~520 img/s, torch.compile's cache cold):
# started first, dealt in turn to the two xdist workers, so that neither is left running one of them alone at the end
# of the suite while the other waits. (test_layers.py checks that each still names a test.)
LONG_FIRST = ["tests/test_train.py::test_default_job_reaches_99_percent",  # 110
              # the shared cross-validation (40 on 2026-12-06; its kill test, 31, waits for it: left to the rest)
              "tests/test_crossval.py::test_the_out_of_fold_file_holds_every_sample_once_with_its_fold_runs_"
              "probabilities",
              "tests/test_recipes.py::test_channels_last_and_compile_train_the_same_arithmetic",  # 70
              "tests/test_tune.py::test_a_study_stopped_by_sigterm_then_sigkilled_finishes_each_interrupted_trial_"
              "bitwise",  # 65
              "tests/test_tune.py::test_a_pruned_trial_saves_on_both_ranks_and_best_yaml_trains_the_best_trial_again_"
              "bitwise",  # 47
              "tests/test_many_machines.py::test_the_slurm_script_trains_on_two_nodes_and_requeues_itself_on_sigterm",
              "tests/test_video_train.py::test_moving_digits_needs_time_a_frame_model_cannot_tell_the_direction",  # 44
              "tests/test_multispectral.py::test_the_spectral_digits_are_learnt_from_the_bands_beyond_rgb",  # 41
              "tests/test_train.py::test_a_three_epoch_run_of_the_default_job_is_already_good",  # 35
              "tests/test_many_machines.py::test_torchrun_restarts_a_killed_worker_and_the_run_ends_bitwise_equal",
              "tests/test_benchmarks.py::test_video_throughput_benchmark_runs_tiny",  # 29
              "tests/test_benchmarks.py::test_gpu_throughput_benchmark_stops_without_a_gpu_and_runs_tiny_on_the_cpu_"
              "with_allow_cpu",  # 27
              # 2026-12-07 (raw loop ~210 img/s): benchmarks, which share no fixture with the tests beside them
              "tests/test_benchmarks.py::test_lr_find_benchmark_trains_at_the_suggestion_and_the_recipes_lr",  # 35
              "tests/test_benchmarks.py::test_export_formats_benchmark_trains_once_and_prints_a_row_a_format",  # 32
              "tests/test_benchmarks.py::test_overhead_benchmark_runs_tiny_and_prints_its_ratio_and_tracking_cost",
              "tests/test_benchmarks.py::test_audit_benchmark_finds_what_it_injected_and_times_the_index"]  # 17


def pytest_collection_modifyitems(config, items):
    """LONG_FIRST at the head of each of the two halves that pytest-xdist's work stealing first deals to two
    workers (a contiguous half each); other tests keep their order."""
    rank = {nodeid: i for i, nodeid in enumerate(LONG_FIRST)}
    long = sorted((item for item in items if item.nodeid in rank), key=lambda item: rank[item.nodeid])
    if len(long) < 2:
        return
    rest = [item for item in items if item.nodeid not in rank]
    first, second = long[0::2], long[1::2]
    cut = max(0, len(items) // 2 - len(first))
    items[:] = first + rest[:cut] + second + rest[cut:]


def free_port():
    """A port no test run of this session has been given, free now.

    Ports come from a range of their own per pytest process, in turn, each checked free: two
    launches never receive the same port, which asking the OS for port 0 twice does not promise
    (a port released by the check can be handed out again before its launcher binds it).
    """
    while True:
        port = next(_ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


# A range of its own for each pytest-xdist worker (gw0, gw1, ...), then per process.
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
_ports = iter(range(20000 + _worker * 9000 + (os.getpid() % 80) * 100, 65000))


# torchelastic (under `accelerate launch` of several processes, and torchrun) looks at its workers every 5 s
# by default: a job whose ranks have ended waits up to that long before the launcher returns.
MONITOR_INTERVAL = "0.1"


def command(args, nproc=1, script="train_classification.py", launcher_args=(), torchrun=False, launcher=True):
    """`script args` under `accelerate launch` (or torchrun, or plain python) with `nproc` CPU processes."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launcher_args]
    if not launcher:
        assert nproc == 1
        cmd = [sys.executable]
    elif torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(free_port()), "--monitor-interval", MONITOR_INTERVAL]
    elif nproc > 1:
        cmd += ["--config_file", str(ROOT / "accel_configs" / "cpu_2proc.yaml"), "--num_processes", str(nproc),
                "--main_process_port", str(free_port()), "--monitor_interval", MONITOR_INTERVAL]
    return cmd + [str(ROOT / script), *map(str, args)]


def environment(env=None):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1", **(env or {})}


def launch(args, nproc=1, timeout=300, env=None, **kw):
    """Run `script args` under `accelerate launch` (or torchrun) with `nproc` CPU processes.

    Its own session, as a job manager starts it: a signal to its process group never reaches pytest.
    (It reaches a one-process launch's rank and workers too; torchrun puts each rank in a session of its own.)
    """
    return subprocess.run(command(args, nproc, **kw), cwd=ROOT, env=environment(env), capture_output=True,
                          text=True, timeout=timeout, start_new_session=True)


def run_ok(args, nproc=1, **kw):
    proc = launch(args, nproc=nproc, **kw)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def run_main(args):
    """The script in this process, as a 1-process launch runs it: its results. For runs whose launcher adds
    nothing to what the test checks (it costs seconds of start-up each); Accelerate's singletons reset after."""
    import train_classification

    try:
        return train_classification.main([str(a) for a in args])
    finally:
        reset_accelerate_state()


def main_fails(args, capsys):
    """run_main for a run that must stop: (its exit code, what it wrote to stderr)."""
    with pytest.raises(SystemExit) as stopped:
        run_main(args)
    return stopped.value.code, capsys.readouterr().err


def parse_fails(argv, capsys):
    """The options' parse of `argv`, which must stop: (its exit code, the lines it wrote to stderr)."""
    from utils.config.options import parse_args

    with pytest.raises(SystemExit) as stopped:
        parse_args([str(a) for a in argv])
    return stopped.value.code, capsys.readouterr().err.strip().splitlines()


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def read_json(path):
    return json.loads(Path(path).read_text())


KINDS = [(".png", "RGB"), (".jpg", "L"), (".png", "RGBA"), (".jpg", "RGB")]  # grayscale and RGBA too


def make_folder(root, counts, size=(24, 20), noise=0):
    """root/<class>/<i>.<ext>: small PNG and JPEG files, one colour per class; with noise > 0, each pixel
    moves by up to that much (seeded), so that crops are not uniform and BatchNorm sees a spread."""
    import numpy as np

    colors = {"cat": (200, 40, 40), "dog": (40, 200, 40), "eel": (40, 40, 200)}
    rng = np.random.default_rng(0)
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            ext, mode = KINDS[i % len(KINDS)]
            pixels = np.array(colors[name], np.int16) + rng.integers(-noise, noise + 1, (size[1], size[0], 3))
            image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8)) if noise else Image.new("RGB", size,
                                                                                                  colors[name])
            image.convert(mode).save(root / name / f"{i}{ext}")
    return root


@pytest.fixture
def fresh_accelerate_state():
    """Let a test call main() in-process more than once: Accelerate keeps singletons per process."""
    yield
    reset_accelerate_state()


def reset_accelerate_state():
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()
    GradientState._reset_state()


# The run that the exact-resume and preemption tests interrupt: random augmentation on
# (RandomResizedCrop + flip), fractional warmup, cosine. 36 images, batch 4: 9 steps an epoch on one
# process, 5 on each of two. The model: SMALL_MODEL.


@pytest.fixture(scope="session")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_folder(root / "tr", {"cat": 12, "dog": 12, "eel": 12})
    make_folder(root / "va", {"cat": 2, "dog": 2, "eel": 3})
    return root


def resume_job(images, out, workers, *extra):
    return ["--model", SMALL_MODEL, "--train_dir", images / "tr", "--val_dir", images / "va", "--image_size", "32",
            "--batch_size", "4",
            "--epochs", "3", "--warmup_epochs", "0.5", "--log_every", "1", "--num_workers", workers, "--no_plots",
            "--output_dir", out, *extra]


@pytest.fixture(scope="session")
def reference(images, tmp_path_factory):
    """Uninterrupted runs of resume_job, one per world size (workers 0: the count must not matter), in forked
    ranks (tests/ranks.py) as an `accelerate launch` of 1 or 2 processes would run them."""
    from ranks import ranks_ok

    runs = {}
    for nproc in (1, 2):
        out = tmp_path_factory.mktemp(f"reference{nproc}") / "run"
        ranks_ok(resume_job(images, out, 0), nproc=nproc)
        runs[nproc] = out
    return runs


def assert_same_weights(a, b):
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def snapshot(root, skip=()):
    """Every file and folder under root with its size and mtime (ns): any write shows. `skip`: names
    left out, e.g. a run folder's .lock, which every run that starts there rewrites with its pid."""
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size if p.is_file() else None, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.name not in skip}


def resumed_from(stdout):
    """The checkpoint a run said it resumed from (None: it did not resume)."""
    found = re.findall(r"^resumed from (\S+): epoch", stdout, flags=re.M)
    assert len(found) <= 1
    return Path(found[0]) if found else None


def make_video(path, frames=12, height=24, width=32, label=0, codec="libx264"):
    """A small video whose frame t is uniformly grey at level 8 * t (its index readable after lossy
    coding), with a bright bar moving right (label 0) or left (label 1)."""
    import numpy as np

    from utils.data.decoding.video import write_video

    data = np.zeros((frames, height, width, 3), np.uint8)
    for t in range(frames):
        data[t] = 8 * t
        x = (2 * t) % (width - 4) if label == 0 else width - 4 - (2 * t) % (width - 4)
        data[t, :, x:x + 4] = 250
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(path, data, codec=codec)
    return path


@pytest.fixture(scope="session")
def videos(tmp_path_factory):
    """tr/<class>/<i>.mp4 (2 classes x 4) and va/<class>/<i>.mp4 (3 + 2: an odd count), 12 frames of 24x32."""
    root = tmp_path_factory.mktemp("videos")
    for split, counts in (("tr", (4, 4)), ("va", (3, 2))):
        for label, (name, n) in enumerate(zip(("left", "right"), counts)):
            for i in range(n):
                make_video(root / split / name / f"{i}.mp4", frames=10 + i, label=1 - label)
    return root


def cache_hub_dataset(cache_dir, name, splits):
    """What `load_dataset(name)` leaves in HF_DATASETS_CACHE after one online download of a repo of parquet
    files (the Hub's form, media bytes embedded), its splits the Datasets of `splits`."""
    import hashlib

    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.parquet.parquet import Parquet

    files = {}
    for split, ds in splits.items():
        files[split] = str(cache_dir.parent / f"{split}.parquet")
        ds.to_parquet(files[split])
    owner, short = name.split("/")
    out = cache_dir / f"{owner}___{camelcase_to_snakecase(short)}" / "default" / "0.0.0" / \
        hashlib.sha1(name.encode()).hexdigest()
    features = next(iter(splits.values())).features
    Parquet(cache_dir=str(cache_dir), dataset_name=short, config_name="default", config_id="default",
            data_files=files, features=features).download_and_prepare(output_dir=str(out))


def offline_env(tmp_path):
    """HF_* variables for an empty local cache under tmp_path, Hub offline."""
    home = tmp_path / "hf_home"
    return {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "datasets"),
            "HF_HUB_OFFLINE": "1"}


def runs_in_one_process(runs, env, tmp_path, timeout=300):
    """Each argv of `runs` through train_classification.main, in one fresh interpreter with `env` (for what is
    read at import: tests/helpers/in_one_process.py); returns [{"code", "stdout", "stderr"}] in order."""
    out = tmp_path / "in_one_process.json"
    argv = [str(out)] + [a for run in runs for a in ("--", *map(str, run))]
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "in_one_process.py"), *argv], cwd=ROOT,
                          env=environment(env), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())

