"""Training progress: lines every `log_every` optimizer steps and per epoch, metrics.jsonl rows, a bar on a tty."""

import os
import re
import shutil
import sys
import time
from datetime import timedelta

import torch
from tqdm.auto import tqdm

from utils.core.io import append_jsonl


def _eta(seconds):
    return str(timedelta(seconds=round(seconds)))


def elapsed_and_left(elapsed, done, total):
    """"elapsed 0:01:10, ~0:05:50 left": `done` of `total` units of work in `elapsed` seconds, the rest at that pace."""
    left = f", ~{_eta(elapsed / done * (total - done))} left" if done else ""
    return f"elapsed {_eta(elapsed)}{left}"


def watched():
    """Whether a person watches this process on a terminal: stdout is one, and so is stderr (where a bar goes), or
    stderr is a pipe that our parent copies to its own terminal. `accelerate launch` >= 1.16 runs a one-process job
    that way (it tees the script's stderr to keep its tail for its error), so isatty() alone lost the bar there.
    CI logs and files (`> log.txt`, `2> err.txt`) get the plain lines."""
    return sys.stdout.isatty() and (sys.stderr.isatty() or _stderr_copied_to_a_terminal())


_TERMINAL = re.compile(r"/dev/(pts/\d+|tty\w*)")


def _stderr_copied_to_a_terminal():
    """Linux: our stderr is a pipe, our parent holds its other end, and the parent's own stderr is a terminal."""
    try:
        ours = os.readlink("/proc/self/fd/2")
        parent = f"/proc/{os.getppid()}/fd"
        if not ours.startswith("pipe:") or not _TERMINAL.fullmatch(os.readlink(f"{parent}/2")):
            return False
        return any(os.readlink(f"{parent}/{fd}") == ours for fd in os.listdir(parent))
    except OSError:  # no /proc (macOS), or the parent's descriptors are not ours to read
        return False


class StepLogger:
    """Accumulates loss and timings on the device; syncs with the host only every `log_every` steps.

    `loss.item()` at every step would be a CPU-GPU sync point; here the only sync is the one
    all-reduce (and `.tolist()`) per logged line, and one per epoch.
    """

    def __init__(self, accelerator, metrics_path, log_every, steps_per_epoch, total_steps, unit="img"):
        self.accelerator, self.metrics_path = accelerator, metrics_path
        self.log_every, self.steps_per_epoch, self.total_steps = log_every, steps_per_epoch, total_steps
        self.unit = unit  # the console's name of a sample (metrics.jsonl keeps img_per_s for both)
        self.bar = None
        self._reset(epoch=0, first_step=0)

    def _new_window(self):
        # Loss sum on the device (adding to it is no sync); sample count and data time on the host.
        self.loss_sum = torch.zeros((), device=self.accelerator.device)
        self.samples, self.data_time, self.steps = 0, 0.0, 0
        self.window_start = time.perf_counter()

    def start_epoch(self, epoch, first_step):
        if self.accelerator.is_main_process and watched():
            # A piped stderr has no width of its own: the terminal's, as stdout sees it.
            width = {} if sys.stderr.isatty() else {"ncols": shutil.get_terminal_size().columns}
            self.bar = tqdm(total=self.steps_per_epoch, initial=first_step, desc=f"epoch {epoch}", leave=False,
                            dynamic_ncols=sys.stderr.isatty(), **width)
        self._reset(epoch, first_step)

    def _reset(self, epoch, first_step):
        self.epoch, self.step_in_epoch = epoch, first_step
        self.epoch_sums, self.epoch_steps, self.epoch_start = [0.0, 0.0, 0.0], 0, time.perf_counter()
        self._new_window()

    def micro_batch(self, loss, batch_size, data_time):
        self.loss_sum += loss.detach().float() * batch_size
        self.samples += batch_size
        self.data_time += data_time

    def optimizer_step(self, global_step, lr):
        self.step_in_epoch += 1
        self.steps += 1
        self.epoch_steps += 1
        if self.bar is not None:
            self.bar.update(1)
        if global_step % self.log_every:
            return
        row = self._figures(self._reduce_window(), self.window_start)
        rate = self.steps / max(time.perf_counter() - self.window_start, 1e-9)  # steps/s
        self._new_window()  # the next window pays for the writing below: its img/s tells the whole cost
        row.update(step=global_step, epoch=round(global_step / self.steps_per_epoch, 6), lr=lr)
        eta_epoch = min(self.steps_per_epoch - self.step_in_epoch, self.total_steps - global_step) / rate
        eta_run = (self.total_steps - global_step) / rate  # training steps only: validation adds to it
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {row['train_loss']:.4f} lr {lr:.2e} {row['img_per_s']:.0f} {self.unit}/s "
                                     f"({row['img_per_s_per_device']:.0f}/device) data "
                                     f"{100 * row['data_time_frac']:.0f}% run ETA {_eta(eta_run)}")
        self.write({key: row[key] for key in ("step", "epoch", "lr", "train_loss", "img_per_s",
                                              "img_per_s_per_device", "data_time_frac")},
                   f"epoch {row['epoch']:.2f} step {global_step} loss {row['train_loss']:.4f} lr {lr:.5f} "
                   f"{self.unit}/s {row['img_per_s']:.1f} ({row['img_per_s_per_device']:.1f}/device) "
                   f"data {100 * row['data_time_frac']:.0f}% eta epoch {_eta(eta_epoch)} run {_eta(eta_run)}",
                   console=self.bar is None)  # on a terminal the bar shows it

    def end_epoch(self, global_step):
        """The epoch's own line: mean train loss, throughput and data-wait share over all its steps."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._reduce_window()  # the steps since the last line; every rank calls this alike
        self._new_window()
        if not self.epoch_steps:
            return
        row = self._figures(self.epoch_sums, self.epoch_start)
        seconds = time.perf_counter() - self.epoch_start
        self.write({"step": global_step, "epoch": round(global_step / self.steps_per_epoch, 6),
                    "epoch_train_loss": row["train_loss"], "epoch_img_per_s": row["img_per_s"],
                    "epoch_img_per_s_per_device": row["img_per_s_per_device"],
                    "epoch_data_time_frac": row["data_time_frac"], "epoch_time_s": round(seconds, 3)},
                   f"epoch {self.epoch} train: loss {row['train_loss']:.4f}, {row['img_per_s']:.1f} {self.unit}/s "
                   f"({row['img_per_s_per_device']:.1f}/device), data {100 * row['data_time_frac']:.0f}%, "
                   f"{seconds:.1f} s")

    def _reduce_window(self):
        """Global loss sum, sample count and data time of the window, in one collective; added to the epoch's."""
        device = self.loss_sum.device
        totals = self.accelerator.reduce(torch.stack([
            self.loss_sum, torch.tensor(float(self.samples), device=device),
            torch.tensor(self.data_time, device=device)]), "sum").tolist()
        self.epoch_sums = [a + b for a, b in zip(self.epoch_sums, totals)]
        return totals

    def _figures(self, totals, since):
        loss_sum, samples, data_time = totals
        elapsed = max(time.perf_counter() - since, 1e-9)
        processes = self.accelerator.num_processes
        return {"train_loss": loss_sum / max(samples, 1), "img_per_s": samples / elapsed,
                "img_per_s_per_device": samples / elapsed / processes,
                "data_time_frac": data_time / processes / elapsed}  # the mean share over the processes

    def write(self, row, line, console=True):
        """A metrics.jsonl row, the dashboards' copy of it, and a console line, on the main process only."""
        # The dashboards get exactly these numbers (accelerator.log is a no-op without trackers).
        self.accelerator.log({key: value for key, value in row.items() if key != "step"}, step=row["step"])
        if self.accelerator.is_main_process:
            append_jsonl(self.metrics_path, row)
            if not console:
                return
            if self.bar is not None:
                self.bar.write(line)
            else:
                print(line, flush=True)


def start_line(job, train_samples, val_samples, num_workers):
    """What the run trains, on what, where: the line before its first step."""
    settings, accelerator = job.settings, job.accelerator
    if settings.probe.probe:  # no step of training: the frozen model's features, then a vote or a fitted head
        work = f"--probe {settings.probe.probe} on the frozen model's features"
    else:
        work = "--eval_only: scored, not trained" if settings.folder.eval_only else f"{job.steps_per_epoch} steps/epoch"
    return (f"{settings.model.name} on {settings.source_name}: {train_samples or '?'} train / {val_samples} val "
            f"{settings.sample_unit}, {len(job.class_names)} classes{job.task.note}, {accelerator.num_processes} "
            f"process(es) on {accelerator.device.type} ({torch.get_num_threads()} threads, "
            f"{num_workers} workers each), "
            f"{work} -> {job.out}")
