"""Model namespaces: timm/<name> and hf/<folder> build, check names, follow their data config, freeze their
own heads, train on 2 processes and resume exactly; their weights fail offline with one line."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, TINY, environment, read_json, run_main
from ranks import ranks_killed, ranks_ok

from utils.config.options import parse, parse_args
from utils.config.settings import input_for
from utils.models.libraries import build_model, check_model_name, classifier_parameters, data_config, initialise

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(scope="session")
def tiny_vit(tmp_path_factory):
    """A 2-layer ViT for 16-px images with its image processor, saved as transformers saves any model:
    config-only, nothing downloaded."""
    from transformers import AutoModelForImageClassification, ViTConfig, ViTImageProcessor

    folder = tmp_path_factory.mktemp("hf") / "tiny-vit"
    config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, num_labels=3)
    torch.manual_seed(0)
    AutoModelForImageClassification.from_config(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3],
                      resample=3).save_pretrained(folder)
    return folder


def test_names_are_checked_in_their_own_namespace(tmp_path):
    for good in ("resnet18", "timm/resnet18", "timm/resnet50.a1_in1k", "timm/convnext_tiny"):
        check_model_name(good)
    for bad, says in (("timm/resnt18", "did you mean timm/resnet18"), ("timm/resnet50.nope", "timm/resnet50."),
                      ("hf/" + str(tmp_path / "missing"), "no such folder"), ("hf/" + str(tmp_path), "no config.json"),
                      ("resnet19", "did you mean resnet18")):
        with pytest.raises(ValueError, match=says.replace(".", r"\.")):
            check_model_name(bad)


@pytest.mark.parametrize("model, package", [("timm/resnet18", "timm"),
                                            ("hf/google/vit-base-patch16-224", "transformers")])
def test_a_namespace_whose_library_is_not_installed_says_how_to_install_it_in_one_line(model, package, monkeypatch,
                                                                                       capsys):
    """requirements.txt leaves timm and transformers out (requirements-models.txt has them): the default job
    and torchvision's models start without them, and a timm/ or hf/ name says what to install."""
    monkeypatch.setitem(sys.modules, package, None)  # `import timm` now fails as it does where it is missing
    check_model_name("resnet18")  # torchvision's names need neither
    with pytest.raises(SystemExit) as exit_:
        parse_args([*TINY, "--model", model], prog="train_classification.py")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"train_classification.py: error: model: {model.split('/')[0]}/<name> models need {package}, which is not "
        f"installed: pip install -r requirements-models.txt (or pip install {package})"]


def test_a_transformers_video_classifier_takes_clips_whole_and_its_frame_count_is_checked(tmp_path, capsys):
    """A VideoMAE folder: built as a video model (no frame averaging), our (B, C, T, H, W) clips handed
    over as its (B, T, C, H, W); a clip length its position embeddings do not fit, or image data, is one line."""
    from transformers import VideoMAEConfig, VideoMAEForVideoClassification

    folder = tmp_path / "videomae"
    config = VideoMAEConfig(image_size=24, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=16,
                            num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    VideoMAEForVideoClassification(config).save_pretrained(folder)
    name = f"hf/{folder}"
    model = build_model(name, num_classes=8, video=True).eval()
    clips = torch.randn(2, 3, 4, 24, 24)
    with torch.no_grad():
        assert torch.equal(model(clips), model.__class__.forward(model, clips.transpose(1, 2)).logits)
    parse_args(["--dataset", "moving_digits", "--model", name, "--clip_len", "4"])
    capsys.readouterr()  # save_pretrained's progress bar
    for argv, says in ((["--dataset", "moving_digits", "--clip_len", "8"],
                        f"clip_len: {name} takes clips of 4 frames only (--clip_len x --num_segments), got 8"),
                       ([], "model: a video model needs video data")):
        with pytest.raises(SystemExit) as e:
            parse_args(["--model", name, *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and says in err[0]


def test_timm_and_hf_models_give_logits_for_our_classes_and_their_own_heads(tiny_vit):
    timm_model = build_model("timm/resnet18", num_classes=7, drop_path=0.1, dropout=0.2).eval()
    assert timm_model(torch.zeros(2, 3, 32, 32)).shape == (2, 7)
    assert {id(p) for p in classifier_parameters(timm_model, "timm/resnet18")} == \
        {id(timm_model.fc.weight), id(timm_model.fc.bias)}
    assert timm_model.drop_rate == 0.2
    hf = f"hf/{tiny_vit}"
    vit = build_model(hf, num_classes=5, class_names=list("abcde"), dropout=0.1).eval()
    logits = vit(torch.zeros(2, 3, 16, 16))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 5)  # a tensor, not transformers' output object
    assert vit.config.id2label == dict(enumerate("abcde")) and vit.config.hidden_dropout_prob == 0.1
    head = {n for n, p in vit.named_parameters() if any(p is q for q in classifier_parameters(vit, hf))}
    assert head == {"classifier.weight", "classifier.bias"}
    clips = build_model("timm/resnet18", num_classes=4, video=True).eval()  # TSN on clips (B, C, T, H, W)
    assert clips(torch.zeros(2, 3, 3, 32, 32)).shape == (2, 4)


def test_freeze_backbone_trains_the_librarys_head_only(tiny_vit):
    for name in ("timm/resnet18", f"hf/{tiny_vit}"):
        model = build_model(name, num_classes=3)
        chosen = parse(["--model", name, "--freeze_backbone", "--image_size", "16"]).model
        initialise(model, chosen, log=lambda _: None)
        trainable = [p for p in model.parameters() if p.requires_grad]
        assert trainable and {id(p) for p in trainable} == {id(p) for p in classifier_parameters(model, name)}


def test_the_data_config_follows_the_model_unless_set(tiny_vit, tmp_path):
    folders = ["--train_dir", str(tmp_path), "--val_dir", str(tmp_path)]
    timm_cfg = data_config("timm/resnet50.a1_in1k")

    def looks(argv):  # the run's Input, as the run resolves it
        inp = input_for(parse_args(argv))
        return inp, (inp.image_size, inp.crop_pct, inp.interpolation)

    inp, sizes = looks([*folders, "--model", "timm/resnet50.a1_in1k"])
    assert sizes == (224, timm_cfg["crop_pct"], "bicubic") == (224, 0.95, "bicubic")
    assert inp.val_resize_size == int(224 / 0.95) and "timm's pretrained_cfg of resnet50.a1_in1k" in inp.notes[0]
    inp, sizes = looks([*folders, "--model", "timm/resnet50.a1_in1k", "--image_size", "64", "--crop_pct", "0.8",
                        "--interpolation", "bilinear", "--mean", "0.1", "0.2", "0.3", "--std", "1", "1", "1"])
    assert sizes == (64, 0.8, "bilinear")
    assert inp.mean_std == ((0.1, 0.2, 0.3), (1.0, 1.0, 1.0))
    inp, sizes = looks([*folders, "--model", f"hf/{tiny_vit}"])
    assert sizes == (16, 1.0, "bicubic")
    assert inp.mean_std == ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    inp, sizes = looks(["--model", "timm/resnet50.a1_in1k"])  # the embedded data keeps its own input
    assert sizes[0] == 32 and "digits's own size" in inp.notes[0]
    from utils.data.sources.digits import DIGITS_MEAN, DIGITS_STD

    assert inp.mean_std == (DIGITS_MEAN, DIGITS_STD)  # its own statistics, not the model's ImageNet ones
    assert looks(folders)[1] == (224, 0.875, "bilinear")  # torchvision names: as before
    assert parse_args([*folders, "--model", f"hf/{tiny_vit}", "--image_size", "32"]).image_size == 32  # resampled
    with pytest.raises(SystemExit) as e:  # but its 8-px patches must tile the image
        parse_args([*folders, "--model", f"hf/{tiny_vit}", "--image_size", "20"])
    assert e.value.code == 2


def test_a_processor_that_resizes_then_crops_gives_the_crop_over_the_resize(tmp_path):
    """An image processor with shortest_edge 256 and a centre crop of 192 (CLIP's and BiT's kind, no crop_pct of
    its own): the eval crop is 192 of a 256 resize, crop_pct 0.75."""
    from transformers import CLIPImageProcessor

    folder = tmp_path / "crops"
    CLIPImageProcessor(size={"shortest_edge": 256}, crop_size={"height": 192, "width": 192}, do_center_crop=True,
                       resample=3).save_pretrained(folder)
    config = data_config(f"hf/{folder}")
    assert (config["image_size"], config["crop_pct"], config["interpolation"]) == (192, 0.75, "bicubic")


@pytest.mark.slow
def test_pretrained_weights_missing_offline_fail_with_one_line(tmp_path):
    argv = [sys.executable, str(ROOT / "train_classification.py"), *TINY, "--model", "timm/resnet18", "--pretrained",
            "--output_dir", str(tmp_path / "run")]
    proc = subprocess.run(argv, env=environment({"HF_HUB_CACHE": str(tmp_path / "empty")}), capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("train_classification.py: error: pretrained: the weights of timm/resnet18 are not in "
                           "the Hugging Face cache") and "hf download timm/resnet18.a1_in1k" in last


@pytest.mark.slow
def test_a_run_on_timm_imports_wandb_only_to_report_to_it(tmp_path):
    """timm imports wandb wherever it is installed (its training utilities, which no code of ours calls): half a
    second of each run's start-up. A run on a timm model, with timm's optimizer and loss, leaves it unimported; a
    run that reports to wandb then imports it and logs (offline); one that had imported wandb keeps it."""
    run = [*TINY, "--optimizer", "lamb", "--bce_loss", "--epochs", "1", "--warmup_epochs", "0"]
    quiet, reported = [*run, "--output_dir", str(tmp_path / "quiet")], [*run, "--report_to", "wandb", "--output_dir",
                                                                       str(tmp_path / "reported")]
    code = ("import sys, train_classification\n"
            f"train_classification.main({quiet!r})\n"
            "print('wandb imported:', 'wandb' in sys.modules)\n"
            f"train_classification.main({reported!r})\n"
            "print('wandb imported:', 'wandb' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=environment({"WANDB_DIR": str(tmp_path)}), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line for line in proc.stdout.splitlines() if line.startswith("wandb imported")] == [
        "wandb imported: False", "wandb imported: True"]
    assert list(tmp_path.glob("**/offline-run-*/run-*.wandb"))
    # a process that imported wandb before timm keeps that module, not a second copy of it
    code = "import sys, wandb\nfrom utils.models.timm_library import import_timm\nimport_timm()\n" \
           "print(sys.modules['wandb'] is wandb, 'timm' in sys.modules)"
    kept = subprocess.run([sys.executable, "-c", code], env=environment(), cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert kept.stdout.split() == ["True", "True"], kept.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["timm", "hf"])
def test_namespace_models_train_on_two_processes_and_resume_bitwise(model, tiny_vit, images, tmp_path):
    from safetensors.torch import load_file

    name = "timm/resnet18" if model == "timm" else f"hf/{tiny_vit}"
    job = ["--train_dir", images / "tr", "--val_dir", images / "va", "--model", name, "--image_size", "16",
           "--batch_size", "4", "--epochs", "2", "--warmup_epochs", "0.5", "--log_every", "1", "--num_workers", "1",
           "--model_ema"]
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok([*job, "--output_dir", whole], nproc=2)
    if model == "hf":  # the kill and resume once, on the transformers model (timm's resnet18 is torchvision's)
        argv = [*job, "--output_dir", out, "--checkpoint_every_steps", "1"]
        ranks_killed(argv, "step:7", nproc=2)  # epoch 1 of 2 (5 steps each), DataLoader workers on
        ranks_ok([*argv, "--resume", "latest"], nproc=2)
        for file in ("model.safetensors", "model_ema.safetensors"):
            a, b = load_file(whole / file), load_file(out / file)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert read_json(out / "results.json")["val_top1"] == read_json(whole / "results.json")["val_top1"]
    else:
        out = whole
    results = read_json(out / "results.json")
    assert results["world_size"] == 2 and results["model"] == name
    # <output_dir>/model/ loads with the library alone and computes what our model with the EMA weights does
    ours = build_model(name, num_classes=3, class_names=["cat", "dog", "eel"])
    ours.load_state_dict(load_file(out / "model_ema.safetensors"))
    if model == "timm":
        import timm

        theirs = timm.create_model(f"local-dir:{out / 'model'}", pretrained=True)
        assert theirs.pretrained_cfg["label_names"] == ["cat", "dog", "eel"]
    else:
        from transformers import AutoModelForImageClassification

        theirs = AutoModelForImageClassification.from_pretrained(out / "model")
        assert theirs.config.id2label == {0: "cat", 1: "dog", 2: "eel"}
    pixels = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = theirs.eval()(pixels)
        assert torch.equal(getattr(logits, "logits", logits), ours.eval()(pixels))


def vit_scores(folder, pixels):
    """(predict.py's probabilities of uint8 `pixels` from the run folder, the run's recorded input)."""
    from utils.inference import EvalGraph, load_run

    run, model = load_run(folder)
    with torch.no_grad():
        return EvalGraph(model, run.input)(pixels).softmax(dim=1), run.input


@pytest.mark.slow
@pytest.mark.parametrize("model", ["timm", "hf"])
def test_a_vit_fine_tuned_at_another_size_predicts_exports_and_loads_at_it(model, tiny_vit, images, tmp_path):
    """timm's test_vit (160 px) at 64 px, training on 48 px crops (its embeddings resampled to each input), and the
    16-px transformers ViT at 32 px from its weights (interpolate_pos_encoding): each trains, records its sizes, and,
    from its run folder copied elsewhere, predicts its validation images as it validated them; its ONNX graph and its
    model/ folder (loaded by the library alone) answer as the run's model."""
    import shutil

    import numpy as np
    import onnxruntime

    import predict
    from utils.inference import EvalGraph, load_run

    name, sizes = ("timm/test_vit", ["--image_size", "64", "--train_crop_size", "48"]) if model == "timm" else \
        (f"hf/{tiny_vit}", ["--image_size", "32", "--pretrained"])
    side = int(sizes[1])
    out = tmp_path / "run"
    run_main(["--train_dir", images / "tr", "--val_dir", images / "va", "--model", name, *sizes, "--batch_size", "4",
              "--epochs", "2", "--num_workers", "0", "--no_plots", "--output_dir", out])
    recorded = read_json(out / "run.json")["input"]
    assert (recorded["val_crop_size"], recorded["train_crop_size"]) == ((64, 48) if model == "timm" else (32, 32))
    moved = shutil.copytree(out, tmp_path / "elsewhere" / "run")
    shutil.rmtree(out)
    folders = ("--train_dir", images / "tr", "--val_dir", images / "va")
    settings = parse([str(a) for a in (*folders, "--model", name, *sizes)])
    _, val, _, _ = settings.source.datasets(settings.data, settings.input)
    pixels = torch.stack([val[i]["pixel_values"] for i in range(len(val))])
    assert pixels.shape[-1] == side
    probs, _ = vit_scores(moved, pixels)
    labels = torch.as_tensor([val[i]["labels"] for i in range(len(val))])
    results = read_json(moved / "results.json")
    assert (probs.argmax(dim=1) == labels).float().mean().item() == pytest.approx(results["val_top1"])
    onnx = tmp_path / "model.onnx"
    predict.main([str(moved), "--export_onnx", str(onnx)])
    session = onnxruntime.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    run, ours = load_run(moved)
    with torch.no_grad():
        expected = EvalGraph(ours, run.input)(pixels).numpy()
    assert np.abs(session.run(None, {"pixels": pixels.numpy()})[0] - expected).max() <= 1e-4
    normalised = torch.randn(3, 3, side, side, generator=torch.Generator().manual_seed(0))
    if model == "timm":
        import timm

        theirs = timm.create_model(f"local-dir:{moved / 'model'}", pretrained=True).eval()
        answer = theirs(normalised)
    else:
        from transformers import AutoModelForImageClassification

        theirs = AutoModelForImageClassification.from_pretrained(moved / "model").eval()
        answer = theirs(normalised, interpolate_pos_encoding=True).logits
    with torch.no_grad():
        assert torch.allclose(answer, ours.eval()(normalised), atol=1e-5)


def cached_timm_weights(tmp_path, monkeypatch, name):
    """timm's pretrained weights `name` (arch.tag) in a Hugging Face cache under tmp_path, as a download leaves them
    (random weights of the architecture: nothing is downloaded); the hub's cache pointed there. The file's path."""
    import timm
    from huggingface_hub import constants
    from safetensors.torch import save_file

    snapshot = tmp_path / "hub" / f"models--timm--{name}" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    torch.manual_seed(0)
    save_file(timm.create_model(name.split(".")[0]).state_dict(), snapshot / "model.safetensors")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return snapshot / "model.safetensors"


def test_a_vit_at_another_size_starts_from_its_weights_with_its_position_embeddings_resampled(tmp_path, monkeypatch):
    """timm/test_vit.r160_in1k's weights in the Hugging Face cache (written here: nothing is downloaded), built for 64
    px: every weight is the file's but the position embeddings, which are the file's 10x10 grid resampled to 4x4 by
    timm (its class token's kept); at its own 160 px, the file's own."""
    from safetensors.torch import load_file
    from timm.layers import resample_abs_pos_embed

    from utils.models.protocol import ImageSize

    saved = load_file(cached_timm_weights(tmp_path, monkeypatch, "test_vit.r160_in1k"))
    small = build_model("timm/test_vit.r160_in1k", 3, pretrained=True, image_size=ImageSize(64)).state_dict()
    assert small["pos_embed"].shape == (1, 1 + 4 * 4, saved["pos_embed"].shape[-1])
    assert torch.equal(small["pos_embed"], resample_abs_pos_embed(saved["pos_embed"], (4, 4), num_prefix_tokens=1))
    assert all(torch.equal(small[k], saved[k]) for k in saved if k != "pos_embed" and not k.startswith("head"))
    own = build_model("timm/test_vit.r160_in1k", 3, pretrained=True, image_size=ImageSize(160)).state_dict()
    assert torch.equal(own["pos_embed"], saved["pos_embed"])


def test_init_from_a_vit_run_at_another_size_resamples_its_position_embeddings(tmp_path, capsys):
    """A test_vit's weights at 64 px given to one at 96 px by --init_from: every weight loaded as it is, but the
    position embeddings, resampled by timm from the 4x4 patch grid to 6x6 (not re-initialised), and said."""
    from safetensors.torch import save_file
    from timm.layers import resample_abs_pos_embed

    from utils.models.libraries import initialise
    from utils.models.protocol import ImageSize

    torch.manual_seed(0)
    small = build_model("timm/test_vit", 7, image_size=ImageSize(64)).state_dict()
    save_file(small, tmp_path / "model.safetensors")
    settings = parse(["--model", "timm/test_vit", "--dataset", "synthetic", "--image_size", "96", "--num_classes",
                         "7", "--init_from", str(tmp_path)])
    model = build_model("timm/test_vit", 7, image_size=ImageSize(96))
    initialise(model, settings.model, log=print)
    state = model.state_dict()
    assert torch.equal(state["pos_embed"], resample_abs_pos_embed(small["pos_embed"], (6, 6), num_prefix_tokens=1))
    assert all(torch.equal(state[k], small[k]) for k in small if k != "pos_embed")
    said = capsys.readouterr().out.splitlines()
    assert said == ["init_from: pos_embed resampled by timm to this model's input size", "init_from: weights loaded"]


@pytest.mark.parametrize("sizes, built, made", [
    (["--image_size", "224"], (224, False), {}),  # its own size: built as before
    (["--image_size", "96"], (96, False), {"img_size": 96}),
    (["--image_size", "96", "--train_crop_size", "64"], (96, True), {"img_size": 96, "dynamic_img_size": True}),
    (["--image_size", "224", "--progressive_resize", "160", "224", "0", "2", "--epochs", "3"], (224, True),
     {"img_size": 224, "dynamic_img_size": True}),
    (["--image_size", "224", "--progressive_resize", "224", "288", "0", "2", "--epochs", "3"], (224, True),
     {"img_size": 224, "dynamic_img_size": True}),  # its first train crop the eval crop, and larger ones after
])
def test_a_vit_is_built_for_its_eval_crop_and_resamples_to_each_input_when_training_crops_other_sides(sizes, built,
                                                                                                     made):
    """timm's vit_tiny_patch16_224 (its embeddings fixed at 224 unless told): built for the eval crop, and made to
    resample its embeddings to each input where the train crops are other sides (another train crop, progressive
    resizing); the model so built takes each of them."""
    from utils.models.protocol import ImageSize
    from utils.models.timm_library import _sized

    inp = input_for(parse_args(["--model", "timm/vit_tiny_patch16_224", "--train_dir", "x", *sizes]))
    size = ImageSize.of(inp)
    assert size == built and _sized("vit_tiny_patch16_224", size) == made
    model = build_model("timm/vit_tiny_patch16_224", 3, image_size=size).eval()
    with torch.no_grad():
        for side in sorted({inp.train_crop(0), inp.train_crop(2), inp.val_crop_size}):
            assert model(torch.zeros(1, 3, side, side)).shape == (1, 3)


@pytest.mark.slow
def test_a_vit_teacher_takes_every_train_crop_of_its_student(images, tmp_path, monkeypatch):
    """A pretrained ViT teacher (vit_tiny_patch16_224's weights, cached here) of a student trained with progressive
    resizing (crops of 160 then 224 px), and a run folder's ViT (trained at 64 px) teaching a student that crops 48:
    each teacher answers every train crop of its student."""

    from utils.evaluation.tasks import SingleLabel
    from utils.run.teacher import _model

    cached_timm_weights(tmp_path, monkeypatch, "vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    student = parse_args(["--model", "resnet18", "--train_dir", "x", "--teacher",
                          "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", "--teacher_pretrained", "--image_size",
                          "224", "--progressive_resize", "160", "224", "0", "2", "--epochs", "3"])
    inp = input_for(student)
    model = _model(student.teacher, student.epochs, [str(k) for k in range(1000)], inp, SingleLabel(None, 1000))[0]
    model = model.eval()
    with torch.no_grad():
        for side in (160, 224):
            assert model(torch.zeros(1, 3, side, side)).shape == (1, 1000)
    folders = ["--train_dir", images / "tr", "--val_dir", images / "va", "--batch_size", "4", "--epochs", "1",
               "--num_workers", "0", "--no_plots"]
    run_main([*folders, "--model", "timm/vit_tiny_patch16_224", "--image_size", "64", "--output_dir", tmp_path / "t"])
    run_main([*folders, "--model", "resnet18", "--image_size", "64", "--train_crop_size", "48", "--teacher",
              tmp_path / "t", "--output_dir", tmp_path / "s"])
    (saved,) = (tmp_path / "s" / "checkpoints").iterdir()
    assert read_json(saved / "training_state.json")["teacher"]["teacher"] == str(tmp_path / "t")
