"""In-process training-loop tests' common parts: a tiny dataset, a Job around a Linear model, snapshots.

As in tests/test_accumulation.py, train_one_epoch runs on a hand-built Job. Job's fields and what
train_one_epoch returns may change: adapt make_job and run_epoch here, in one place.
"""

import math

import conftest  # noqa: F401  (puts the repo root on sys.path)
import torch
from torch.utils.data import Dataset

from dataclasses import replace

from train_classification import train_one_epoch
from utils.config.options import parse
from utils.core.preemption import StopRequest
from utils.core.seeding import EpochSeeded
from utils.data.loading.bad_files import BadImages
from utils.data.loading.loaders import build_dataloaders
from utils.data.transforms.batch import BatchInput
from utils.evaluation.tasks import SingleLabel, task_for
from utils.reporting.progress import StepLogger
from utils.run.batch_size import given_batch, with_batch
from utils.run.job import Job
from utils.training.objective import Objective
from utils.training.schedule import build_lr_scheduler, build_optimizer

SAMPLES = 64


class Points(Dataset):
    """64 points in 4-d, 3 classes. `poison` holds (epoch, index) pairs whose features are NaN: a sample comes
    back in every epoch, in another batch, and must be poisoned in one epoch only."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(SAMPLES, 4, generator=g), torch.randint(3, (SAMPLES,), generator=g)
        self.epoch = torch.zeros((), dtype=torch.int64)  # shared with EpochSeeded, which train_one_epoch sets
        self.poison = set()

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        x = torch.full((4,), float("nan")) if (int(self.epoch), i) in self.poison else self.x[i]
        return {"pixel_values": x, "labels": int(self.y[i]), "valid": True, "source": "", "error": "", "index": i}


def run_settings(argv):
    """The Settings of `argv` with its batch plan in force on one process, as build_job would take it."""
    settings = parse(argv)
    return with_batch(settings, given_batch(settings, 1))


def make_job(settings, accelerator, out, dataset, model=None, skip_bad_images=False):
    """A Job for train_one_epoch around `model` (default: a Linear one), SGD (the project's optimizer)
    and its LR schedule, for Settings `settings` (run_settings'). Built here in one place: Job's fields may change."""
    data = EpochSeeded(dataset, dataset.epoch)
    train_loader, _ = build_dataloaders(accelerator, data, data, settings.plan.micro, 0)
    torch.manual_seed(0)
    model = model or torch.nn.Linear(4, 3)
    optimizer = build_optimizer(model, settings.optimizer)
    steps_per_epoch = math.ceil(len(train_loader) / settings.plan.accumulation)
    scheduler = build_lr_scheduler(optimizer, settings.schedule, steps_per_epoch)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    out.mkdir(parents=True, exist_ok=True)
    logger = StepLogger(accelerator, out / "metrics.jsonl", settings.loop.log_every, steps_per_epoch,
                        settings.schedule.epochs * steps_per_epoch)
    return Job(accelerator=accelerator, model=model, optimizer=optimizer, scheduler=scheduler,
               objective=Objective(settings.losses, task_for(False, 3)), train_loader=train_loader, val_loader=None,
               steps_per_epoch=steps_per_epoch, class_names=["a", "b", "c"], out=out,
               logger=logger, bad_images=BadImages(skip=skip_bad_images), stop=StopRequest(), nonfinite_steps=[],
               best_score=[], inputs=BatchInput.for_training(settings.batch, 3, accelerator.process_index,
                                                             settings.input.mean_std),
               task=SingleLabel(None, 3), settings=settings, batch=settings.plan)


def epoch_order(loader, epoch):
    """The sample indices of each micro-batch of `epoch`, in order: the seedable sampler draws them from
    (seed, epoch) alone, so iterating once here gives the order train_one_epoch will see."""
    return [batch["index"].tolist() for batch in loader.batches(epoch)]


def snapshot(job):
    params = {n: p.detach().clone() for n, p in job.model.named_parameters()}
    state = job.optimizer.state_dict()["state"]
    momentum = {k: v["momentum_buffer"].clone() for k, v in state.items() if v.get("momentum_buffer") is not None}
    return params, momentum


def assert_bitwise_equal(a, b):
    assert a.keys() == b.keys() and a
    different = [k for k in a if not torch.equal(a[k], b[k])]  # NaN != NaN: a poisoned value fails too
    assert not different, f"changed: {different}"


def run_epoch(job, epoch, global_step, done_steps=0):
    """train_one_epoch's (global step reached, whether the epoch ran to its end); it may return more."""
    return tuple(train_one_epoch(job, epoch, global_step, done_steps)[:2])


def train_until(job, epoch, global_step, done_steps, stop_at):
    job.settings = replace(job.settings, loop=replace(job.settings.loop, max_train_steps=stop_at))
    return run_epoch(job, epoch, global_step, done_steps)
