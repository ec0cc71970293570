"""Skipped (undecodable) images stay out of training: out of the loss, out of BatchNorm's statistics,
and a step with none to learn from makes no update."""

import copy

import pytest
import torch
from loop_harness import make_job, run_settings
from torch.utils.data import Dataset

from train_classification import train_one_epoch
from utils.run.accelerator import build_accelerator


class HalfBroken(Dataset):
    """8 samples; those in `bad` failed to decode: zero pixels, valid False, as utils/data/datasets/images.py yields
    them."""

    def __init__(self, bad):
        g = torch.Generator().manual_seed(0)
        self.x, self.y, self.bad = torch.randn(8, 4, generator=g) * 3 + 1, torch.randint(3, (8,), generator=g), bad
        self.epoch = torch.zeros((), dtype=torch.int64)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i in self.bad:
            return {"pixel_values": torch.zeros(4), "labels": int(self.y[i]), "valid": False,
                    "source": f"broken_{i}.jpg", "error": "OSError: truncated"}
        return {"pixel_values": self.x[i], "labels": int(self.y[i]), "valid": True, "source": "", "error": ""}


def one_step(tmp_path, bad):
    """One optimizer step (batch 8 = the whole set) of a BatchNorm model; returns (job, model before)."""
    settings = run_settings(["--batch_size", "8", "--lr", "0.5", "--min_lr", "0.5", "--warmup_epochs", "0",
                           "--momentum", "0", "--weight_decay", "0", "--label_smoothing", "0", "--epochs", "1",
                       "--num_workers", "0", "--skip_bad_images"])
    accelerator = build_accelerator(settings)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    before = copy.deepcopy(model)
    job = make_job(settings, accelerator, tmp_path, HalfBroken(bad), model=model, skip_bad_images=True)
    assert train_one_epoch(job, 0, 0) == (1, True, False)
    return job, before


def test_skipped_images_shape_neither_loss_nor_batchnorm(tmp_path, fresh_accelerate_state):
    bad = {1, 4, 5, 7}
    job, reference = one_step(tmp_path, bad)
    assert sorted(job.bad_images.found) == [f"broken_{i}.jpg" for i in sorted(bad)]
    # By hand: the same step on the four good samples alone.
    good = sorted(set(range(8)) - bad)
    data = HalfBroken(bad)
    reference.train()
    loss = torch.nn.functional.cross_entropy(reference(data.x[good]), data.y[good])
    loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.5 * p.grad
    ours = {k: v.cpu() for k, v in job.accelerator.unwrap_model(job.model).state_dict().items()}
    for key, value in reference.state_dict().items():  # weights and BatchNorm's running mean/var alike
        torch.testing.assert_close(ours[key], value, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("bad", [set(range(8)), set(range(1, 8))], ids=["none-valid", "one-valid"])
def test_a_step_without_images_to_learn_from_changes_nothing(tmp_path, fresh_accelerate_state, capsys, bad):
    # One decodable image alone cannot go through BatchNorm in training: it waits, like none at all.
    job, before = one_step(tmp_path, bad)
    after = {k: v.cpu() for k, v in job.accelerator.unwrap_model(job.model).state_dict().items()}
    for key, value in before.state_dict().items():  # no update, and BatchNorm saw no batch
        assert torch.equal(after[key], value), key
    assert "step 1: no batch of this step held 2 or more decodable images, update skipped" in capsys.readouterr().out



class Indexed(HalfBroken):
    def __getitem__(self, i):
        return {**super().__getitem__(i), "index": i}


def test_the_logged_train_loss_weighs_each_micro_batch_by_the_images_it_trained_on(tmp_path, fresh_accelerate_state):
    """Two micro-batches of 4 accumulated into one step, the first with 2 undecodable images: the step's train_loss
    is the mean over the 6 images trained on, (2 La + 4 Lb) / 6, not (4 La + 4 Lb) / 8 (a mean weighted by the
    batch size, as if the skipped images had scored 0)."""
    from conftest import read_jsonl
    from loop_harness import epoch_order

    settings = run_settings(["--batch_size", "4", "--grad_accum_steps", "2", "--label_smoothing", "0", "--epochs", "1",
                       "--warmup_epochs", "0", "--num_workers", "0", "--skip_bad_images", "--log_every", "1"])
    accelerator = build_accelerator(settings)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    before = copy.deepcopy(model).train()
    data = Indexed(set())
    job = make_job(settings, accelerator, tmp_path, data, model=model, skip_bad_images=True)
    first, second = epoch_order(job.train_loader, 0)
    data.bad = set(first[:2])
    assert train_one_epoch(job, 0, 0) == (1, True, False)
    f = torch.nn.functional.cross_entropy
    la = f(before(data.x[first[2:]]), data.y[first[2:]]).item()
    lb = f(before(data.x[second]), data.y[second]).item()
    row = next(r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train_loss" in r)
    assert row["train_loss"] == pytest.approx((2 * la + 4 * lb) / 6, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("split", ["tr", "va"])
def test_a_bad_file_met_by_one_rank_of_two_stops_every_rank_with_one_line(split, tmp_path):
    """Without --skip_bad_images, a truncated PNG met by one rank (a DataLoader worker each) in training or in
    validation: every rank learns it at the step's (or the batch's) agreement and exits 2 saying which file, on
    which process; no traceback from a rank left waiting in a collective."""
    import io

    from PIL import Image

    from conftest import make_folder
    from ranks import run_ranks

    make_folder(tmp_path / "tr", {"cat": 6, "dog": 6}, size=(20, 20), noise=30)
    make_folder(tmp_path / "va", {"cat": 3, "dog": 3}, size=(20, 20), noise=30)
    png = io.BytesIO()
    Image.new("RGB", (20, 20), (90, 30, 30)).save(png, format="PNG")
    (tmp_path / split / "cat" / "zz_truncated.png").write_bytes(png.getvalue()[:40])
    job = run_ranks(["--train_dir", tmp_path / "tr", "--val_dir", tmp_path / "va", "--image_size", "16",
                     "--batch_size", "2", "--num_workers", "1", "--epochs", "1", "--warmup_epochs", "0",
                     "--output_dir", tmp_path / "run"], nproc=2, timeout=120)
    assert not job.timed_out and [r.returncode for r in job.ranks] == [2, 2], job.report()
    assert "Traceback" not in job.stderr, job.report()
    for rank in job.ranks:
        lines = [line for line in rank.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, job.report()
        assert lines[0].startswith("train_classification.py: error: cannot decode ") and "zz_truncated.png" in lines[0]
        assert "--skip_bad_images" in lines[0]
