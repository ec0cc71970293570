"""Plain names: torchvision's classification and video models (utils/models/torchvision_models.py builds
them), saved as safetensors plus a config.json that torchvision.models.get_model rebuilds them from."""

import json

from utils.core.io import write_text_atomic
from utils.models import torchvision_models as tv
from utils.models.library import Library


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

    def build(self, arch, num_classes, *, video, zero_init_residual, drop_path, dropout, pretrained, class_names):
        return tv.build_model(arch, num_classes, video, zero_init_residual, drop_path, dropout)

    def check_image_size(self, arch, size, frames=None):
        return tv.check_image_size(arch, size, frames)

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
