"""`pv/<name>`: pytorchvideo's video models (SlowFast, X3D, I3D, C2D, Slow, CSN, R(2+1)D-50), made to fit our
clips. pytorchvideo is imported only when a `pv/` name is used, and only `pytorchvideo.models` (its
`transforms` module does not import on current torchvision; we use our own transforms).

pytorchvideo's builders are laid out for Kinetics clips: the head's average pool has a kernel sized for
8 x 224 x 224 (or 13 x 160 x 160 for X3D) and some heads end in a softmax. Here the head's pools become
adaptive (any clip length and frame side the backbone takes) and the head gives logits. Neither has
parameters, so the state dict keeps pytorchvideo's names: its Kinetics-400 weights, --init_from and
model/ load as they are. SlowFast takes two pathways; a forward pre-hook builds them from our one clip
on the device (the fast pathway is the clip, the slow one every alpha-th frame, as PySlowFast samples
it), so the data, the multi-view test, predict.py, EMA, FSDP, checkpoints and the export are unchanged.
"""

import difflib
import json
from pathlib import Path

import torch

from utils.core.io import write_text_atomic
from utils.core.network import unreachable
from utils.models.errors import ModelError, missing_library
from utils.models.grad_checkpointing import checkpoint_blocks
from utils.models.protocol import Library
from utils.models.stem import with_stem
from utils.models.weights import load_matching

ZOO = "https://dl.fbaipublicfiles.com/pytorchvideo/model_zoo/kinetics"
# name: (Kinetics-400 weights file, the crop its zoo entry was trained at, SlowFast's alpha or None)
MODELS = {
    "slowfast_r50": ("SLOWFAST_8x8_R50.pyth", 224, 4),
    "slowfast_r101": ("SLOWFAST_8x8_R101.pyth", 224, 4),
    "slowfast_16x8_r101_50_50": ("SLOWFAST_16x8_R101_50_50.pyth", 224, 4),
    "slow_r50": ("SLOW_8x8_R50.pyth", 224, None),
    "c2d_r50": ("C2D_8x8_R50.pyth", 224, None),
    "i3d_r50": ("I3D_8x8_R50.pyth", 224, None),
    "csn_r101": ("CSN_32x2_R101.pyth", 224, None),
    "r2plus1d_r50": ("R2PLUS1D_16x4_R50.pyth", 224, None),
    "x3d_xs": ("X3D_XS.pyth", 182, None),
    "x3d_s": ("X3D_S.pyth", 182, None),
    "x3d_m": ("X3D_M.pyth", 256, None),
    "x3d_l": ("X3D_L.pyth", 356, None),
}
# pytorchvideo's model zoo normalises Kinetics clips with these (0..1 scale).
PV_MEAN, PV_STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)


def _hub():
    try:
        from pytorchvideo.models import hub
    except ImportError:
        raise missing_library("pv/", "pytorchvideo") from None
    return hub


def fit_head(model):
    """The head's (and SlowFast's pathway pool's) average pools made adaptive, its activation removed: logits
    for any clip size. Neither has parameters: the state dict is unchanged."""
    for block in model.blocks[-2:]:
        for name, module in list(block.named_modules()):
            if isinstance(module, torch.nn.AvgPool3d):
                parent, _, leaf = name.rpartition(".")
                setattr(block.get_submodule(parent) if parent else block, leaf, torch.nn.AdaptiveAvgPool3d(1))
    head = model.blocks[-1]
    if getattr(head, "activation", None) is not None:
        head.activation = None
    return model


def two_pathways(model, alpha):
    """SlowFast on one clip (B, C, T, H, W): [slow, fast] made by a forward pre-hook, the slow pathway T // alpha
    frames spread over the clip (PySlowFast's sampling), the fast one the clip itself."""
    def pathways(module, inputs):
        (clip,) = inputs
        index = torch.linspace(0, clip.shape[2] - 1, clip.shape[2] // alpha, device=clip.device).long()
        return ([clip.index_select(2, index), clip],)

    model.register_forward_pre_hook(pathways)
    return model


class PyTorchVideo(Library):
    name, prefix, card_header = "pytorchvideo", "pv/", "library_name: pytorchvideo\n"
    load_snippet = ("import json, torch\nfrom pytorchvideo.models import hub\nfrom safetensors.torch import load_file\n"
                    "cfg = json.load(open('config.json'))\n"
                    "model = getattr(hub, cfg['builder'])(pretrained=False, **cfg['builder_kwargs'])\n"
                    "model.load_state_dict(load_file('model.safetensors'))  # then see cfg['head'], cfg['pathways']")

    def check_name(self, arch):
        _hub()
        if arch in MODELS:
            return
        close = difflib.get_close_matches(arch, list(MODELS), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(self.prefix + c for c in close)}?" if close else \
            f"; pytorchvideo's video models here: {', '.join(MODELS)}"
        raise ValueError(f"'{self.prefix}{arch}' is not a pytorchvideo model{hint}")

    def is_video(self, arch):
        return True

    def build_image_or_video(self, arch, num_classes, *, drop_path, dropout, pretrained, class_names, in_chans=3,
                             image_size=None):
        if drop_path is not None:
            raise ModelError(f"--drop_path: pytorchvideo's {arch} has no stochastic depth; drop the option")
        kwargs = {"model_num_class": num_classes} | ({"dropout_rate": dropout} if dropout is not None else {})
        model = with_stem(fit_head(getattr(_hub(), arch)(pretrained=False, **kwargs)), in_chans, self.prefix + arch)
        if pretrained:
            reinit = load_matching(model, kinetics_state(arch), "pretrained")  # the classifier: other classes
            if any(".proj." not in key for key in reinit):
                raise ModelError(f"pretrained: {arch}'s Kinetics weights do not fit its layers: {reinit[:3]}")
        alpha = MODELS[arch][2]
        return two_pathways(model, alpha) if alpha else model

    def pretrained_classes(self, arch):
        return 400  # its model zoo's Kinetics-400 weights

    def data_config(self, arch):
        return dict(image_size=MODELS[arch][1], mean=PV_MEAN, std=PV_STD,
                    origin=f"pytorchvideo's Kinetics-400 model zoo ({arch})")

    def check_clip_frames(self, arch, frames):
        alpha = MODELS[arch][2]
        if arch in ("i3d_r50", "c2d_r50") and frames < 2:  # their stem and stage pools halve the time axis
            raise ModelError(f"{self.prefix}{arch} halves the time axis twice: give clips of at least 2 frames")
        if alpha and frames % alpha:
            raise ModelError(f"{self.prefix}{arch} makes its slow pathway of every {alpha}th frame: give clips of a "
                             f"multiple of {alpha} frames (--clip_len x --num_segments), got {frames}")

    def grad_checkpointing(self, model):
        """pytorchvideo's residual blocks (ResBlock: SlowFast, X3D, I3D, C2D, Slow, CSN, R(2+1)D), each through
        torch.utils.checkpoint."""
        from pytorchvideo.models.resnet import ResBlock

        count = checkpoint_blocks(model, ResBlock)
        if not count:
            raise ModelError(f"grad_checkpointing: {type(model).__name__} has no residual blocks to checkpoint; drop "
                             f"the option")
        return f"grad_checkpointing: {count} blocks recompute their activations in the backward pass"

    def classifier(self, model):
        return model.blocks[-1].proj

    def save(self, model, arch, folder, inputs, class_names):
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model.safetensors"))
        alpha = MODELS[arch][2]
        config = dict(library="pytorchvideo", builder=arch, builder_kwargs={"model_num_class": len(class_names)},
                      head="the head's AvgPool3d replaced by AdaptiveAvgPool3d(1), its activation removed (logits)",
                      pathways=f"[clip[:, :, linspace(0, T - 1, T // {alpha})], clip]" if alpha else None,
                      labels=list(class_names), input=inputs)
        write_text_atomic(folder / "config.json", json.dumps(config, indent=2) + "\n")


def kinetics_state(arch):
    """pytorchvideo's Kinetics-400 weights of `arch`, from the torch hub cache (downloaded when not there and
    the network is reachable); a one-line error offline."""
    url = f"{ZOO}/{MODELS[arch][0]}"
    file = Path(torch.hub.get_dir()) / "checkpoints" / MODELS[arch][0]
    why = None if file.is_file() else unreachable(url)  # said at once, not after the download's wait
    try:
        if why is None:
            checkpoint = torch.hub.load_state_dict_from_url(url, map_location="cpu", progress=False, check_hash=False)
            return checkpoint["model_state"] if "model_state" in checkpoint else checkpoint
    except Exception as e:  # offline: URLError, socket errors...
        why = type(e).__name__
    raise ModelError(f"pretrained: {file} is not in the torch hub cache and {url} could not be downloaded ({why}); "
                     f"fetch it where there is network and copy it there (or set TORCH_HOME to a folder whose "
                     f"hub/checkpoints/ holds it)")
