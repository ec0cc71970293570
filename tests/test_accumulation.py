"""Gradient accumulation: every optimizer step uses the mean gradient of its own samples, short last group too."""

import conftest  # noqa: F401  (puts the repo root on sys.path)
import pytest
import torch
from torch.utils.data import Dataset

from train_classification import train_one_epoch
from loop_harness import run_settings
from utils.core.preemption import StopRequest
from utils.core.seeding import EpochSeeded
from utils.data.loading.bad_files import BadImages
from utils.data.loading.loaders import build_dataloaders
from utils.data.transforms.batch import BatchInput
from utils.reporting.progress import StepLogger
from utils.run.accelerator import build_accelerator
from utils.run.job import Job
from utils.evaluation.tasks import task_for
from utils.training.objective import Objective
from utils.training.schedule import build_lr_scheduler


class Points(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64, 4, generator=g), torch.randint(3, (64,), generator=g)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"pixel_values": self.x[i], "labels": int(self.y[i]), "valid": True, "source": "", "error": ""}


def test_short_last_group_gets_its_full_weight(tmp_path, fresh_accelerate_state):
    # 64 samples, batch 8 -> 8 micro-batches; accumulation 3 -> groups of 3, 3 and a short 2.
    settings = run_settings(["--batch_size", "8", "--grad_accum_steps", "3", "--lr", "0.5", "--min_lr", "0.5",
                       "--warmup_epochs", "0", "--momentum", "0", "--weight_decay", "0", "--label_smoothing", "0",
                       "--epochs", "1", "--num_workers", "0"])
    accelerator = build_accelerator(settings)
    data = EpochSeeded(Points(), torch.zeros((), dtype=torch.int64))
    train_loader, _ = build_dataloaders(accelerator, data, data, settings.plan.micro, 0)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.optimizer.lr)
    scheduler = build_lr_scheduler(optimizer, settings.schedule, steps_per_epoch=3)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    logger = StepLogger(accelerator, tmp_path / "metrics.jsonl", log_every=100, steps_per_epoch=3, total_steps=3)
    job = Job(accelerator, model, optimizer, scheduler, Objective(settings.losses, task_for(False, 3)),
              train_loader, None, 3, ["a", "b", "c"], tmp_path, logger, BadImages(skip=False),
              StopRequest(), [], [], settings=settings,
              inputs=BatchInput.for_training(settings.batch, 3, 0, settings.input.mean_std))
    assert train_one_epoch(job, 0, 0) == (3, True, False)  # 3 optimizer steps, to the epoch's end, no stop

    # By hand: the same batches (epoch 0 again: the order is a function of seed and epoch), one SGD
    # step per group with the mean gradient over that group's samples.
    inputs = [(b["pixel_values"], b["labels"]) for b in train_loader.batches(0)]
    for group in (inputs[0:3], inputs[3:6], inputs[6:8]):
        x = torch.cat([g[0] for g in group])
        y = torch.cat([g[1] for g in group])
        reference.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.5 * p.grad
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_bounds_the_step_of_the_loop(tmp_path, fresh_accelerate_state):
    """--clip_grad_norm C, read by the loop from its typed options: one SGD step at LR 0.5 over the whole set (one
    batch) moves the weights by exactly 0.5 x C when the gradient's norm is above C, and by more without it."""
    from loop_harness import Points, make_job, run_epoch

    def moved(*extra):
        settings = run_settings(["--batch_size", "64", "--lr", "0.5", "--min_lr", "0.5", "--warmup_epochs", "0",
                                 "--momentum", "0", "--weight_decay", "0", "--label_smoothing", "0", "--epochs", "1",
                                 "--num_workers", "0", *extra])
        job = make_job(settings, build_accelerator(settings), tmp_path / "_".join(extra or ("plain",)), Points())
        before = [p.detach().clone() for p in job.model.parameters()]
        assert run_epoch(job, 0, 0) == (1, True)
        return torch.cat([(p.detach() - b).flatten() for p, b in zip(job.model.parameters(), before)]).norm().item()

    assert moved("--clip_grad_norm", "0.001") == pytest.approx(0.5 * 0.001, rel=1e-4)
    assert moved() > 10 * 0.5 * 0.001  # the gradient's own norm is far above the ceiling
