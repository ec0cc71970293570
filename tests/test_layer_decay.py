"""--layer_decay: each parameter's layer as its library lays the model out (timm's group_matcher; our own for
torchvision's ViT, Swin and ConvNeXt and transformers' encoders), the LR of layer i of L scaled by RATE^(L-1-i)
within the weight-decay groups, kept through the schedule; a model it cannot group is one line."""

import pytest
import torch
import torchvision
from conftest import TINY, main_fails, parse_fails, read_jsonl, run_main

from utils.config.options import parse_args
from utils.config.settings import typed_options
from utils.models.libraries import layer_ids
from utils.training.schedule import build_lr_scheduler, build_optimizer


def layers_of(ids):
    """{layer: [parameter names]} in layer order."""
    found = {}
    for name, layer in ids.items():
        found.setdefault(layer, []).append(name)
    return dict(sorted(found.items()))


@pytest.mark.parametrize("name, count, first, blocks, last", [
    # stem; 12 encoder blocks (the final norm with the last); the head
    ("vit_b_16", 14, {"class_token", "conv_proj.weight", "conv_proj.bias", "encoder.pos_embedding"},
     [("encoder.layers.encoder_layer_0.ln_1.weight", 1), ("encoder.layers.encoder_layer_11.mlp.3.bias", 12),
      ("encoder.ln.weight", 12)], {"heads.head.weight", "heads.head.bias"}),
    # stem; blocks 2 + 2 + 6 + 2, each patch merging with the next stage's first block; the head
    ("swin_t", 14, {"features.0.0.weight", "features.0.0.bias", "features.0.2.weight", "features.0.2.bias"},
     [("features.1.1.norm1.weight", 2), ("features.2.reduction.weight", 3), ("features.3.0.norm1.weight", 3),
      ("norm.weight", 12)], {"head.weight", "head.bias"}),
    # stem; blocks 3 + 3 + 9 + 3, each downsampling with the next stage's first block; the classifier with its norm
    ("convnext_tiny", 20, {"features.0.0.weight", "features.0.0.bias", "features.0.1.weight", "features.0.1.bias"},
     [("features.2.1.weight", 4), ("features.3.0.block.0.weight", 4), ("features.7.2.layer_scale", 18)],
     {"classifier.0.weight", "classifier.0.bias", "classifier.2.weight", "classifier.2.bias"}),
])
def test_torchvision_transformers_and_convnexts_fall_into_stem_blocks_and_head(name, count, first, blocks, last):
    with torch.device("meta"):
        model = torchvision.models.get_model(name, num_classes=3)
    ids = layer_ids(model, name)
    layers = layers_of(ids)
    assert len(layers) == count and set(ids) == {n for n, _ in model.named_parameters()}
    assert set(layers[0]) == first and set(layers[count - 1]) == last
    for param, layer in blocks:
        assert ids[param] == layer, param


def test_timm_and_transformers_models_are_grouped_their_way():
    timm = pytest.importorskip("timm")
    transformers = pytest.importorskip("transformers")
    vit = timm.create_model("vit_tiny_patch16_224", num_classes=3)  # timm's group_matcher, as its optimizer factory
    layers = layers_of(layer_ids(vit, "timm/vit_tiny_patch16_224"))
    assert len(layers) == 14 and "cls_token" in layers[0] and "norm.weight" in layers[12] and \
        set(layers[13]) == {"head.weight", "head.bias"}
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                                    num_labels=3)
    hf = transformers.AutoModelForImageClassification.from_config(config)
    layers = layers_of(layer_ids(hf, "hf/some/vit"))
    assert len(layers) == 5 and all(n.startswith("vit.embeddings.") for n in layers[0])
    assert all(n.startswith(f"vit.layers.{i - 1}.") for i in (1, 2) for n in layers[i])
    assert "vit.layernorm.weight" in layers[3] and set(layers[4]) == {"classifier.weight", "classifier.bias"}
    swin = transformers.AutoModelForImageClassification.from_config(
        transformers.SwinConfig(embed_dim=8, depths=[1, 2], num_heads=[1, 2], num_labels=3))
    ids = layer_ids(swin, "hf/some/swin")  # a stage's closing downsample goes with its last block
    assert (ids["swin.encoder.layers.0.downsample.reduction.weight"]
            == ids["swin.encoder.layers.0.blocks.0.mlp.fc1.weight"])


def test_each_layers_lr_is_scaled_within_the_weight_decay_groups_and_through_the_schedule():
    with torch.device("meta"):
        model = torchvision.models.get_model("vit_b_16", num_classes=3)
    model = model.to_empty(device="cpu")
    args = parse_args(["--layer_decay", "0.5", "--lr", "0.4", "--weight_decay", "0.05", "--epochs", "4"])
    ids = layer_ids(model, "vit_b_16")
    optimizer = build_optimizer(model, typed_options(args)["optimizer"], layers=ids)
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    params = dict(model.named_parameters())
    for name in ("class_token", "encoder.layers.encoder_layer_5.mlp.0.weight", "encoder.ln.bias", "heads.head.weight"):
        group = group_of[id(params[name])]
        assert group["lr"] == pytest.approx(0.4 * 0.5 ** (13 - ids[name])), name
    # the weight-decay groups hold within each layer: LayerNorm and biases 0, weights 0.05
    assert group_of[id(params["encoder.ln.bias"])]["weight_decay"] == 0
    assert group_of[id(params["encoder.layers.encoder_layer_5.ln_1.weight"])]["weight_decay"] == 0
    assert group_of[id(params["encoder.layers.encoder_layer_5.mlp.0.bias"])]["weight_decay"] == 0
    assert group_of[id(params["heads.head.weight"])]["weight_decay"] == 0.05
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(params)
    scheduler = build_lr_scheduler(optimizer, typed_options(args)["schedule"], steps_per_epoch=5)
    for _ in range(7):  # into the cosine decay: every layer keeps its ratio to the head
        optimizer.step()
        scheduler.step()
    lrs = {name: group_of[id(params[name])]["lr"] for name in ("class_token", "heads.head.weight")}
    assert lrs["class_token"] == pytest.approx(lrs["heads.head.weight"] * 0.5 ** 13) and max(scheduler.get_last_lr()) \
        == pytest.approx(lrs["heads.head.weight"])


def test_a_run_says_its_layers_and_a_model_it_cannot_group_is_one_line(tmp_path, capsys):
    pytest.importorskip("timm")
    run_main([*TINY, "--model", "timm/test_vit", "--image_size", "160", "--layer_decay", "0.75", "--epochs", "1",
              "--log_every", "1", "--max_train_steps", "1", "--synthetic_train_samples", "16",
              "--synthetic_val_samples", "8",
              "--output_dir", tmp_path / "vit"])
    out = capsys.readouterr().out
    assert "layer_decay 0.75: " in out and "LR x" in out and "up to x1 in the last (the head)" in out
    # 2 steps, no warmup: cosine at step 1 of 2 is half the LR; the logged LR is the head's, not the stem's
    assert read_jsonl(tmp_path / "vit" / "metrics.jsonl")[0]["lr"] == pytest.approx(0.05)
    code, err = main_fails([*TINY, "--model", "resnet18", "--layer_decay", "0.75", "--output_dir", tmp_path / "resnet"],
                           capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "layer_decay: resnet18's parameters cannot be " \
        "grouped into layers" in err, err
    assert not (tmp_path / "resnet").exists()  # nothing written


@pytest.mark.parametrize("argv, message", [
    (["--layer_decay", "0"], "layer_decay: must be in (0, 1]"),
    (["--layer_decay", "0.7", "--min_lr", "1e-5"], "layer_decay: takes --min_lr 0 only"),
    (["--layer_decay", "0.7", "--freeze_backbone"], "layer_decay: has nothing to decay with --freeze_backbone"),
])
def test_a_layer_decay_that_cannot_work_is_one_line_exit_2(argv, message, capsys):
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
