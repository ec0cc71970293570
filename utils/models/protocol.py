"""The questions the script asks of a model library, answered by one class per library (torchvision,
`timm/`, `hf/`; utils/models/libraries.py picks it by the name's prefix). A new library is one new
module with one subclass; nothing outside utils/models/ asks which library a model came from.

`arch` is the model name without its prefix (`resnet50`, `vit_base_patch16_224.augreg_in21k`,
`google/vit-base-patch16-224` or a local folder).
"""

from typing import NamedTuple

from utils.models.errors import ModelError

MATCH_PREV = 99999  # timm's MATCH_PREV_GROUP: an ordinal ending in it joins the layer before (a final norm)
INF = float("inf")  # timm's ordinal of what no rule matched: the head, the last layer


class ImageSize(NamedTuple):
    """The input a model is built for: `side` px square (the eval crop: what it is scored and exported at), and
    whether training shows it other sides too (another train crop, progressive resizing)."""
    side: int
    varying: bool = False

    @classmethod
    def of(cls, inp):
        """A run's from its Input: its eval crop (what it is scored and exported at), varying when training crops other
        sides (another train crop, progressive resizing)."""
        return cls(inp.val_crop_size, inp.train_crop_size != inp.val_crop_size or bool(inp.progressive_resize))


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
              in_chans=3, image_size=None):
        """A model with a `num_classes`-way classifier taking `in_chans` channels (an image model on video data:
        frame_averaged), built for ImageSize `image_size` where its input size is fixed (None: its own)."""
        model = self.build_image_or_video(arch, num_classes, drop_path=drop_path, dropout=dropout,
                                          pretrained=pretrained, class_names=class_names, in_chans=in_chans,
                                          image_size=image_size)
        return frame_averaged(model) if video and not self.is_video(arch) else model

    def build_image_or_video(self, arch, num_classes, *, drop_path, dropout, pretrained, class_names, in_chans=3,
                             image_size=None):
        """The model, its pretrained weights loaded when the library loads them itself; its stem for `in_chans`
        channels (the library's own way where it has one, else utils/models/stem.py), pretrained weights adapted;
        a model laid out for one input size (a ViT's position embeddings) made for ImageSize `image_size`."""
        raise NotImplementedError

    def fitted(self, model, state):
        """`state` (--init_from's weights) with what the library resamples to `model`'s shapes where they differ (a
        ViT's position embeddings for another input size); the rest as it is."""
        return state

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

    def classifier(self, model):
        """The model's final classifier layer, found the way the library defines it: what it reads is the model's
        feature vector (the penultimate layer: predict.py --embeddings, the probes)."""
        raise NotImplementedError

    def classifier_parameters(self, model):
        """The parameters of the model's classifier head, found the way the library defines it."""
        return list(self.classifier(model).parameters())

    def lora_targets(self, model):
        """--lora's default layers of `model` as peft's LoraConfig takes them (names, or a regex of whole names); None
        when the library has no default for it."""
        return None

    def save(self, model, arch, folder, inputs, class_names):
        """`model` written to `folder` in the form the library itself loads; `inputs`: the eval input
        (image_size, resize, interpolation, mean, std)."""
        raise NotImplementedError


def frame_averaged(model):
    """Make a 2D image model take clips (B, C, T, H, W): each frame is scored alone, as an image, and
    a clip's logits are the mean of its frames' (TSN's consensus). Done with forward hooks on the
    model itself, so its state dict keeps torchvision's names: pretrained weights, --init_from and
    --freeze_backbone work unchanged, and model.safetensors loads into the plain image model."""
    def frames_as_images(module, inputs):
        (clips,) = inputs
        b, c, t, h, w = clips.shape
        module._clip_shape = (b, t)
        return clips.transpose(1, 2).reshape(b * t, c, h, w)

    def average_frames(module, inputs, logits):
        b, t = module._clip_shape
        return logits.view(b, t, -1).mean(dim=1)

    model.register_forward_pre_hook(frames_as_images)
    model.register_forward_hook(average_frames)
    return model
