"""--grad_checkpointing: blocks keep only their input in the forward pass and recompute the rest in the backward
(torch.utils.checkpoint, non-reentrant), so activation memory grows with the number of blocks, not their depth.
`checkpoint_blocks` does it for models whose library has no switch of its own (torchvision's, pytorchvideo's).

Two things keep the arithmetic that of a run without it, whichever library checkpoints. Dropout and stochastic
depth draw the same masks again in the recomputation (checkpoint's preserve_rng_state). BatchNorm would update its
running statistics a second time when its block is recomputed (momentum applied twice, num_batches_tracked counted
twice; timm's own checkpointing does so): `keep_batchnorm_statistics` puts them back as the forward pass left them.
Both work on the modules themselves, so the state dict keeps its names and a deep copy (the EMA, the saved model)
recomputes its own blocks.
"""

import functools
import types

import torch
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model, block_types):
    """Checkpoint every outermost module of `block_types` in `model`; returns how many."""
    count = 0

    def visit(module):
        nonlocal count
        for child in module.children():
            if isinstance(child, block_types):
                child.forward = types.MethodType(_checkpointed_forward, child)
                count += 1
            else:
                visit(child)
    visit(model)
    return count


def _checkpointed_forward(self, *args, **kwargs):
    forward = functools.partial(type(self).forward, self)
    if not torch.is_grad_enabled():  # evaluation: nothing is kept for a backward anyway
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def keep_batchnorm_statistics(model):
    """Every BatchNorm of `model` leaves its buffers as they were when it runs again inside a backward pass (a
    checkpointed block's recomputation). Returns how many BatchNorm layers it watches."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for layer in layers:
        layer.forward = types.MethodType(_statistics_kept_forward, layer)
    return len(layers)


def _statistics_kept_forward(self, *args, **kwargs):
    forward = functools.partial(type(self).forward, self)
    if not (self.training and _recomputing()):
        return forward(*args, **kwargs)
    saved = [buffer.clone() for buffer in self.buffers()]
    try:  # a recomputation may be stopped inside this very layer, once it has what the backward needs
        return forward(*args, **kwargs)
    finally:
        with torch.no_grad():
            for buffer, value in zip(self.buffers(), saved):
                buffer.copy_(value)


def _recomputing():
    # torch has no public flag for "inside a backward pass"; torch.utils.checkpoint reads this one itself. A forward
    # pass runs outside any graph task (-1); a recomputation runs inside the backward's. A compiled backward
    # recomputes pure operations only, without the buffer updates.
    return not torch.compiler.is_compiling() and torch._C._current_graph_task_id() != -1
