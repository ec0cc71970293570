"""--grad_checkpointing: the same arithmetic with less memory. torchvision's blocks recomputed through
torch.utils.checkpoint train to the same bits (BatchNorm's running statistics updated once, not again in the
recomputation), timm's and transformers' own switches give the same gradients, and a model with nothing to
checkpoint is one line."""

import copy

import pytest
import torch
from conftest import TINY, main_fails, read_jsonl, run_main
from safetensors.torch import load_file

from utils.models.libraries import build_model, enable_grad_checkpointing


@pytest.mark.slow
def test_a_resnet_trains_to_the_same_bits_with_its_blocks_checkpointed(tmp_path, capsys):
    """With the EMA too, whose deep copy of the model recomputes its own blocks."""
    runs = {}
    for name, extra in (("plain", ()), ("checkpointed", ("--grad_checkpointing",))):
        runs[name] = run_main([*TINY, "--model", "resnet18", "--epochs", "2", "--log_every", "1", "--model_ema",
                               "--output_dir", tmp_path / name, *extra])
    assert "grad_checkpointing: 8 blocks recompute their activations in the backward pass; 20 BatchNorm layers " \
        "update their statistics once" in capsys.readouterr().out
    rows = {name: read_jsonl(tmp_path / name / "metrics.jsonl") for name in runs}
    assert [r.get("train_loss") for r in rows["plain"]] == [r.get("train_loss") for r in rows["checkpointed"]]
    assert runs["plain"]["val_loss"] == runs["checkpointed"]["val_loss"]  # BatchNorm's statistics too
    assert runs["plain"]["val_ema_loss"] == runs["checkpointed"]["val_ema_loss"]
    for file in ("model.safetensors", "model_ema.safetensors"):
        plain, checkpointed = (load_file(tmp_path / name / file) for name in runs)
        assert all(torch.equal(plain[k], checkpointed[k]) for k in plain), file


def gradients(model, x):
    """(the gradients of one training step and the buffers after it, how many tensors autograd kept for it outside
    checkpointed blocks)."""
    model.train()
    torch.manual_seed(0)  # dropout / drop path masks: checkpointing must redraw the same ones
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(1) or t, lambda t: t):
        loss = model(x).float().sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {**grads, **{f"buffer {n}": b.float() for n, b in model.named_buffers()}}, len(kept)


@pytest.mark.parametrize("name, shape, kwargs", [
    pytest.param("vit_b_16", (2, 3, 224, 224), {}, marks=pytest.mark.slow),  # 224 px only: seconds of CPU
    ("swin_t", (2, 3, 64, 64), {}),
    ("efficientnet_b0", (2, 3, 64, 64), {"drop_path": 0.2}),  # stochastic depth and BatchNorm in its blocks
    ("timm/test_convnext", (2, 3, 32, 32), {"drop_path": 0.2}),
    ("timm/test_resnet", (2, 3, 32, 32), {"drop_path": 0.2}),  # timm's own checkpointing, BatchNorm inside it
    ("timm/test_vit", (2, 3, 160, 160), {"drop_path": 0.2}),
    ("r3d_18", (2, 3, 4, 32, 32), {}),  # a video model: BatchNorm3d's statistics, updated once too
])
def test_checkpointed_blocks_give_the_same_gradients_and_batchnorm_statistics(name, shape, kwargs):
    if name.startswith("timm/"):
        pytest.importorskip("timm")
    torch.manual_seed(0)
    model = build_model(name, num_classes=3, **kwargs)
    twin = copy.deepcopy(model)
    line = enable_grad_checkpointing(twin, name)
    assert "grad_checkpointing" in line
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    (plain, kept), (checkpointed, fewer) = gradients(model, x), gradients(twin, x)
    assert plain.keys() == checkpointed.keys()
    assert max((plain[k] - checkpointed[k]).abs().max().item() for k in plain) < 1e-5
    assert fewer < kept / 2  # what the blocks save inside is recomputed, not kept
    assert twin.state_dict().keys() == model.state_dict().keys()  # saved under the same names


def test_transformers_own_switch_is_used_and_gives_the_same_gradients():
    transformers = pytest.importorskip("transformers")
    from utils.models.hf_library import Transformers

    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    num_labels=3, image_size=32, patch_size=8)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageClassification.from_config(config)
    model.register_forward_hook(lambda m, i, o: o.logits)
    twin = copy.deepcopy(model)
    assert "gradient_checkpointing_enable" in Transformers().grad_checkpointing(twin)
    assert twin.is_gradient_checkpointing and not model.is_gradient_checkpointing
    x = torch.randn(2, 3, 32, 32)
    (plain, kept), (checkpointed, fewer) = gradients(model, x), gradients(twin, x)
    assert max((plain[k] - checkpointed[k]).abs().max().item() for k in plain) < 1e-5 and fewer < kept / 2


def test_a_model_without_blocks_to_checkpoint_is_one_line(tmp_path, capsys):
    code, err = main_fails([*TINY, "--model", "vgg11", "--image_size", "32", "--grad_checkpointing", "--output_dir",
                            tmp_path / "r"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "grad_checkpointing: VGG has none of the blocks" in err
    assert not (tmp_path / "r").exists()
