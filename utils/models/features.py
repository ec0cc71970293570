"""A model's features, read while it scores: what its classifier reads (the penultimate layer: pooled, dropout
off in eval), or the output of a layer named as `model.named_modules()` names it, each flattened to one vector an
input. Read by a hook, so the model is the one that scores (its weights, its wrappers, its frame averaging
untouched), and the features come from the same forward pass as the logits.

An image model scoring clips (TSN: frame_averaged) runs its layers on B x T frames: a clip's vector is the mean of
its frames'. A forward pass run twice for one batch (--tta flip) gives the mean of the two.
"""

import difflib

import torch

from utils.models.errors import ModelError
from utils.models.libraries import classifier


class Features:
    """`with Features(model, name, layer) as features:` (`model` as its library built it, unwrapped), then after each
    batch's forward passes `features.take(rows)`: a (rows, dim) float32 tensor, the vectors of those `rows` inputs."""

    def __init__(self, model, name, layer=None):
        self.module, self.layer = _module(model, name, layer), layer
        self.seen = []

    def __enter__(self):
        if self.layer is None:  # what the classifier reads
            self.handle = self.module.register_forward_pre_hook(lambda module, inputs: self._keep(inputs[0]))
        else:
            self.handle = self.module.register_forward_hook(lambda module, inputs, output: self._keep(output))
        return self

    def __exit__(self, *exc):
        self.handle.remove()

    def _keep(self, tensor):
        if isinstance(tensor, (tuple, list)):  # a layer returning several tensors: its first
            tensor = tensor[0]
        self.seen.append(tensor.detach().float())

    def take(self, rows):
        """The vectors of the last forward passes, each input's (its frames' mean), averaged over those passes."""
        if not self.seen:
            raise ModelError(f"embeddings: {self._where()} was not run by the model's forward pass; name another "
                             f"layer")
        parts = []
        for tensor in self.seen:
            if len(tensor) % rows:
                raise ModelError(f"embeddings: {self._where()} gives {len(tensor)} rows for {rows} inputs; name "
                                 f"another layer")
            parts.append(tensor.reshape(rows, len(tensor) // rows, -1).mean(dim=1))
        self.seen = []
        return torch.stack(parts).mean(dim=0)

    def _where(self):
        return "the classifier's input" if self.layer is None else f"layer {self.layer!r}"


def _module(model, name, layer):
    if layer is None:
        try:
            return classifier(model, name)
        except ModelError as e:
            raise ModelError(f"embeddings: {e}; name a layer with --embedding_layer") from None
    modules = dict(model.named_modules())
    if layer not in modules or not layer:
        close = difflib.get_close_matches(layer, [n for n in modules if n], n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ModelError(f"embedding_layer: {name} has no layer {layer!r}{hint}; names as model.named_modules() "
                         f"gives them")
    return modules[layer]
