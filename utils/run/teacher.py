"""--teacher: the model a student is distilled from (utils/training/losses.py computes the loss).

It is a run of this script (its folder, or one of its checkpoints), or a model name with its library's pretrained
weights (--teacher_pretrained). It runs in eval mode and without gradients, on this process's device and under its
mixed precision, outside DDP/FSDP and the optimizer, on exactly the input the student sees (erased and mixed); when
it was trained on another normalisation, that input is put back into its own. Its weights are never saved with the
student's; what it is (the option's value and a digest of its weights) goes into every checkpoint, so that a
resume with another teacher is refused (run_folder.check_teacher).
"""

import hashlib
from pathlib import Path

import torch

from utils.core.errors import UserError
from utils.data.catalog import is_video, resolve_input
from utils.models.libraries import data_config, pretrained_model
from utils.training.checkpoints import STATE_FILE
from utils.run.trained import load_run


class TeacherError(UserError, ValueError):
    """A --teacher that cannot teach this run; the message is one line."""


class Teacher:
    """Logits of the teacher for a batch of the student's model input."""

    def __init__(self, model, identity, renormalise, autocast):
        self.model, self.identity, self.autocast = model, identity, autocast
        self.scale, self.shift = renormalise or (None, None)

    def __call__(self, pixels):
        """(The caller, utils/training/losses.Objective, holds no gradients for it.)"""
        if self.scale is not None:
            shape = (1, -1) + (1,) * (pixels.dim() - 2)
            if self.scale.device != pixels.device:
                self.scale, self.shift = self.scale.to(pixels.device), self.shift.to(pixels.device)
            pixels = pixels * self.scale.view(shape) + self.shift.view(shape)
        with self.autocast():
            return self.model(pixels)


def build_teacher(args, class_names, inp, accelerator):
    """The Teacher of --teacher (None without one), on the device; the start-up line says what it is."""
    if args.teacher is None or args.eval_only:
        return None
    with torch.random.fork_rng(devices=[]):  # its random initialisation leaves the run's random stream as it was
        model, stats, origin = _model(args, class_names, inp)
    model = model.to(accelerator.device).eval().requires_grad_(False)
    identity = {"teacher": args.teacher, "weights_sha256": weights_digest(model)}
    renormalise = _renormalisation(inp.mean_std, stats)
    accelerator.print(f"teacher: {origin} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
                      f"weights sha256 {identity['weights_sha256'][:12]}); --distill {args.distill}, alpha "
                      f"{args.distill_alpha:g}" + (f", T {args.distill_temperature:g}" if args.distill == "soft" else "")
                      + ("; its input renormalised to its own mean/std" if renormalise else ""))
    return Teacher(model, identity, renormalise, accelerator.autocast)


def _model(args, class_names, inp):
    """(the teacher's model on the CPU, its input's (mean, std) or None when it declares none, what it is)."""
    folder = Path(args.teacher)
    if folder.is_dir():
        if args.teacher_pretrained:
            raise TeacherError("teacher_pretrained: for a --teacher model name; a run folder brings its own weights")
        checkpoint = folder if (folder / STATE_FILE).is_file() else None  # runs/<run>/checkpoints/<name>
        run = folder.resolve().parent.parent if checkpoint else folder
        ema = checkpoint is None and (run / "model_ema.safetensors").is_file()  # the weights --keep_best followed
        run_args, names, model = load_run(run, ema=ema, checkpoint=checkpoint)
        if names != list(class_names):
            raise TeacherError(f"teacher: {folder} was trained on other classes ({len(names)}: "
                               f"{', '.join(names[:5])}...) than this data's ({len(class_names)}); give a teacher "
                               f"trained on the same classes")
        if is_video(run_args) != inp.video:
            kinds = ("videos", "images") if inp.video else ("images", "videos")
            raise TeacherError(f"teacher: {folder} was trained on {kinds[1]}, this run trains on {kinds[0]}")
        weights = "EMA weights" if ema else "weights"
        return model, resolve_input(run_args).mean_std, f"{run_args.model} of {folder} ({weights})"
    if not args.teacher_pretrained:
        raise TeacherError(f"teacher: {args.teacher} is not a folder; a model name needs --teacher_pretrained (random "
                           f"weights teach nothing), or give a run folder of this script")
    model = pretrained_model(args.teacher, len(class_names), inp.video, class_names, log=lambda line: None)
    recommended = data_config(args.teacher)
    stats = (recommended["mean"], recommended["std"]) if "mean" in recommended else None
    return model, stats, f"{args.teacher} with its pretrained weights"


def _renormalisation(student, teacher):
    """(scale, shift) per channel taking the student's normalised input to the teacher's; None when they agree
    (or either is unknown: synthetic input is not normalised, a torchvision name declares nothing)."""
    if student is None or teacher is None or tuple(map(tuple, student)) == tuple(map(tuple, teacher)):
        return None
    (mean_s, std_s), (mean_t, std_t) = (tuple(torch.tensor(v, dtype=torch.float32) for v in pair)
                                        for pair in (student, teacher))
    return std_s / std_t, (mean_s - mean_t) / std_t


def weights_digest(model):
    """sha256 of the model's state dict (names and bytes, in name order): the same weights, whatever file they came
    from, give the same digest."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
