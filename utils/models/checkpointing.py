"""--grad_checkpointing for models whose library has no switch of its own (torchvision's, pytorchvideo's): each
residual or transformer block keeps only its input in the forward pass and recomputes the rest in the backward
(torch.utils.checkpoint, non-reentrant), so activation memory grows with the number of blocks, not their depth.

Two things keep the arithmetic that of a run without it. Dropout and stochastic depth draw the same masks again in
the recomputation (checkpoint's preserve_rng_state). BatchNorm would update its running statistics a second time
when the block is recomputed (momentum applied twice): its buffers are put back as the forward pass left them.
The block's forward is replaced on the module itself, so the state dict keeps its names and a deep copy (the EMA,
the saved model) recomputes its own blocks.
"""

import contextlib
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
    if torch.compiler.is_compiling():  # the compiled backward recomputes pure operations only: buffers are not updated
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False,
                      context_fn=functools.partial(_contexts, self), **kwargs)


def _contexts(block):
    """(around the forward pass, around the recomputation)."""
    return contextlib.nullcontext(), _batchnorm_statistics_kept(block)


@contextlib.contextmanager
def _batchnorm_statistics_kept(block):
    saved = [(buffer, buffer.clone()) for module in block.modules()
             if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) for buffer in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
