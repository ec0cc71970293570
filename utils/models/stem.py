"""A model's first convolution (its stem) for images of other than 3 channels, for the libraries whose builders cannot
be asked for another channel count (torchvision, pytorchvideo, a pretrained transformers model): the RGB stem built,
then replaced by one whose weights are the RGB ones adapted.

The adaptation is the one timm's `adapt_input_conv` made the convention (timm does it for its own models, given
`in_chans`): for one channel the three colour kernels summed (a gray image then gives what the RGB model gives for the
same image repeated three times), for more the kernels repeated over the channels and scaled by 3/C (the response to
an input of equal channels stays the same). Ours because torchvision and pytorchvideo have none, and timm is not a
requirement of torchvision models."""

import math

import torch

from utils.models.errors import ModelError


def adapt_input_weight(weight, in_chans):
    """A (O, 3, k...) convolution weight for `in_chans` input channels, as the module's docstring says."""
    if in_chans == weight.shape[1]:
        return weight
    if in_chans == 1:
        return weight.sum(dim=1, keepdim=True)
    repeats = math.ceil(in_chans / weight.shape[1])
    return weight.repeat(1, repeats, *(1,) * (weight.dim() - 2))[:, :in_chans] * (weight.shape[1] / in_chans)


def adapts(own_shape, state_shape):
    """Whether a state tensor of `state_shape` is a stem weight for 3 channels that adapt_input_weight fits to a
    parameter of `own_shape` (the same but for its input channels)."""
    return (len(own_shape) >= 4 and len(own_shape) == len(state_shape) and state_shape[1] == 3 and
            own_shape[1] != 3 and own_shape[:1] == state_shape[:1] and own_shape[2:] == state_shape[2:])


def replace_stem(model, in_chans):
    """Replace `model`'s first convolution taking 3 channels by one taking `in_chans`, its weights adapted; modules
    that check the channel count they are given (transformers' patch embeddings: `num_channels`) are told. Returns
    the stem's name, None when the model has no such convolution (nothing is changed then)."""
    for path, module in model.named_modules():  # noqa: B007 - `path`, the stem's name, is read after the loop
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d)) and module.in_channels == 3:
            break
    else:
        return None
    conv = type(module)(in_chans, module.out_channels, module.kernel_size, stride=module.stride,
                        padding=module.padding, dilation=module.dilation, groups=module.groups,
                        bias=module.bias is not None, padding_mode=module.padding_mode)
    with torch.no_grad():
        conv.weight.copy_(adapt_input_weight(module.weight, in_chans))
        if module.bias is not None:
            conv.bias.copy_(module.bias)
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, conv)
    for sub in model.modules():
        if getattr(sub, "num_channels", None) == 3 and not isinstance(sub, torch.nn.GroupNorm):
            sub.num_channels = in_chans
    config = getattr(model, "config", None)
    if getattr(config, "num_channels", None) == 3:
        config.num_channels = in_chans
    return path


def with_stem(model, in_chans, name):
    """`model` with its stem taking `in_chans` channels (utils/models/stem.py); a ModelError when it has none to
    adapt."""
    if in_chans != 3 and replace_stem(model, in_chans) is None:
        raise ModelError(f"{name}: has no convolution taking 3 channels to adapt to {in_chans}; give 3-channel data "
                         f"(--bands with three bands) or another model")
    return model
