"""The questions the script asks of a model library, answered by one class per library (torchvision,
`timm/`, `hf/`; utils/models/libraries.py picks it by the name's prefix). A new library is one new
module with one subclass; nothing outside utils/models/ asks which library a model came from.

`arch` is the model name without its prefix (`resnet50`, `vit_base_patch16_224.augreg_in21k`,
`google/vit-base-patch16-224` or a local folder).
"""

from utils.models.torchvision_models import ModelError, frame_averaged

MATCH_PREV = 99999  # timm's MATCH_PREV_GROUP: an ordinal ending in it joins the layer before (a final norm)
INF = float("inf")  # timm's ordinal of what no rule matched: the head, the last layer


def missing_library(prefix, package):
    """The one-line error for a namespace whose library is not installed (requirements-models.txt)."""
    return ModelError(f"{prefix}<name> models need {package}, which is not installed: pip install -r "
                      f"requirements-models.txt (or pip install {package})")


class Library:
    name = ""  # written into model cards and config files: torchvision, timm, hf
    prefix = ""  # what --model starts with
    card_header = ""  # the model card's front matter line naming the library on the Hub
    load_snippet = ""  # how the pushed model folder loads, with {repo}
    builds_pretrained = True  # whether build(pretrained=True) loads the weights itself (torchvision's come later)
    named_weights = False  # whether --weights names one of its weight sets (torchvision's enums)
    recommends_input = True  # whether data_config is the library's own recommendation (start-up notes say so)

    def check_name(self, arch):
        """Raise ValueError, with close matches, when `arch` names no model of the library."""
        raise NotImplementedError

    def is_video(self, arch):
        """Whether the model takes clips (B, C, T, H, W) itself; an image model on video scores frames."""
        return False

    def build(self, arch, num_classes, *, video, zero_init_residual, drop_path, dropout, pretrained, class_names,
              in_chans=3):
        """A model with a `num_classes`-way classifier taking `in_chans` channels (an image model on video data:
        frame_averaged)."""
        model = self.build_image_or_video(arch, num_classes, drop_path=drop_path, dropout=dropout,
                                          pretrained=pretrained, class_names=class_names, in_chans=in_chans)
        return frame_averaged(model) if video and not self.is_video(arch) else model

    def build_image_or_video(self, arch, num_classes, *, drop_path, dropout, pretrained, class_names, in_chans=3):
        """The model, its pretrained weights loaded when the library loads them itself; its stem for `in_chans`
        channels (the library's own way where it has one, else utils/models/stem.py), pretrained weights adapted."""
        raise NotImplementedError

    def pretrained_classes(self, arch):
        """How many classes the classifier of the library's pretrained weights of `arch` has (None: unknown)."""
        return None

    def data_config(self, arch):
        """The input the library recommends: some of image_size, mean, std, interpolation, crop_pct, and
        `origin` (where they came from); {} when it recommends nothing."""
        return {}

    def check_image_size(self, arch, size, frames=None):
        """ModelError when the model cannot take size x size input (of `frames` frames)."""

    def check_clip_frames(self, arch, frames):
        """ModelError when a video model cannot take clips of `frames` frames."""

    def layer_matcher(self, model):
        """--layer_decay: how the model's parameters fall into layers, input to output, as timm's
        `group_parameters` takes it (a dict of regexes, or a function of a parameter's name giving a tuple
        ordinal; an ordinal ending in MATCH_PREV joins the layer before it, one of INF is the head); None when
        the library cannot tell."""
        return None

    def grad_checkpointing(self, model):
        """--grad_checkpointing: make `model` recompute its blocks' activations in the backward pass; a one-line
        description of what was done, or a ModelError when the model has nothing to checkpoint."""
        raise ModelError(f"grad_checkpointing: not available for {self.name} models; drop the option")

    def classifier_parameters(self, model):
        """The parameters of the model's classifier head, found the way the library defines it."""
        raise NotImplementedError

    def save(self, model, arch, folder, inputs, class_names):
        """`model` written to `folder` in the form the library itself loads; `inputs`: the eval input
        (image_size, resize, interpolation, mean, std)."""
        raise NotImplementedError
