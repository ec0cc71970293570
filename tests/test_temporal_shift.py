"""--temporal_shift (TSM, utils/models/temporal_shift.py): which channels move which way in time, where the shift
sits in a residual block, and what is refused."""

import pytest
import torch

from utils.config.options import parse_args
from utils.models.libraries import build_model
from utils.models.temporal_shift import shift
from utils.models.errors import ModelError


def test_an_eighth_of_the_channels_comes_from_the_next_frame_and_an_eighth_from_the_previous():
    # 2 clips x 3 frames, 16 channels: every value is 100 * clip + 10 * frame + channel // 2 (channels pair up)
    clip, frame, channel = torch.meshgrid(torch.arange(2), torch.arange(3), torch.arange(16), indexing="ij")
    x = (100 * clip + 10 * frame + channel // 2).float().view(6, 16, 1, 1).expand(6, 16, 2, 2)
    out = shift(x.contiguous(), frames=3).view(2, 3, 16, 2, 2)[..., 0, 0]
    x = x.view(2, 3, 16, 2, 2)[..., 0, 0]
    assert torch.equal(out[:, :2, :2], x[:, 1:, :2]) and (out[:, 2, :2] == 0).all()  # from the next frame
    assert torch.equal(out[:, 1:, 2:4], x[:, :2, 2:4]) and (out[:, 0, 2:4] == 0).all()  # from the previous frame
    assert torch.equal(out[:, :, 4:], x[:, :, 4:])  # the rest stays
    assert out[1, 0, 0] == 110  # clip 1 reads its own next frame, never clip 0's: clips do not mix


def test_the_shift_feeds_each_residual_branch_and_changes_a_clips_logits():
    torch.manual_seed(0)
    plain = build_model("resnet18", 4, video=True, zero_init_residual=False).eval()
    shifted = build_model("resnet18", 4, video=True, zero_init_residual=False, temporal_shift=4).eval()
    shifted.load_state_dict(plain.state_dict())  # no parameters of its own: the same weights load
    clips = torch.randn(2, 3, 4, 32, 32)
    seen = []
    shifted.layer1[0].conv1.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    with torch.no_grad():
        a, b = plain(clips), shifted(clips)
    assert not torch.allclose(a, b)
    # what the first block's conv1 received: its input shifted, the last frame's first eighth of channels zero
    assert (seen[0].view(2, 4, 64, 8, 8)[:, -1, :8] == 0).all() and (seen[0].view(2, 4, 64, 8, 8)[:, -1, 8:] != 0).any()


def test_what_tsm_cannot_shift_is_refused_in_one_line(capsys):
    for argv in (["--temporal_shift"], ["--dataset", "moving_digits", "--model", "mc3_18", "--temporal_shift"]):
        with pytest.raises(SystemExit) as e:
            parse_args(argv)  # image data; a 3D model
        assert e.value.code == 2 and "temporal_shift: shifts channels in time" in capsys.readouterr().err
    with pytest.raises(ModelError, match="mobilenet_v3_small has no ResNet-style residual blocks"):
        build_model("mobilenet_v3_small", 4, video=True, temporal_shift=4)


@pytest.mark.slow
def test_a_tsm_runs_folder_predicts_with_its_shift(videos, tmp_path):
    """predict.py on a TSM run's val videos gives its val top-1 and loss: the model it builds from the run folder
    shifts channels as the run trained (without the shift, the same weights give other logits)."""
    import math
    import os

    import predict
    from conftest import run_main

    results = run_main(["--train_dir", videos / "tr", "--val_dir", videos / "va", "--model", "resnet18",
                        "--temporal_shift", "--image_size", "32", "--clip_len", "4", "--batch_size", "2", "--epochs",
                        "1", "--warmup_epochs", "0", "--num_workers", "0", "--output_dir", tmp_path / "run"])
    rows = predict.main([str(tmp_path / "run"), str(videos / "va"), "--top_k", "2", "--num_workers", "0"])
    truth = [os.path.basename(os.path.dirname(r["path"])) for r in rows]
    nll = -sum(math.log(dict(zip(r["labels"], r["probs"]))[t]) for r, t in zip(rows, truth)) / len(rows)
    assert nll == pytest.approx(results["val_loss"], abs=1e-4)
    assert sum(r["labels"][0] == t for r, t in zip(rows, truth)) == round(results["val_top1"] * len(rows))
