"""Recipes: every recipe file runs on 2 processes; the speed switches keep the arithmetic; EMA, MixUp/CutMix,
random erasing and repeated augmentation together (and --keep_best, which follows the EMA) resume bitwise
after a SIGKILL on 2 processes."""

import math
from pathlib import Path

import pytest
import torch

from conftest import ROOT, read_json, read_jsonl, resume_job, resumed_from
from ranks import ranks_killed, ranks_ok

# The ViT-L/16 FSDP recipe is only parsed (test_config.py): torchvision's ViT takes 224 px only, and 300 M
# parameters on two CPU processes would cost minutes; FSDP itself is tested in test_fsdp.py.
RECIPES = sorted(p.name for p in (ROOT / "configs").glob("*.yaml")
                 if not p.name.startswith("moving_digits") and not p.name.endswith("_fsdp.yaml"))
# Each recipe's own model and hyperparameters, on tiny input: a few steps, nothing to download. The image recipes
# on image files (their crops, interpolation and policies apply to files only: synthetic data refuses them).
TINY_SYNTHETIC = ["--dataset", "synthetic", "--image_size", "16", "--num_classes", "10", "--batch_size", "4",
                  "--synthetic_train_samples", "40", "--synthetic_val_samples", "8", "--max_train_steps", "3",
                  "--log_every", "1", "--no_plots"]


# The recipe files' own models at 32 px: at 16 px ResNet-50's last stages see 1x1 maps, and BatchNorm over
# a batch of 4 single values in bf16 (the step recipe's precision) gives a non-finite loss by step 3.
RECIPE_SIZE = ["--image_size", "32", "--train_crop_size", "32", "--val_resize_size", "32", "--val_crop_size", "32"]


@pytest.fixture(scope="module")
def textured_images(tmp_path_factory):
    """Crops with texture: on uniform colours, ResNet-50's tiny late maps give BatchNorm a near-zero spread,
    and on some CPUs bf16 then turned the loss non-finite by step 2."""
    from conftest import make_folder

    root = tmp_path_factory.mktemp("textured")
    make_folder(root / "tr", {"cat": 3, "dog": 3, "eel": 2}, size=(40, 36), noise=40)
    make_folder(root / "va", {"cat": 2, "dog": 2, "eel": 3}, size=(40, 36), noise=40)
    return root


def tiny_videos(videos):
    """The video recipes' own models on 4-frame 32 px clips (at 16 px R(2+1)D-18's last maps are 1x1 and BatchNorm
    over them gave a non-finite val loss once) of the `videos` fixture (8 train / 5 val videos), one
    clip and one crop at test: the recipes' 10 x 3 views would cost a minute of SlowFast on the CPU."""
    return ["--train_dir", videos / "tr", "--val_dir", videos / "va", "--image_size", "32", "--clip_len", "4",
            "--batch_size", "2", "--max_train_steps", "3", "--log_every", "1", "--test_clips", "1", "--test_crops", "1"]


def tiny_images(images):
    """Progressive resizing needs real crops: 8 images, one step an epoch on 2 processes, 16-px crops in
    epoch 0 and 32-px ones from epoch 1."""
    return ["--train_dir", images / "tr", "--val_dir", images / "va", "--image_size", "32", "--progressive_resize",
            "16", "32", "0", "1", "--progressive_resize_step", "16", "--val_resize_size", "32", "--val_crop_size",
            "32", "--batch_size", "4", "--max_train_steps", "3", "--log_every", "1"]


def kinetics_weights(tmp_path, model):
    """A fine-tune recipe's Kinetics-400 weights (pv/ models): a random 400-class state dict of the architecture
    in a torch hub cache of the test's own, where the model reads them offline; the environment that points there."""
    from pytorchvideo.models import hub

    from utils.models.pv_library import MODELS

    assert model.startswith("pv/"), f"{model}: only pv/ fine-tune recipes have weights the test can write"
    arch = model[3:]
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save({"model_state": getattr(hub, arch)(pretrained=False).state_dict()}, cache / MODELS[arch][0])
    return {"TORCH_HOME": str(tmp_path / "torch")}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_runs_a_few_steps_on_two_processes(recipe, tmp_path, textured_images, videos):
    # configs/moving_digits_mc3_18.yaml is the video tests' recipe: every --dataset moving_digits run applies it.
    import yaml

    out = tmp_path / "run"
    recipe_values = yaml.safe_load((ROOT / "configs" / recipe).read_text())
    tiny = tiny_images(textured_images) if "progressive_resize" in recipe_values else \
        [*TINY_SYNTHETIC, "--image_size", "32"] if recipe_values.get("dataset") == "synthetic" else \
        ["--train_dir", textured_images / "tr", "--val_dir", textured_images / "va", *RECIPE_SIZE, "--batch_size", "4",
         "--max_train_steps", "3", "--log_every", "1"]
    if "clip_len" in recipe_values:  # a video recipe
        tiny = tiny_videos(videos)
    env = kinetics_weights(tmp_path, recipe_values["model"]) if recipe_values.get("pretrained") else None
    proc = ranks_ok(["--config", ROOT / "configs" / recipe, *tiny, "--no_plots", "--output_dir", out], nproc=2,
                    timeout=240, env=env)
    results, config = read_json(out / "results.json"), yaml.safe_load((out / "config.yaml").read_text())
    assert results["global_step"] == 3 and results["world_size"] == 2 and math.isfinite(results["val_loss"])
    if "progressive_resize" in recipe_values:
        assert "train crops 16 px in epoch 0, 32 px in epochs 1-15" in proc.stdout
    overridden = {a[2:] for a in tiny if isinstance(a, str) and a.startswith("--")}
    assert all(config[k] == v for k, v in recipe_values.items() if k not in overridden)  # the recipe was in force
    assert ("val_ema_top1" in results) == bool(recipe_values.get("model_ema"))


def tiny_run(tmp_path, name, *extra):
    """(the loss of each step, the final weights) of 3 steps of resnet18 on synthetic 16-px input."""
    import train_classification
    from safetensors.torch import load_file

    out = tmp_path / name
    train_classification.main([*TINY_SYNTHETIC, "--model", "resnet18", "--epochs", "1", "--warmup_epochs", "0",
                               "--num_workers", "0", "--output_dir", str(out), *extra])
    losses = [row["train_loss"] for row in read_jsonl(out / "metrics.jsonl") if "train_loss" in row]
    return torch.tensor(losses), load_file(out / "model.safetensors")


@pytest.mark.slow
def test_channels_last_and_compile_train_the_same_arithmetic(tmp_path, fresh_accelerate_state):
    from conftest import reset_accelerate_state

    eager_losses, eager = tiny_run(tmp_path, "eager")
    reset_accelerate_state()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    channels_last = tiny_run(tmp_path, "channels_last", "--channels_last")
    assert not torch._dynamo.utils.counters["stats"]["unique_graphs"]  # nothing compiled without --compile
    reset_accelerate_state()
    compiled = tiny_run(tmp_path, "compiled", "--compile")
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the model ran as a compiled graph
    for losses, weights in (channels_last, compiled):  # other kernels, other rounding: the same training up to it
        assert len(losses) == 3 and torch.allclose(losses, eager_losses, rtol=1e-4)
        assert weights.keys() == eager.keys()  # a plain state dict, not the compiled wrapper's
        assert all(torch.allclose(weights[k], v, atol=5e-3) for k, v in eager.items() if v.is_floating_point())
        assert any(not torch.equal(weights[k], v) for k, v in eager.items())  # other kernels did run


@pytest.mark.slow
def test_sigkill_with_ema_mixing_erasing_and_repeated_augmentation_resumes_bitwise(images, tmp_path):
    from safetensors.torch import load_file

    recipe = ("--model_ema", "--model_ema_steps", "2", "--mixup_alpha", "0.2", "--cutmix_alpha", "1.0",
              "--random_erase", "0.5", "--ra_reps", "2", "--keep_best", "1")
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(resume_job(images, whole, 2, *recipe), nproc=2)
    argv = resume_job(images, out, 2, *recipe, "--checkpoint_every_steps", "1")
    ranks_killed(argv, "step:7", nproc=2)  # epoch 1 of 3 (5 steps each), DataLoader workers on
    assert not (out / "results.json").exists()
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == Path(out / "checkpoints" / "step_6")
    for name in ("model.safetensors", "model_ema.safetensors", "best/model.safetensors"):
        a, b = load_file(whole / name), load_file(out / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    ours, theirs = read_json(out / "results.json"), read_json(whole / "results.json")
    assert (ours["val_top1"], ours["val_ema_top1"], ours["val_loss"], ours["val_ema_loss"]) == \
        (theirs["val_top1"], theirs["val_ema_top1"], theirs["val_loss"], theirs["val_ema_loss"])
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "val_ema_top1" in r]
    assert read_json(out / "best" / "metrics.json")["val_ema_top1"] == max(r["val_ema_top1"] for r in rows)


@pytest.mark.parametrize("switch", [False, True])
def test_the_job_feeds_the_model_its_input_in_the_models_memory_format(switch, tmp_path, fresh_accelerate_state):
    """--channels_last is the model's option (ModelOptions): the job built from the Settings gives both the model's
    weights and the batches it trains on that format, and neither without it."""
    from conftest import TINY
    from utils.config.options import parse
    from utils.run.accelerator import build_accelerator
    from utils.run.job import build_job

    settings = parse([*TINY, "--output_dir", str(tmp_path / "run"), *(["--channels_last"] * switch)])
    job, _, _ = build_job(settings, build_accelerator(settings), tmp_path / "run")
    try:
        batch = next(iter(job.train_loader.batches(0)))
        pixels = job.inputs(batch["pixel_values"])
        weight = next(p for p in job.bare_model().parameters() if p.dim() == 4)
        assert pixels.is_contiguous(memory_format=torch.channels_last) is switch
        assert weight.is_contiguous(memory_format=torch.channels_last) is switch
    finally:
        job.close()
