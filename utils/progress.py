"""Training progress: a line every `log_every` optimizer steps, metrics.jsonl rows, an optional bar."""

import sys
import time

import torch
from tqdm.auto import tqdm

from utils.io import append_jsonl


class StepLogger:
    """Accumulates loss and timings on the device; syncs with the host only every `log_every` steps.

    `loss.item()` at every step would be a CPU-GPU sync point; here the only sync is the one
    all-reduce (and `.tolist()`) per logged line.
    """

    def __init__(self, accelerator, metrics_path, log_every, steps_per_epoch):
        self.accelerator, self.metrics_path = accelerator, metrics_path
        self.log_every, self.steps_per_epoch = log_every, steps_per_epoch
        self.bar = None
        self._reset()

    def _reset(self):
        self.loss_sum = torch.zeros((), device=self.accelerator.device)
        self.samples = 0
        self.data_time = 0.0
        self.window_start = time.perf_counter()

    def start_epoch(self, epoch, first_step):
        # A bar only on a terminal; CI logs and files get the plain lines.
        if self.accelerator.is_main_process and sys.stderr.isatty():
            self.bar = tqdm(total=self.steps_per_epoch, initial=first_step, desc=f"epoch {epoch}", leave=False)
        self._reset()

    def micro_batch(self, loss, batch_size, data_time):
        self.loss_sum += loss.detach().float() * batch_size
        self.samples += batch_size
        self.data_time += data_time

    def optimizer_step(self, global_step, lr):
        if self.bar is not None:
            self.bar.update(1)
        if global_step % self.log_every:
            return
        # One collective for the whole line: global loss sum and global sample count.
        totals = self.accelerator.reduce(
            torch.stack([self.loss_sum, torch.tensor(float(self.samples), device=self.loss_sum.device)]), "sum")
        loss_sum, samples = totals.tolist()
        elapsed = time.perf_counter() - self.window_start
        row = {"step": global_step, "epoch": round(global_step / self.steps_per_epoch, 6), "lr": lr,
               "train_loss": loss_sum / max(samples, 1), "img_per_s": samples / elapsed,
               "data_time_frac": self.data_time / elapsed}
        self.write(row, f"epoch {row['epoch']:.2f} step {global_step} loss {row['train_loss']:.4f} "
                        f"lr {lr:.5f} img/s {row['img_per_s']:.1f} data {100 * row['data_time_frac']:.0f}%")
        self._reset()

    def end_epoch(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def write(self, row, line):
        """A metrics.jsonl row and a console line, on the main process only."""
        # The dashboards get exactly these numbers (accelerator.log is a no-op without trackers).
        self.accelerator.log({key: value for key, value in row.items() if key != "step"}, step=row["step"])
        if self.accelerator.is_main_process:
            append_jsonl(self.metrics_path, row)
            if self.bar is not None:
                self.bar.write(line)
            else:
                print(line, flush=True)
