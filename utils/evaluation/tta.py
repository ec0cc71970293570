"""Test-time augmentation, --tta flip: a view's class probabilities averaged with those of its horizontal flip
(the last axis: an image's or every frame's width). Returned as log-probabilities, so that top-k reads them as
logits and cross-entropy over them is the averaged prediction's loss."""

import math

import torch

CHOICES = ("flip",)


def scores(model, pixels, tta=None):
    """The model's logits for `pixels`, or with tta="flip" the log of the softmax averaged with the flipped view's."""
    logits = model(pixels).float()
    if tta is None:
        return logits
    flipped = model(pixels.flip(-1)).float()
    return torch.stack([logits.log_softmax(dim=1), flipped.log_softmax(dim=1)]).logsumexp(dim=0) - math.log(2)
