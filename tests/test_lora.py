"""--lora (peft): only the adapters and the classifier train; every weights file a run leaves holds the adapters merged
(an ordinary model whose logits are the adapted model's); a run on 2 processes with a worker each, SIGKILLed, resumes
bitwise; predict.py and ONNX score as the run validated; what cannot apply is one line."""

import pytest
import torch
from conftest import assert_same_weights, parse_fails, read_json, resume_job, resumed_from, snapshot
from ranks import ranks_killed, ranks_ok, run_ranks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")


def tiny_vit(folder):
    """A 2-block transformers ViT for 32 px images, a config-only folder (nothing downloaded): `hf/<folder>`."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, num_labels=3)
    ViTForImageClassification(config).save_pretrained(folder)
    return f"hf/{folder}"


def adapted(name, *options, size=32, log=None):
    """The model `name` names, for 3 classes and `size` px, with the adapters `options` ask for: (plain state, adapted
    model)."""
    from utils.config.options import parse
    from utils.models.libraries import add_adapters, build_model

    settings = parse(["--model", name, "--image_size", str(size), "--pretrained", "--lora", *options])
    torch.manual_seed(0)
    model = build_model(name, num_classes=3, class_names=["a", "b", "c"])
    plain = {k: v.clone() for k, v in model.state_dict().items()}
    return plain, add_adapters(model, name, settings.model.adapters, log=log or (lambda line: None))


@pytest.mark.parametrize("model, options, size, adapted_layers", [
    pytest.param("timm/test_vit", ["4"], 160, 12, marks=pytest.mark.slow),  # timm's fused qkv and the attention's
    # proj, 6 blocks (not patch_embed.proj)
    ("vit", ["4", "--lora_alpha", "16"], 32, 4),  # transformers' query and value, 2 blocks
    # peft's Conv2d LoRA, on convolutions outside the residual branches (zero-initialised, they would get no gradient)
    ("resnet18", ["2", "--lora_targets", "layer2.0.downsample.0", "layer3.0.downsample.0"], 32, 2),
])
def test_only_the_adapters_and_the_head_train_and_the_merged_model_is_the_plain_model_scoring_alike(
        model, options, size, adapted_layers, tmp_path):
    from peft.tuners.lora import LoraLayer

    from utils.models.libraries import classifier_parameters
    from utils.models.lora import merged

    name = tiny_vit(tmp_path / "vit") if model == "vit" else model
    lines = []
    plain, net = adapted(name, *options, size=size, log=lines.append)
    assert sum(isinstance(m, LoraLayer) for m in net.modules()) == adapted_layers
    alpha = float(options[options.index("--lora_alpha") + 1]) if "--lora_alpha" in options else float(options[0])
    assert {m.scaling["default"] for m in net.modules() if isinstance(m, LoraLayer)} == {alpha / float(options[0])}
    head = {id(p) for p in classifier_parameters(net, name)}
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or id(p) in head for n, p in net.named_parameters() if p.requires_grad)
    assert head <= {id(p) for p in net.parameters() if p.requires_grad}
    count = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert f"trainable parameters {count:,} of" in lines[0] and f"on {adapted_layers} layers" in lines[0]
    optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.5)
    x = torch.randn(4, 3, size, size, generator=torch.Generator().manual_seed(1))
    net.train()
    for _ in range(3):  # lora_B starts at zero: a few steps make the adapters change what the model computes
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), torch.tensor([0, 1, 2, 0])).backward()
        assert all(p.grad is None for p in net.parameters() if not p.requires_grad)
        assert all(p.grad is not None for p in net.parameters() if p.requires_grad)
        optimizer.step()
    net.eval()
    frozen = {n.replace(".base_layer", ""): p for n, p in net.named_parameters() if not p.requires_grad}
    assert frozen and all(torch.equal(p, plain[n]) for n, p in frozen.items())  # the backbone did not move
    one = merged(net)
    assert not any(isinstance(m, LoraLayer) for m in one.modules())
    assert any(isinstance(m, LoraLayer) for m in net.modules())  # a copy: the training model keeps its adapters
    assert one.state_dict().keys() == plain.keys()  # the library's own names: it loads into a plain model
    with torch.no_grad():
        ours, theirs, before = net(x), one(x), adapted(name, *options, size=size)[1].eval()(x)
    assert (ours - theirs).abs().max() <= 1e-5 * max(1.0, float(ours.abs().max()))
    assert (ours - before).abs().max() > 1e-3  # the adapters count: dropped instead of merged, the test fails
    assert any(not torch.equal(v, plain[k]) for k, v in one.state_dict().items() if k in frozen)


@pytest.mark.parametrize("argv, line", [
    (["--lora_alpha", "8"], "lora_alpha: sets the LoRA adapters: add --lora RANK"),
    (["--lora_targets", "qkv"], "lora_targets: sets the LoRA adapters: add --lora RANK"),
    (["--lora", "4", "--freeze_backbone"], "lora: trains adapters beside the head; --freeze_backbone"),
    (["--lora", "-1"], "lora: is the adapters' rank"),
    (["--lora", "4", "--pretrained", "--lora_dropout", "1"], "lora_dropout: must be in [0, 1)"),
    (["--lora", "4"], "lora: adapts trained weights, which it leaves frozen: give them (--pretrained, --weights or "
                      "--init_from)"),  # adapters on a random backbone: val 0.125 where the whole model learns
])
def test_what_lora_cannot_take_is_one_line(argv, line, capsys):
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and line in lines[0], lines


@pytest.mark.parametrize("model, options, line", [
    ("resnet18", ["4"], "lora: torchvision ResNet has no default layers to adapt here"),
    ("resnet18", ["4", "--lora_targets", "fc"], "lora: fc is the classifier, trained whole; leave it out of"),
    ("resnet18", ["4", "--lora_targets", "nothing_here"], "lora: Target modules {'nothing_here'} not found"),
    ("vit_b_16", ["4", "--lora_targets", "self_attention"], "self_attention is torch's MultiheadAttention, whose "
                                                            "adapters are not merged back"),
])
def test_layers_that_cannot_be_adapted_are_one_line(model, options, line):
    from utils.models.errors import ModelError

    with pytest.raises(ModelError) as e:
        adapted(model, *options, size=224 if model.startswith("vit") else 32)
    assert line in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.slow
def test_a_lora_run_on_two_processes_resumes_bitwise_and_leaves_merged_weights_that_score_as_it_validated(
        images, tmp_path, capsys):
    """2 processes with a worker each, 5 steps an epoch over 3 epochs, an EMA: killed after step 7, resumed from
    step_6, the same weights as uninterrupted. model.safetensors and model_ema.safetensors are plain (merged) weights:
    predict.py on the val files gives the run's val and EMA figures; a checkpoint (adapters apart) predicts as the
    final weights do; the ONNX graph scores as the adapted model."""
    import math

    import predict
    from utils.run.trained import load_run

    name = tiny_vit(tmp_path / "vit")
    job = ("--model", name, "--pretrained", "--lora", "4", "--lora_alpha", "8", "--optimizer", "adamw", "--lr", "0.01",
           "--weight_decay", "0.01", "--model_ema", "--model_ema_decay", "0.5", "--no-model_ema_warmup")
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(resume_job(images, whole, 1, *job), nproc=2)
    argv = resume_job(images, out, 1, *job, "--checkpoint_every_steps", "1", "--keep_last", "3", "--keep_best", "1")
    from safetensors.torch import load_file, save_file

    out.mkdir()  # an earlier LoRA run's frozen weights left in the folder: replaced by this run's
    save_file({k: v + 1 for k, v in load_file(whole / "frozen.safetensors").items()}, out / "frozen.safetensors",
              metadata={"sha256": "another run's"})
    ranks_killed(argv, "step:7", nproc=2)
    # the checkpoint holds the adapters, the classifier and the buffers, not the frozen weights: those are built again,
    # and other ones (the folder's pretrained weights, changed since) are refused in one line, the checkpoints kept
    from safetensors import safe_open

    latest = out / "checkpoints" / "step_6"
    with safe_open(str(latest / "model.safetensors"), framework="pt") as saved:
        kept = set(saved.keys())
    assert kept and all("lora_" in k or k.startswith("classifier.") for k in kept), sorted(kept)[:5]
    average = torch.load(latest / "custom_checkpoint_0.pkl", weights_only=True)  # the EMA, likewise
    assert all("lora_" in k or ".classifier." in k or k == "n_averaged" for k in average), sorted(average)[:5]
    before, pretrained = snapshot(out / "checkpoints"), tmp_path / "vit" / "model.safetensors"
    original = pretrained.read_bytes()
    save_file({k: v + 1 for k, v in load_file(pretrained).items()}, pretrained, metadata={"format": "pt"})
    refused = run_ranks([*argv, "--resume", "latest"], nproc=2)
    pretrained.write_bytes(original)
    lines = [line for line in refused.stderr.splitlines() if "train_classification.py" in line]
    assert refused.returncode == 2 and "was trained on other frozen weights than this run built" in lines[0], \
        refused.report()
    assert snapshot(out / "checkpoints") == before
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)

    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_6"
    assert_same_weights(out, whole)
    ema, ema_whole = load_file(out / "model_ema.safetensors"), load_file(whole / "model_ema.safetensors")
    assert all(torch.equal(v, ema_whole[k]) for k, v in ema.items())  # the average, kept without its frozen part
    results = read_json(out / "results.json")
    assert results["val_loss"] == read_json(whole / "results.json")["val_loss"]

    from utils.models.libraries import build_model

    plain = set(build_model(name, num_classes=3, class_names=["cat", "dog", "eel"]).state_dict())
    for weights in ("model.safetensors", "model_ema.safetensors", "best/model.safetensors"):
        assert set(load_file(out / weights)) == plain, weights  # merged: the plain model's names, no adapters
    assert not any("lora_" in k or "base_layer" in k for k in load_file(out / "model" / "model.safetensors"))
    for ema, key in ((False, ""), (True, "ema_")):
        rows = predict.main([str(out), str(images / "va"), "--top_k", "3", "--num_workers", "0"] + ["--ema"] * ema)
        true = [r["path"].split("/")[-2] for r in rows]
        loss = sum(-math.log(dict(zip(r["labels"], r["probs"]))[t]) for r, t in zip(rows, true)) / len(rows)
        assert abs(loss - results[f"val_{key}loss"]) <= 1e-4 * max(1, results[f"val_{key}loss"]), (key, loss)
        assert sum(r["labels"][0] == t for r, t in zip(rows, true)) == round(results[f"val_{key}top1"] * 7)
    final = next(p for p in sorted((out / "checkpoints").iterdir()) if p.name.startswith("epoch_2"))
    _, from_checkpoint = load_run(out, checkpoint=final)
    _, model = load_run(out)
    pixels = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = (pixels / 255.0 - 0.5) / 0.25
    with torch.no_grad():
        assert (from_checkpoint(x) - model(x)).abs().max() <= 1e-5
    capsys.readouterr()
    predict.main([str(out), "--export_onnx", str(tmp_path / "model.onnx")])
    said = capsys.readouterr().out
    assert float(said.rsplit("max abs diff ", 1)[1].split()[0]) <= 1e-4, said
    from safetensors import safe_open

    with safe_open(str(out / "frozen.safetensors"), framework="pt") as kept:
        assert kept.metadata()["sha256"] == read_json(final / "training_state.json")["frozen_sha256"]
    # the run folder's frozen weights replaced by others: a checkpoint is not put together with them
    save_file({k: v + 1 for k, v in load_file(out / "frozen.safetensors").items()}, out / "frozen.safetensors")
    with pytest.raises(SystemExit) as stopped:
        predict.main([str(out), str(images / "va"), "--checkpoint", str(final)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1 and "holds other frozen weights than" in err[0], err


def test_the_weights_digest_keeps_the_format_checkpoints_recorded():
    """frozen_sha256 in a --lora checkpoint (and a probe's features/key.json) is this digest: each name in order, then
    its tensor's bytes; another format would refuse every older checkpoint's resume."""
    import hashlib

    from utils.models.weights import tensors_sha256

    tensors = {"b": torch.arange(3, dtype=torch.float32), "a.weight": torch.ones(2, 2, dtype=torch.float16)}
    expected = hashlib.sha256(b"a.weight" + tensors["a.weight"].numpy().tobytes() + b"b"
                              + tensors["b"].numpy().tobytes()).hexdigest()
    assert tensors_sha256(tensors.items()) == expected
