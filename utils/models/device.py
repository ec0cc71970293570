"""The model made ready for the processes' devices before Accelerate wraps it: SyncBatchNorm, channels-last."""

import torch

from utils.models.errors import ModelError


def for_device(model, accelerator, *, sync_bn=False, channels_last=False):
    """`sync_bn` (--sync_bn: BatchNorm statistics over all processes) and `channels_last` (--channels_last), before
    Accelerate wraps the model."""
    if sync_bn:
        if accelerator.num_processes > 1 and accelerator.device.type == "cpu":
            raise ModelError("sync_bn: torch's SyncBatchNorm runs on GPUs (CUDA, XPU, HPU) only, not on CPU "
                             "processes: drop --sync_bn here")
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if channels_last:
        # 3-D convolutions (video models, whichever library) take the 5-D format; an image model on clips scores frames.
        volumes = any(p.dim() == 5 for p in model.parameters())
        model = model.to(memory_format=torch.channels_last_3d if volumes else torch.channels_last)
    return model
