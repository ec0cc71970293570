"""Multi-view test of videos: N clips x M crops of every video, softmax (multi-label: sigmoid) probabilities
averaged per video, exact on any number of processes.

The test loader's items are one clip of one video with its M crops; Accelerate shards them like any
data and pads the last batches with repeats, which gather_for_metrics drops. Every rank then adds
each gathered clip's probabilities into its video's row, so every video is counted exactly once
whatever the world size, and all ranks hold the same figures. Memory: one batch of views on the
device (--batch_size views: batch_size // M clips of M crops), and one row of class probabilities
per test video on the host (float64: 20,000 videos x 400 classes = 64 MB).
"""

import torch

from utils.evaluation.metrics import dump_rank_sums, figure_name
from utils.evaluation.scoring import scored_batches


@torch.no_grad()
def test_videos(job, loader, num_videos, model=None):
    """(figures, this rank's own sums) of `model` (default: the trained one): video-level figures (summarize's,
    named video_*), clip top-1.

    A video belongs to the rank that scored the first of its clips to arrive (any rule that gives
    each video one owner makes the per-rank sums add up to the global ones).
    """
    accelerator, model, task = job.accelerator, model or job.model, job.task
    job.share_buffers(only=model)
    model.eval()
    classes = len(job.class_names)
    sums = torch.zeros(num_videos, classes, dtype=torch.float64)
    views = torch.zeros(num_videos, dtype=torch.int64)
    labels = task.video_labels(num_videos)
    owners = torch.full((num_videos,), -1, dtype=torch.int64)
    clip_hits = clips = 0

    def score(batch):
        pixels = batch["pixel_values"]  # (B, crops, C, T, H, W)
        b, crops = pixels.shape[:2]
        probs = task.activate(model(job.inputs(pixels.flatten(0, 1))).float()).view(b, crops, -1).mean(dim=1)
        return probs, batch["labels"], batch["video"]

    for scored in scored_batches(accelerator, loader, score, job.bad_images):
        probs, label, video, owner = scored.kept()
        sums.index_add_(0, video, probs.double())
        views.index_add_(0, video, torch.ones_like(video))
        labels[video] = label.to(labels.dtype)
        for v, o in zip(video.tolist(), owner.tolist()):
            if owners[v] < 0:
                owners[v] = o
        clip_hits += task.clip_hits(probs, label)
        clips += len(label)
    scored = views > 0  # a video whose every clip failed to decode (skipped) is not scored
    mean = sums[scored] / views[scored, None]
    labels, owners = labels[scored], owners[scored]
    fields = task.averaged_fields(mean, labels)  # the averaged probabilities scored as validation scores outputs
    figures = task.figures(fields)
    own = task.own(fields, owners, accelerator.process_index)
    figures["clip_top1"] = clip_hits / max(clips, 1)
    figures["test_clips_scored"] = clips
    return figures, own


def test_row(figures, views, task):
    """What results.json, metrics.jsonl and the dashboards say of the multi-view test: the task's figures of the
    videos (video_top1 ..., or multi-label video_map ...), and the clip-level top-1 (multi-label: exact match);
    `views`: (clips, crops) of every video."""
    return {"test_clips": views[0], "test_crops": views[1],
            **{figure_name(key, "video"): figures[key] for key in task.video_keys},
            "test_videos": figures["val_samples"],
            "clip_top1": figures["clip_top1"], "test_clips_scored": figures["test_clips_scored"]}


def multiview_test(job, global_step, views, dump_sums=False):
    """--test_clips N --test_crops M (`views`: (N, M)): every val video's N x M views, softmax averaged per video, for
    the trained weights and (--model_ema) the averaged ones, as validation scores both; its row (metrics.jsonl,
    dashboards) and, with `dump_sums` (--dump_rank_metrics), eval/test/rank_<R>.json sums of the trained weights'."""
    videos = len(job.test_loader.dataset.labels)
    figures, own = test_videos(job, job.test_loader, videos)
    row = test_row(figures, views, job.task)
    line = (f"test ({row['test_clips']} clips x {row['test_crops']} crops): video {job.task.line(figures)}, clip "
            f"{job.task.clip_figure} {row['clip_top1']:.4f} ({row['test_videos']} videos)")
    if job.ema is not None:
        ema = test_row(test_videos(job, job.test_loader, videos, job.ema.module)[0], views, job.task)
        row.update({figure_name(key, ema=True): value for key, value in ema.items()
                    if key.startswith(("video_", "clip_top1"))})
        tracked = figure_name(job.task.tracked, "video", ema=True)
        line += f"; EMA video {job.task.tracked_name} {row[tracked]:.4f} loss {row['video_ema_loss']:.4f}"
    job.logger.write({"step": global_step, **row}, line)
    if dump_sums:
        dump_rank_sums(job.out / "eval" / "test", job.task.global_sums(figures), own, job.accelerator)
    return row
