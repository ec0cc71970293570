"""An exponential moving average of the weights (--model_ema), built on torch's AveragedModel.

Every --model_ema_steps optimizer steps: ema = decay * ema + (1 - decay) * weights, for the
parameters and the buffers (BatchNorm's running statistics too, as torchvision's references do).
With --model_ema_warmup the decay starts low and grows as timm's does, min(decay, (1 + n) / (10 + n))
after n updates, so that early EMA weights are not dominated by the random initialisation. Each rank
keeps its own copy. Its parameters stay equal across ranks, because the weights they follow are (DDP).
Its buffers follow each rank's own BatchNorm statistics; before scoring and saving, the training script
gives every rank rank 0's (Job.share_buffers). The copy is registered with Accelerate, so every
checkpoint holds it (rank 0's) and a resumed run continues it exactly.
"""

import torch
from torch.optim.swa_utils import AveragedModel

from utils.core.io import usual_permissions


def _ema_update(decay, warmup):
    """AveragedModel's multi_avg_fn: called per (device, dtype) group of tensors after the first update."""
    @torch.no_grad()
    def update(averaged, current, num_averaged):
        if not torch.is_floating_point(averaged[0]):  # counters (BatchNorm's num_batches_tracked): the current one
            torch._foreach_copy_(averaged, current)
            return
        n = float(num_averaged)
        d = min(decay, (1 + n) / (10 + n)) if warmup else decay
        torch._foreach_lerp_(averaged, current, 1 - d)  # averaged += (1 - d) * (current - averaged)
    return update


class _TrainedOnly(AveragedModel):
    """An average whose state (what a checkpoint keeps) leaves out the parameters that do not train: their average is
    themselves, which a resumed run builds again (--lora's frozen backbone)."""

    def state_dict(self, *args, **kwargs):
        state = super().state_dict(*args, **kwargs)
        for name, p in self.named_parameters():
            if not p.requires_grad:
                state.pop(name, None)
        return state

    def load_state_dict(self, state, strict=True, assign=False):
        frozen = {name for name, p in self.named_parameters() if not p.requires_grad}
        missing, unexpected = super().load_state_dict(state, strict=False, assign=assign)
        if strict and (set(missing) - frozen or unexpected):
            raise RuntimeError(f"the average's state does not fit: missing {sorted(set(missing) - frozen)[:3]}, "
                               f"unexpected {sorted(unexpected)[:3]}")
        return missing, unexpected


def build_ema(model, device, decay, warmup, trained_only=False):
    """The averaged copy of `model` (its unwrapped module) on `device`, at `decay` (timm's warmup of it: `warmup`);
    `trained_only`: its saved state without the parameters that do not train."""
    kind = _TrainedOnly if trained_only else AveragedModel
    return kind(model, device=device, multi_avg_fn=_ema_update(decay, warmup), use_buffers=True)


def update_ema(ema, model, global_step, every):
    """Fold the current weights into the average when `global_step` is a multiple of `every`."""
    if ema is not None and global_step % every == 0:
        ema.update_parameters(model)


def save_ema(module, path):
    """The averaged weights (the EMA's `module`) as a plain state dict, loadable like model.safetensors."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(path))
    usual_permissions(path)
