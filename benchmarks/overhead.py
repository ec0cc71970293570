"""Training-step img/s of train_classification.py, launched as the README does, against a raw PyTorch loop.

    python benchmarks/overhead.py                      # resnet18, batch 64, 32x32 synthetic input
    python benchmarks/overhead.py --model resnet50 --image_size 64 --batch_size 32
    python benchmarks/overhead.py --report_to all      # also: the cost of wandb (offline) + TensorBoard
    python benchmarks/overhead.py --channels_last      # eager vs channels-last, on both sides
    python benchmarks/overhead.py --compile            # eager vs torch.compile (inductor, mode default)
    python benchmarks/overhead.py --compile --compile_mode max-autotune-no-cudagraphs --channels_last
    # a quick look (~2.5 min on a busy 2-core CPU):
    python benchmarks/overhead.py --repeats 1 --steps 20 --channels_last

Both sides train the same model on the same input size and batch, with the same optimizer and loss;
the raw loop keeps its input in memory (no data loading at all) and uses torch's default thread
count. The project's figure is read from its metrics.jsonl (the first logged window, which holds
the warm-up, is left out). Prints both rates and their ratio. With --report_to, the project also
runs with those dashboards (wandb offline) at the same --log_every, and the tracking cost is the
drop of its img/s from the run without them.

Switches (--channels_last, --compile [--compile_mode M]): each repeat then runs four configurations,
in this order: raw eager, project eager, raw switched, project switched ("eager" is the default run,
NCHW, no torch.compile; "switched" has every switch given, both together if both are). The raw loop
applies the switch itself (`model.to(memory_format=torch.channels_last)` and a channels-last input
batch; `torch.compile(model, mode=M)`), the project gets the flag. Printed: img/s of each side eager
and switched with the ratio switched/eager, the ratio project/raw of each configuration, and the
warm-up (medians over the repeats). With --report_to too, the tracked runs are eager ones, and the
tracking cost is counted against the eager project.

- raw loop: seconds of its first --log_every steps (the same count as the project's first window),
  from the first forward to the end of the last of them: where torch.compile traces and compiles
  the forward and the backward.
- project, first window: its first metrics.jsonl row covers the same first --log_every steps,
  timed by the script itself from the start of the epoch (the DataLoader's start included); the
  switched-minus-eager difference is what compiling the training step costs in there.
- project, launch wall time: the whole `accelerate launch` from start to exit, eager vs switched.
  The honest total a user pays: it also holds the recompile that validation triggers (the model in
  eval mode is another graph) and, against it, whatever the compiled steps saved, over the
  --steps + --log_every steps of the run.

Every compiled run (raw or project) gets a fresh, empty TorchInductor cache
(TORCHINDUCTOR_CACHE_DIR in a temporary folder), so its warm-up is a cold compile, as on a first
run; with a warm cache a later run of the same model starts much faster. Every subprocess has a
time limit (--timeout_s); one that fails or overruns stops the benchmark with the tail of its log.
"""

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def raw_loop(model_name, image_size, batch_size, steps, warmup_steps, channels_last=False, compile_mode=None,
             device="cpu", precision="no", num_classes=10):
    """(img/s over `steps` timed steps, seconds of the `warmup_steps` before them, device name).

    The input batch is made once and stays on `device`; precision "bf16" runs the forward and the
    loss under torch.autocast (bfloat16), as Accelerate's --mixed_precision bf16 does.
    """
    import torch
    import torchvision

    torch.manual_seed(0)
    device = torch.device(device)
    model = torchvision.models.get_model(model_name, num_classes=num_classes).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    step_model = torch.compile(model, mode=compile_mode) if compile_mode else model
    images = torch.randn(batch_size, 3, image_size, image_size, device=device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(num_classes, (batch_size,), device=device)

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    first = start = time.perf_counter()
    warmup_s, loss = 0.0, None
    for step in range(warmup_steps + steps):
        if step == warmup_steps:
            if loss is not None:
                loss.item()  # the warm-up's work is done
            sync()
            start = time.perf_counter()
            warmup_s = start - first
        with autocast():
            loss = criterion(step_model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    loss.item()
    sync()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return steps * batch_size / (time.perf_counter() - start), warmup_s, name


def run_logged(cmd, log_path, timeout_s, env=None, what=None):
    """Run `cmd` in the repository, its output to `log_path`, in a process group of its own that is
    killed (all of it: a launcher and its ranks) past `timeout_s`. Returns the wall time in seconds;
    raises RuntimeError with the log's tail when it fails or overruns."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    pass
    wall = time.perf_counter() - start
    if code != 0:
        tail = Path(log_path).read_text(errors="replace")[-3000:]
        why = f"timed out after {timeout_s} s" if code is None else f"exit {code}"
        raise RuntimeError(f"{what or ' '.join(map(str, cmd))}: {why}; the end of its output:\n{tail}")
    return wall


def compile_env(folder, compiling, base=None):
    """The environment of a run: with `compiling`, a fresh TorchInductor cache in `folder` (a cold compile)."""
    env = dict(os.environ if base is None else base)
    if compiling:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    return env


def switch_flags(channels_last=False, compile_mode=None):
    """The project's flags for these switches."""
    return (["--channels_last"] if channels_last else []) + \
        (["--compile", "--compile_mode", compile_mode] if compile_mode else [])


def run_raw(script, args_list, timeout_s, compiling, label="raw loop"):
    """A raw loop in its own fresh interpreter (`script --raw ...`, printing JSON), like the project
    runs in its own; returns its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        run_logged([sys.executable, str(script), "--raw", *map(str, args_list)], f"{tmp}/log", timeout_s,
                   env=compile_env(f"{tmp}/inductor", compiling), what=label)
        lines = Path(f"{tmp}/log").read_text().splitlines()
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def project_run(model_name, image_size, batch_size, steps, log_every, launcher, report_to="none",
                channels_last=False, compile_mode=None, timeout_s=1800):
    """(median img/s of the windows after the first, their rates, first window s, launch wall s)."""
    with tempfile.TemporaryDirectory() as tmp:
        samples = (steps + log_every) * batch_size  # one epoch; the first window is warm-up
        cmd = launcher + ["train_classification.py", "--dataset", "synthetic", "--model", model_name,
                          "--image_size", str(image_size), "--batch_size", str(batch_size),
                          "--synthetic_train_samples", str(samples), "--synthetic_val_samples", str(batch_size),
                          "--epochs", "2", "--warmup_epochs", "0", "--max_train_steps", str(steps + log_every),
                          "--log_every", str(log_every), "--output_dir", f"{tmp}/run", "--report_to", report_to,
                          *switch_flags(channels_last, compile_mode)]
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_DATA_DIR": tmp,
               "WANDB_CACHE_DIR": tmp, "WANDB_CONFIG_DIR": tmp}
        wall = run_logged(cmd, f"{tmp}/log", timeout_s, env=compile_env(f"{tmp}/inductor", compile_mode, env),
                          what="train_classification.py")
        rates, first_window_s, _ = project_windows(f"{tmp}/run/metrics.jsonl", batch_size)
        return statistics.median(rates), rates, first_window_s, wall


def project_windows(metrics_path, batch_size):
    """From a run's metrics.jsonl: the img/s of each logged window after the first (the warm-up),
    the first window's seconds, and the median data-wait share of the windows after the first."""
    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines()]
    rows = [r for r in rows if "img_per_s" in r]
    if len(rows) < 2:
        raise RuntimeError(f"{metrics_path}: {len(rows)} logged training window(s), 2 or more needed: "
                           f"--steps must be at least --log_every")
    first = rows[0]
    # per device: this process's batches, whatever the process count (steps 1..step of the first row)
    first_window_s = first["step"] * batch_size / first["img_per_s_per_device"]
    rest = rows[1:]
    return [r["img_per_s"] for r in rest], first_window_s, statistics.median(r["data_time_frac"] for r in rest)


def runs(values, digits=0):
    return ", ".join(f"{v:.{digits}f}" for v in values)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--steps", type=int, default=100, help="timed steps on each side")
    p.add_argument("--log_every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--launcher", default="accelerate launch",
                   help="how the project is started (the README's way: accelerate launch)")
    p.add_argument("--report_to", default="none", choices=("none", "wandb", "tensorboard", "all"),
                   help="also time the project with these dashboards (wandb offline unless WANDB_MODE says)")
    p.add_argument("--channels_last", action="store_true",
                   help="also time both sides in channels-last memory format (model and input)")
    p.add_argument("--compile", action="store_true", help="also time both sides with torch.compile (inductor)")
    p.add_argument("--compile_mode", default="default",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                   help="torch.compile mode, with --compile")
    p.add_argument("--timeout_s", type=int, default=1800, help="time limit of each subprocess (one run of a side)")
    p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)  # --raw, for benchmarks/gpu_throughput.py
    p.add_argument("--precision", default="no", choices=("no", "bf16"), help=argparse.SUPPRESS)
    p.add_argument("--num_classes", type=int, default=10, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    compile_mode = args.compile_mode if args.compile else None
    if args.raw:  # the raw loop runs in its own fresh interpreter, like the project does
        rate, warmup_s, device = raw_loop(args.model, args.image_size, args.batch_size, args.steps, args.log_every,
                                          args.channels_last, compile_mode, args.device, args.precision,
                                          args.num_classes)
        print(json.dumps({"img_per_s": rate, "warmup_s": warmup_s, "device": device}))
        return
    switched = args.channels_last or args.compile
    configs = [dict(channels_last=False, compile_mode=None)]
    if switched:
        configs.append(dict(channels_last=args.channels_last, compile_mode=compile_mode))
    raws = [[] for _ in configs]  # (img/s, warm-up s) per repeat, per configuration
    ours = [[] for _ in configs]  # (img/s, first window s, wall s)
    tracked = []
    # Alternate the sides (and configurations) so that a slow spell of a shared machine hits all alike;
    # report medians.
    try:
        for _ in range(args.repeats):
            for config, raw_runs, our_runs in zip(configs, raws, ours):
                raw = run_raw(__file__, ["--model", args.model, "--image_size", args.image_size,
                                         "--batch_size", args.batch_size, "--steps", args.steps,
                                         "--log_every", args.log_every, *switch_flags(**config)],
                              args.timeout_s, config["compile_mode"])
                raw_runs.append((raw["img_per_s"], raw["warmup_s"]))
                rate, _, first_window_s, wall = project_run(args.model, args.image_size, args.batch_size, args.steps,
                                                            args.log_every, args.launcher.split(),
                                                            timeout_s=args.timeout_s, **config)
                our_runs.append((rate, first_window_s, wall))
            if args.report_to != "none":
                tracked.append(project_run(args.model, args.image_size, args.batch_size, args.steps, args.log_every,
                                           args.launcher.split(), args.report_to, timeout_s=args.timeout_s)[0])
    except RuntimeError as e:
        sys.exit(f"overhead.py: {e}")
    rates = [[r[0] for r in side] for side in raws], [[r[0] for r in side] for side in ours]
    raw, project = statistics.median(rates[0][0]), statistics.median(rates[1][0])
    print(f"{args.model}, batch {args.batch_size}, {args.image_size}x{args.image_size}, {args.steps} timed steps, "
          f"{args.repeats} alternating repeats")
    if not switched:
        print(f"raw PyTorch loop:        {raw:8.1f} img/s  (runs: {runs(rates[0][0])})")
        print(f"train_classification.py: {project:8.1f} img/s  (runs: {runs(rates[1][0])}; "
              f"launched with '{args.launcher}')")
        print(f"ratio: {project / raw:.3f}")
    else:
        print_switched(args, compile_mode, raws, ours)
    if tracked:
        with_trackers = statistics.median(tracked)
        print(f"with --report_to {args.report_to}:    {with_trackers:8.1f} img/s  "
              f"(runs: {', '.join(f'{r:.0f}' for r in tracked)}; log_every {args.log_every})")
        print(f"tracking cost: {100 * (1 - with_trackers / project):.1f} % of step throughput "
              f"(ratio {with_trackers / project:.3f})")


def print_switched(args, compile_mode, raws, ours):
    """The eager vs switched table: img/s, ratios, warm-up (medians over the repeats)."""
    median = statistics.median
    names = " ".join(switch_flags(args.channels_last, compile_mode))
    print(f"eager: NCHW, no torch.compile | switched: {names} (on both sides; launched with '{args.launcher}')")
    rate = {("raw", i): median(r[0] for r in raws[i]) for i in (0, 1)}
    rate.update({("project", i): median(r[0] for r in ours[i]) for i in (0, 1)})
    for side, label, results in (("raw", "raw PyTorch loop:       ", raws),
                                 ("project", "train_classification.py:", ours)):
        print(f"{label} eager {rate[side, 0]:8.1f} img/s | switched {rate[side, 1]:8.1f} img/s | "
              f"switched/eager {rate[side, 1] / rate[side, 0]:.3f}  "
              f"(runs: {runs(r[0] for r in results[0])} | {runs(r[0] for r in results[1])})")
    print(f"project/raw: eager {rate['project', 0] / rate['raw', 0]:.3f} | "
          f"switched {rate['project', 1] / rate['raw', 1]:.3f}")
    warm = [median(r[1] for r in raws[i]) for i in (0, 1)]
    first = [median(r[1] for r in ours[i]) for i in (0, 1)]
    wall = [median(r[2] for r in ours[i]) for i in (0, 1)]
    steps = f"first {args.log_every} steps"
    print(f"warm-up, raw loop, {steps}: eager {warm[0]:.2f} s | switched {warm[1]:.2f} s | "
          f"difference {warm[1] - warm[0]:+.2f} s")
    print(f"warm-up, project, first window ({steps}): eager {first[0]:.2f} s | switched {first[1]:.2f} s | "
          f"difference {first[1] - first[0]:+.2f} s")
    print(f"launch wall time, project ({args.steps + args.log_every} steps, validation, saving): eager "
          f"{wall[0]:.1f} s | switched {wall[1]:.1f} s | difference {wall[1] - wall[0]:+.1f} s")


if __name__ == "__main__":
    main()
