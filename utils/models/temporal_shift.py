"""--temporal_shift: TSM, the temporal shift module (Lin, Gan and Han, ICCV 2019), for a 2D image model on
video data. A 2D model scores each frame alone (TSN, protocol.frame_averaged) and so cannot see
which way something moves; TSM shifts a fraction of the channels one frame forward and as many one frame
back in time at the start of each residual branch, so that every block mixes neighbouring frames, at no
cost in parameters (ImageNet weights load unchanged) and next to none in compute. No maintained library
has it for today's torch (mmaction2's needs mmcv < 2.2), hence our own: a forward pre-hook on each residual
block's first convolution, the block's identity path left unshifted (the "residual shift" of the paper).
"""

import torch

from utils.models.errors import ModelError

FOLD_DIV = 8  # 1/8 of the channels forward, 1/8 back, as the paper and mmaction2 do


def shift(frames_in, frames, fold_div=FOLD_DIV):
    """(B*T, C, H, W) frames of B clips of T = `frames`: channels [0, C/8) take the next frame's values,
    [C/8, C/4) the previous frame's, the rest stay; the clip's ends get zeros where nothing shifts in."""
    nt, c, h, w = frames_in.shape
    x = frames_in.view(nt // frames, frames, c, h, w)
    fold = c // fold_div
    out = torch.zeros_like(x)
    out[:, :-1, :fold] = x[:, 1:, :fold]
    out[:, 1:, fold:2 * fold] = x[:, :-1, fold:2 * fold]
    out[:, :, 2 * fold:] = x[:, :, 2 * fold:]
    return out.view(nt, c, h, w)


def residual_blocks(model):
    """The ResNet-style residual blocks (torchvision's and timm's BasicBlock and Bottleneck), with their conv1."""
    return [m for m in model.modules() if type(m).__name__ in ("BasicBlock", "Bottleneck") and hasattr(m, "conv1")]


def add_temporal_shift(model, frames, name):
    """Shift the residual branch of every block of `model` (a frame-averaged 2D model) over clips of `frames`."""
    blocks = residual_blocks(model)
    if not blocks:
        raise ModelError(f"temporal_shift: {name} has no ResNet-style residual blocks (BasicBlock/Bottleneck with "
                         f"conv1) to shift; use a ResNet or ResNeXt (torchvision or timm/), or drop the option")
    for block in blocks:
        block.conv1.register_forward_pre_hook(lambda module, inputs: (shift(inputs[0], frames),))
    return model
