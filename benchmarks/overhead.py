"""Training-step img/s of train_classification.py, launched as the README does, against a raw PyTorch loop.

    python benchmarks/overhead.py                      # resnet18, batch 64, 32x32 synthetic input
    python benchmarks/overhead.py --model resnet50 --image_size 64 --batch_size 32
    python benchmarks/overhead.py --report_to all      # also: the cost of wandb (offline) + TensorBoard

Both sides train the same model on the same input size and batch, with the same optimizer and loss;
the raw loop keeps its input in memory (no data loading at all) and uses torch's default thread
count. The project's figure is read from its metrics.jsonl (the first logged window, which holds
the warm-up, is left out). Prints both rates and their ratio. With --report_to, the project also
runs with those dashboards (wandb offline) at the same --log_every, and the tracking cost is the
drop of its img/s from the run without them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def raw_loop(model_name, image_size, batch_size, steps, warmup_steps):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.get_model(model_name, num_classes=10)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    images = torch.randn(batch_size, 3, image_size, image_size)
    labels = torch.randint(10, (batch_size,))
    for step in range(warmup_steps + steps):
        if step == warmup_steps:
            start = time.perf_counter()
        loss = criterion(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    loss.item()
    return steps * batch_size / (time.perf_counter() - start)


def project_run(model_name, image_size, batch_size, steps, log_every, launcher, report_to="none"):
    with tempfile.TemporaryDirectory() as tmp:
        samples = (steps + log_every) * batch_size  # one epoch; the first window is warm-up
        cmd = launcher + ["train_classification.py", "--dataset", "synthetic", "--model", model_name,
                          "--image_size", str(image_size), "--batch_size", str(batch_size),
                          "--synthetic_train_samples", str(samples), "--synthetic_val_samples", str(batch_size),
                          "--epochs", "2", "--warmup_epochs", "0", "--max_train_steps", str(steps + log_every),
                          "--log_every", str(log_every), "--output_dir", f"{tmp}/run", "--report_to", report_to]
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_DATA_DIR": tmp,
               "WANDB_CACHE_DIR": tmp, "WANDB_CONFIG_DIR": tmp}
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        rows = [json.loads(line) for line in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
        rates = [r["img_per_s"] for r in rows if "img_per_s" in r][1:]
        return statistics.median(rates), rates


def main():
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
    p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.raw:  # the raw loop runs in its own fresh interpreter, like the project does
        print(raw_loop(args.model, args.image_size, args.batch_size, args.steps, args.log_every))
        return
    raws, ours, tracked = [], [], []
    # Alternate the two so that a slow spell of a shared machine hits both alike; report medians.
    for _ in range(args.repeats):
        raws.append(float(subprocess.run(
            [sys.executable, __file__, "--raw", "--model", args.model, "--image_size", str(args.image_size),
             "--batch_size", str(args.batch_size), "--steps", str(args.steps), "--log_every", str(args.log_every)],
            check=True, capture_output=True, text=True).stdout))
        ours.append(project_run(args.model, args.image_size, args.batch_size, args.steps, args.log_every,
                                args.launcher.split())[0])
        if args.report_to != "none":
            tracked.append(project_run(args.model, args.image_size, args.batch_size, args.steps, args.log_every,
                                       args.launcher.split(), args.report_to)[0])
    raw, project = statistics.median(raws), statistics.median(ours)
    print(f"{args.model}, batch {args.batch_size}, {args.image_size}x{args.image_size}, {args.steps} timed steps, "
          f"{args.repeats} alternating repeats")
    print(f"raw PyTorch loop:        {raw:8.1f} img/s  (runs: {', '.join(f'{r:.0f}' for r in raws)})")
    print(f"train_classification.py: {project:8.1f} img/s  (runs: {', '.join(f'{r:.0f}' for r in ours)}; "
          f"launched with '{args.launcher}')")
    print(f"ratio: {project / raw:.3f}")
    if tracked:
        with_trackers = statistics.median(tracked)
        print(f"with --report_to {args.report_to}:    {with_trackers:8.1f} img/s  "
              f"(runs: {', '.join(f'{r:.0f}' for r in tracked)}; log_every {args.log_every})")
        print(f"tracking cost: {100 * (1 - with_trackers / project):.1f} % of step throughput "
              f"(ratio {with_trackers / project:.3f})")


if __name__ == "__main__":
    main()
