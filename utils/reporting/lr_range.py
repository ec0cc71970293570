"""What the learning-rate range test shows (utils/training/lr_range.py): each step's loss as the run's progress logger
reduces it over every process, kept instead of written to metrics.jsonl; lr_find.csv and lr_find.png with the
suggestions marked."""

import csv
import io
import time

from utils.core.io import write_json_atomic, write_text_atomic
from utils.reporting.plots import save
from utils.reporting.progress import StepLogger, elapsed_and_left
from utils.training.lr_range import Curve, sweep_lr


class SweepLogger(StepLogger):
    """The training loop's logger during the sweep: every step's loss, the mean over every sample of every process
    (StepLogger's reduction), into a Curve at the LR that step trained with; nothing written; a line every tenth of
    the sweep (where it is, its loss, elapsed and left), as training's own lines come every --log_every steps."""

    LINES = 10  # a sweep of N steps says where it is every N / 10

    def __init__(self, accelerator, low, high, steps, steps_per_epoch):
        super().__init__(accelerator, None, 1, steps_per_epoch, steps)
        self.low, self.high, self.sweep_steps = low, high, steps
        self.curve = Curve(steps)
        self.started = time.perf_counter()

    def optimizer_step(self, global_step, lr):
        self.steps += 1
        train_loss = self._figures(self._reduce_window(), self.window_start)["train_loss"]
        self._new_window()
        # `lr` is the scheduler's after its step: the next step's; this one trained at the sweep's step before
        swept = sweep_lr(self.low, self.high, self.sweep_steps, global_step - 1)
        self.curve.add(swept, train_loss)
        if global_step % max(1, self.sweep_steps // self.LINES) == 0 and global_step < self.sweep_steps:
            self.accelerator.print(
                f"lr_find: step {global_step} of {self.sweep_steps} at lr {swept:.3g}: loss "
                f"{train_loss:.4f} (smoothed {self.curve.smoothed[-1]:.4f}); "
                f"{elapsed_and_left(time.perf_counter() - self.started, global_step, self.sweep_steps)}")

    def start_epoch(self, epoch, first_step):
        self._reset(epoch, first_step)

    def end_epoch(self, global_step):
        self._reduce_window()  # every process alike, as the loop expects
        self._new_window()


def write_lr_find(out, curve, suggestions, why, stopped, plots=True):
    """lr_find.csv (lr, loss, smoothed loss a step), lr_find.json (the suggestions, or why the curve holds none: for a
    script) and, with `plots`, lr_find.png: the smoothed loss against the LR (log scale), the raw losses faint, the
    suggestions marked; `stopped`: why the sweep ended, in the title."""
    write_json_atomic(out / "lr_find.json", {"steps": len(curve.lrs), "stopped": stopped, "suggestions": suggestions,
                                              "no_suggestion": why})
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["step", "lr", "loss", "smoothed_loss"])
    for step, row in enumerate(zip(curve.lrs, curve.losses, curve.smoothed)):
        writer.writerow([step, *(f"{value:.6g}" for value in row)])
    write_text_atomic(out / "lr_find.csv", text.getvalue())
    if not plots:
        return

    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(curve.lrs, curve.losses, color="tab:blue", alpha=0.25, label="loss")
    ax.plot(curve.lrs, curve.smoothed, color="tab:blue", label="smoothed")
    for (name, lr), color in zip((suggestions or {}).items(), ("tab:red", "tab:green", "tab:orange")):
        ax.axvline(lr, color=color, linestyle="--", label=f"{name} {lr:g}")
    finite = [v for v in curve.smoothed if v == v]
    if finite:  # the divergence's last values would squash the curve
        ax.set_ylim(min(finite) * 0.95, min(max(finite), 4 * min(finite)) * 1.05)
    ax.set(xscale="log", xlabel="learning rate", ylabel="training loss (mean over every process)",
           title=f"LR range test: {len(curve.lrs)} steps, {stopped.split(' (')[0]}")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save(fig, out / "lr_find.png")
