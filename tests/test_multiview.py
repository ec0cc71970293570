"""The multi-view arithmetic (utils/evaluation/multiview.py) on views whose logits differ a lot: a video's figures come
from the mean of its views' softmaxes, never from the mean of their logits."""

from types import SimpleNamespace

import pytest
import torch

from utils.data.loading.bad_files import BadImages
from utils.evaluation.metrics import load_metrics
from utils.evaluation.tasks import SingleLabel
from utils.evaluation.multiview import test_videos as score_videos

# Per video, its views' logits: 2 clips x 2 crops. Video 0's mean softmax favours class 1 (its label), its mean
# logit class 0; video 1 is confident once and unsure three times; video 2's views agree.
VIEWS = {0: [[10, 0, 0], [0, 2, 0], [0, 2, 0], [0, 2, 0]],
         1: [[0, 0, 12], [1, 0, 0], [1, 0, 0], [0, 1, 0]],
         2: [[0, 3, 0], [0, 3, 1], [0, 4, 0], [1, 3, 0]]}
LABELS = {0: 1, 1: 2, 2: 1}
CROPS = 2


class LogitsOfTheInput(torch.nn.Module):
    """The clip's pixels at (t, h, w) = (0, 0, 0) are its logits: each view says what it was told to."""

    def forward(self, clips):
        return clips[:, :, 0, 0, 0]


def batches():
    """One item per (video, clip): its CROPS views, (crops, C=3 logits, T, H, W); batches of 2 items."""
    items = []
    for video, views in VIEWS.items():
        for clip in range(len(views) // CROPS):
            crops = torch.tensor(views[clip * CROPS:(clip + 1) * CROPS], dtype=torch.float32)
            items.append({"pixel_values": crops[:, :, None, None, None].expand(CROPS, 3, 2, 2, 2),
                          "labels": LABELS[video], "video": video})
    for start in range(0, len(items), 2):
        chunk = items[start:start + 2]
        yield {"pixel_values": torch.stack([i["pixel_values"] for i in chunk]),
               "labels": torch.tensor([i["labels"] for i in chunk]), "video": torch.tensor([i["video"] for i in chunk]),
               "valid": torch.ones(len(chunk), dtype=torch.bool), "source": [""] * len(chunk),
               "error": [""] * len(chunk)}


def test_a_videos_figures_come_from_the_mean_of_its_views_softmaxes(fresh_accelerate_state):
    from accelerate import Accelerator

    job = SimpleNamespace(accelerator=Accelerator(cpu=True), model=LogitsOfTheInput(), class_names=["a", "b", "c"],
                          share_buffers=lambda only=None: None, bad_images=BadImages(skip=False),
                          inputs=lambda pixels: pixels, task=SingleLabel(load_metrics(), 3))
    figures, own = score_videos(job, list(batches()), len(VIEWS))

    means = {v: torch.tensor(views, dtype=torch.float64).softmax(dim=1).mean(dim=0) for v, views in VIEWS.items()}
    nll = [-float(means[v][LABELS[v]].log()) for v in VIEWS]
    assert figures["val_samples"] == 3 and figures["test_clips_scored"] == 6
    assert figures["val_loss"] == pytest.approx(sum(nll) / 3, rel=1e-6)  # float32 softmax, float64 sums
    assert figures["correct_top1"] == sum(int(means[v].argmax()) == LABELS[v] for v in VIEWS) == 3
    # the mean of the logits would have missed video 0 and would have scored a far lower loss on video 1
    logit_means = {v: torch.tensor(views, dtype=torch.float64).mean(dim=0) for v, views in VIEWS.items()}
    assert int(logit_means[0].argmax()) != LABELS[0]
    assert abs(-float(logit_means[1].log_softmax(0)[LABELS[1]]) - nll[1]) > 0.3
    # a clip is scored by the mean softmax of its crops: clip 0 of video 0 leans to class 0 (10 beats 2)
    clip_hits = sum(int(torch.tensor(views[c * CROPS:(c + 1) * CROPS], dtype=torch.float64).softmax(1).mean(0).argmax())
                    == LABELS[v] for v, views in VIEWS.items() for c in range(len(views) // CROPS))
    assert figures["clip_top1"] == clip_hits / 6
    assert own["samples"] == 3 and own["loss_sum"] == pytest.approx(sum(nll), rel=1e-6)


def test_a_clip_that_could_not_be_decoded_is_left_out_of_its_videos_mean(fresh_accelerate_state):
    """--skip_bad_videos: clip 0 of video 0 failed to decode (zeros, valid False): the video is the mean of its one
    clip left, 5 clips are scored, and a video whose every clip failed is not scored at all."""
    from accelerate import Accelerator

    items = list(batches())
    items[0]["valid"][0] = False  # video 0, clip 0
    items[0]["source"][0], items[0]["error"][0] = "v0.mp4", "InvalidDataError: broken"
    job = SimpleNamespace(accelerator=Accelerator(cpu=True), model=LogitsOfTheInput(), class_names=["a", "b", "c"],
                          share_buffers=lambda only=None: None, bad_images=BadImages(skip=True),
                          inputs=lambda pixels: pixels, task=SingleLabel(load_metrics(), 3))
    figures, _ = score_videos(job, items, len(VIEWS))
    assert figures["test_clips_scored"] == 5 and figures["val_samples"] == 3
    kept = torch.tensor(VIEWS[0][CROPS:], dtype=torch.float64).softmax(dim=1).mean(dim=0)  # clip 1's crops
    others = [torch.tensor(VIEWS[v], dtype=torch.float64).softmax(dim=1).mean(dim=0) for v in (1, 2)]
    nll = [-float(kept[LABELS[0]].log())] + [-float(m[LABELS[v]].log()) for m, v in zip(others, (1, 2))]
    assert figures["val_loss"] == pytest.approx(sum(nll) / 3, rel=1e-6)
    assert job.bad_images.found == {"v0.mp4": "InvalidDataError: broken"}
