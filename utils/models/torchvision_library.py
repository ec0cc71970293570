"""Plain names: torchvision's classification and video models (utils/models/torchvision_models.py builds
them), saved as safetensors plus a config.json that torchvision.models.get_model rebuilds them from."""

import json
import re

from torchvision import models
from torchvision.models import ConvNeXt, SwinTransformer, VisionTransformer

from utils.core.io import write_text_atomic
from utils.models import torchvision_models as tv
from utils.models.checkpointing import checkpoint_blocks
from utils.models.library import INF, MATCH_PREV, Library, ModelError

# The repeated blocks of torchvision's classification and video models, which --grad_checkpointing recomputes.
BLOCKS = (models.resnet.BasicBlock, models.resnet.Bottleneck, models.video.resnet.BasicBlock,
          models.video.resnet.Bottleneck, models.vision_transformer.EncoderBlock,
          models.swin_transformer.SwinTransformerBlock, models.swin_transformer.SwinTransformerBlockV2,
          models.convnext.CNBlock, models.efficientnet.MBConv, models.efficientnet.FusedMBConv,
          models.mobilenetv2.InvertedResidual, models.mobilenetv3.InvertedResidual, models.regnet.ResBottleneckBlock,
          models.maxvit.MaxVitLayer, models.video.mvit.MultiscaleBlock)


class Torchvision(Library):
    name = "torchvision"
    load_snippet = ("import json, torchvision\nfrom safetensors.torch import load_file\n"
                    "cfg = json.load(open('config.json'))\n"
                    "model = torchvision.models.get_model(cfg['architecture'], num_classes=cfg['num_classes'], "
                    "**cfg['builder_options'])\nmodel.load_state_dict(load_file('model.safetensors'))")
    builds_pretrained = False  # initialise() loads torchvision's weights after the build
    named_weights = True
    recommends_input = False  # the data's defaults (ImageNet's, Kinetics') apply

    def check_name(self, arch):
        return tv.check_model_name(arch)

    def is_video(self, arch):
        return tv.is_video_model(arch)

    def build(self, arch, num_classes, *, video, zero_init_residual, drop_path, dropout, pretrained, class_names,
              in_chans=3):
        return tv.build_model(arch, num_classes, video, zero_init_residual, drop_path, dropout, in_chans)

    def pretrained_classes(self, arch):
        try:
            return len(models.get_model_weights(arch).DEFAULT.meta["categories"])
        except (ValueError, KeyError, AttributeError):  # no weights for it
            return None

    def check_image_size(self, arch, size, frames=None):
        return tv.check_image_size(arch, size, frames)

    def layer_matcher(self, model):
        """ViT: the patch embedding, class token and position embedding, then each encoder block, the final norm
        with the last block, the head. Swin and ConvNeXt: `features` holds the stem, then stages of blocks (odd
        indices) with a downsampling step between them (even), which joins the next stage's first block as timm
        groups its own Swin and ConvNeXt; their final norm with the last block, the classifier last."""
        if isinstance(model, VisionTransformer):
            return _vit_layer
        if isinstance(model, (SwinTransformer, ConvNeXt)):
            return _staged_layer
        return None

    def grad_checkpointing(self, model):
        """The model's residual or transformer blocks (BLOCKS), each through torch.utils.checkpoint."""
        count = checkpoint_blocks(model, BLOCKS)
        if not count:
            raise ModelError(f"grad_checkpointing: {type(model).__name__} has none of the blocks it checkpoints "
                             f"(ResNet, ViT, Swin, ConvNeXt, EfficientNet, MobileNet, RegNet, MaxViT, MViT blocks); "
                             f"drop the option")
        return f"grad_checkpointing: {count} blocks recompute their activations in the backward pass"

    def classifier_parameters(self, model):
        """The last Linear layer."""
        return list(tv.head(model).parameters())

    def save(self, model, arch, folder, inputs, class_names):
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model.safetensors"))
        config = dict(library="torchvision", architecture=arch, num_classes=len(class_names),
                      builder_options=tv.build_options(arch), labels=list(class_names), input=inputs)
        write_text_atomic(folder / "config.json", json.dumps(config, indent=2) + "\n")


def _vit_layer(name):
    if name.startswith(("conv_proj.", "class_token", "encoder.pos_embedding")):
        return (0,)
    if block := re.match(r"encoder\.layers\.encoder_layer_(\d+)\.", name):
        return (1, int(block[1]))
    return (1, MATCH_PREV) if name.startswith("encoder.ln.") else (INF,)


def _staged_layer(name):
    if step := re.match(r"features\.(\d+)\.(\w+)", name):
        index = int(step[1])
        if index == 0:
            return (0,)
        return (1, index, int(step[2])) if index % 2 else (1, index + 1, 0)
    return (1, MATCH_PREV) if name.startswith("norm.") else (INF,)
