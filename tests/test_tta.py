"""--tta flip: validation scores each image by its softmax averaged with its mirror's, the same gathered figures on
1 and 2 processes, and predict.py --tta flip scores each file as validation did."""

from pathlib import Path

import pytest
import torch
from conftest import make_folder, read_json, read_jsonl, resume_job
from ranks import ranks_ok

from utils.evaluation.tta import scores


def test_flip_averages_the_softmax_of_a_view_and_its_mirror():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    x = torch.randn(2, 3, 6, 6)
    expected = (model(x).softmax(1) + model(x.flip(-1)).softmax(1)) / 2
    assert torch.allclose(scores(model, x, "flip").exp(), expected, atol=1e-6)
    assert torch.equal(scores(model, x), model(x))
    assert not torch.allclose(scores(model, x, "flip"), model(x).log_softmax(1), atol=1e-3)  # it did change


@pytest.mark.slow
def test_flip_validation_is_the_same_on_one_and_two_processes_and_predict_agrees(tmp_path):
    images = tmp_path / "images"  # with texture: a uniform colour is its own mirror image
    make_folder(images / "tr", {"cat": 4, "dog": 4, "eel": 4}, size=(40, 36), noise=40)
    make_folder(images / "va", {"cat": 2, "dog": 2, "eel": 3}, size=(40, 36), noise=40)
    run = tmp_path / "run"
    ranks_ok(resume_job(images, run, 0, "--epochs", "1"), nproc=1)
    scored = {}
    for nproc, tta in ((1, ()), (1, ("--tta", "flip")), (2, ("--tta", "flip"))):
        out = tmp_path / f"eval{nproc}{len(tta)}"
        ranks_ok(resume_job(images, out, 0, "--eval_only", "--init_from", run / "model.safetensors", *tta), nproc=nproc)
        scored[nproc, bool(tta)] = read_json(out / "results.json")
    one, two = scored[1, True], scored[2, True]
    assert ((one["val_top1"], one["val_samples"]) == (two["val_top1"], 7)
            and abs(one["val_loss"] - two["val_loss"]) < 1e-6)
    assert one["val_loss"] != scored[1, False]["val_loss"]  # the flip changed the scores
    rows = tmp_path / "rows.jsonl"
    ranks_ok([run, images / "va", "--output", rows, "--tta", "flip"], nproc=1, target="predict:main")
    correct = sum(r["labels"][0] == Path(r["path"]).parent.name for r in read_jsonl(rows))
    assert correct == round(one["val_top1"] * 7)
    plain = tmp_path / "plain.jsonl"
    ranks_ok([run, images / "va", "--output", plain], nproc=1, target="predict:main")
    assert [r["probs"] for r in read_jsonl(plain)] != [r["probs"] for r in read_jsonl(rows)]  # the mirror averaged in
