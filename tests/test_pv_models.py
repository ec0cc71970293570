"""`pv/<name>`: pytorchvideo's video models fitted to our clips (utils/models/pv_library.py): names checked,
logits for any clip the backbone takes, SlowFast's two pathways from one clip, Kinetics weights from the torch
hub cache with a new head, and training on 2 processes with an exact multi-view test, a bitwise resume, the
ONNX export and predict.py."""

from pathlib import Path

import pytest
import torch
from conftest import TINY, assert_same_weights, main_fails, read_json, read_jsonl, resumed_from
from ranks import ranks_killed, ranks_ok

from utils.config.options import parse_args
from utils.models.libraries import build_model, check_clip_frames

pytest.importorskip("pytorchvideo")  # requirements-models.txt


def test_names_are_checked_in_pytorchvideos_namespace(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--dataset", "moving_digits", "--model", "pv/slowfast_r5"])
    assert e.value.code == 2 and "did you mean pv/slowfast_r50" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a video model needs video data
        parse_args([*TINY, "--model", "pv/x3d_xs"])
    assert "a video model needs video data" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the slow pathway is every 4th frame
        parse_args(["--dataset", "moving_digits", "--model", "pv/slowfast_r50", "--clip_len", "6"])
    assert "multiple of 4 frames" in capsys.readouterr().err and check_clip_frames("pv/slowfast_r50", 8) is None


@pytest.mark.parametrize("name", ["x3d_xs", "i3d_r50", "csn_r101", "r2plus1d_r50", "slowfast_r50"])
def test_a_model_gives_logits_for_small_clips_and_keeps_pytorchvideos_state_dict(name):
    from pytorchvideo.models import hub

    torch.manual_seed(0)
    model = build_model(f"pv/{name}", 5, video=True).eval()
    with torch.no_grad():
        logits = model(torch.randn(3, 3, 4, 16, 16))  # Kinetics' heads pool 8 x 7 x 7 features: these have 1 x 1 x 1
    assert logits.shape == (3, 5)
    assert not torch.allclose(logits.sum(dim=1), torch.ones(3))  # logits, not X3D's or R(2+1)D's softmax
    plain = getattr(hub, name)(pretrained=False, model_num_class=5).state_dict()
    own = model.state_dict()
    assert own.keys() == plain.keys() and all(own[k].shape == plain[k].shape for k in own)  # model/ loads into it


def test_slowfast_builds_its_slow_pathway_from_every_fourth_frame():
    model = build_model("pv/slowfast_r50", 3, video=True).eval()
    seen = []

    def record(module, inputs):  # what pytorchvideo's first block receives: [slow, fast]
        seen.append([x.clone() for x in inputs[0]])

    model.blocks[0].register_forward_pre_hook(record)
    clip = torch.arange(8, dtype=torch.float32).view(1, 1, 8, 1, 1).expand(2, 3, 8, 16, 16).contiguous()
    with torch.no_grad():
        model(clip)
    slow, fast = seen[0]
    assert slow.shape == (2, 3, 2, 16, 16) and torch.equal(fast, clip)
    assert slow[0, 0, :, 0, 0].tolist() == [0.0, 7.0]  # linspace(0, T - 1, T // alpha): spread over the clip


def test_kinetics_weights_load_from_the_torch_hub_cache_with_a_new_head(tmp_path, monkeypatch, capsys):
    from pytorchvideo.models import hub

    torch.manual_seed(1)
    kinetics = hub.x3d_xs(pretrained=False).state_dict()  # 400 classes, as the zoo's file holds them
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save({"model_state": kinetics}, cache / "X3D_XS.pyth")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # read by torch.hub at each call
    model = build_model("pv/x3d_xs", 6, video=True, pretrained=True)
    own = model.state_dict()
    head = {k for k in own if ".proj." in k}
    assert head == {"blocks.5.proj.weight", "blocks.5.proj.bias"} and own["blocks.5.proj.weight"].shape[0] == 6
    assert all(torch.equal(own[k], kinetics[k]) for k in own if k not in head)
    (cache / "X3D_XS.pyth").unlink()  # offline and not in the cache: one line naming the file
    code, err = main_fails(["--dataset", "moving_digits", "--model", "pv/x3d_xs", "--pretrained", "--output_dir",
                            tmp_path / "run"], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and f"{cache}/X3D_XS.pyth is not in the torch hub cache" in errors[0]


def pv_job(videos, out, model, *extra):
    """pytorchvideo's `model` on 4-frame 16x16 clips of the `videos` fixture: 8 train / 5 val videos, 2 classes."""
    return ["--train_dir", videos / "tr", "--val_dir", videos / "va", "--model", model, "--image_size", "16",
            "--clip_len", "4", "--frame_interval", "2", "--batch_size", "2", "--epochs", "2", "--warmup_epochs",
            "0.5", "--lr", "0.001", "--log_every", "1", "--num_workers", "1", "--no_plots", "--output_dir", out, *extra]


@pytest.mark.slow
@pytest.mark.parametrize("name, killed", [("slowfast_r50", False), ("i3d_r50", False), ("x3d_s", True)])
def test_a_model_trains_on_two_processes_resumes_bitwise_tests_alike_on_one_and_two_and_exports(name, killed, videos,
                                                                                              tmp_path):
    """SlowFast, I3D, X3D: 2 processes x batch 2 over 8 videos, 2 steps an epoch, 3 epochs; the trained weights'
    multi-view test (2 clips x 3 crops of 5 videos) on 1 and 2 processes, their ONNX export and predict.py. One of
    them is also killed after step 4 (workers on) and resumed from step_3 (mid-epoch): what a checkpoint holds is
    the library's state dict whatever the model, so the slowest two leave that to X3D."""
    whole, out = tmp_path / "whole", tmp_path / "run"
    ranks_ok(pv_job(videos, whole, f"pv/{name}", "--epochs", "3"), nproc=2)
    if killed:
        argv = pv_job(videos, out, f"pv/{name}", "--epochs", "3", "--checkpoint_every_steps", "1")
        ranks_killed(argv, "step:4", nproc=2)
        proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
        assert resumed_from(proc.stdout) == out / "checkpoints" / "step_3"
        assert_same_weights(out, whole)
        assert read_json(out / "results.json")["val_top1"] == read_json(whole / "results.json")["val_top1"]
    config = read_json(whole / "model" / "config.json")
    assert (config["library"], config["builder"], config["builder_kwargs"]) == \
        ("pytorchvideo", name, {"model_num_class": 2})
    tested = {}
    for nproc in (1, 2):
        test = tmp_path / f"test{nproc}"
        ranks_ok(pv_job(videos, test, f"pv/{name}", "--eval_only", "--init_from", whole / "model.safetensors",
                        "--test_clips", "2", "--test_crops", "3"), nproc=nproc)
        tested[nproc] = read_json(test / "results.json")
    one, two = tested[1], tested[2]
    assert one["test_videos"] == two["test_videos"] == 5 and one["test_clips_scored"] == two["test_clips_scored"] == 10
    for key in ("video_top1", "video_topk", "clip_top1", "val_top1"):
        assert one[key] == two[key], key
    assert abs(one["video_loss"] - two["video_loss"]) < 1e-6 and one["video_loss"] < 5  # trained, not diverged
    # predict.py's ONNX export of the trained run: the graph (pathways, pools) against PyTorch
    from utils.inference import export_onnx, load_run

    run, model = load_run(whole)
    diff = export_onnx(model, run, tmp_path / f"{name}.onnx")
    assert diff is not None and diff < 1e-4, diff
    # predict.py on the run: each file's val clip scored as validation scored it
    rows = tmp_path / "rows.jsonl"
    ranks_ok([whole, videos / "va", "--output", rows], nproc=1, target="predict:main")
    rows = read_jsonl(rows)
    assert len(rows) == 5
    correct = sum(r["labels"][0] == Path(r["path"]).parent.name for r in rows)
    assert correct == round(read_json(whole / "results.json")["val_top1"] * 5)
