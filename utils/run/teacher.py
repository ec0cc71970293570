"""--teacher: the model a student is distilled from (utils/training/objective.py computes the loss).

It is a run of this script (its folder, or one of its checkpoints), or a model name with its library's pretrained
weights (--teacher_pretrained). It runs in eval mode and without gradients, on this process's device and under its
mixed precision, outside DDP/FSDP and the optimizer, on exactly the input the student sees (erased and mixed); when
it was trained on another normalisation, that input is put back into its own. Its weights are never saved with the
student's; what it is (its name or folder, and a digest of its weights) goes into every checkpoint, so that a
resume with another teacher is refused (run_folder.check_teacher).
"""

import hashlib
from pathlib import Path

import torch

from utils.core.errors import UserError
from utils.data.sources.protocol import IMAGENET_MEAN, IMAGENET_STD
from utils.data.sources.video_files import KINETICS_MEAN, KINETICS_STD
from utils.evaluation.tasks import SingleLabel, kind_named
from utils.models.libraries import check_clip_frames, check_image_size, data_config, pretrained_model
from utils.models.protocol import ImageSize
from utils.run.trained import load_run, read_run
from utils.training.checkpoints import STATE_FILE


class TeacherError(UserError, ValueError):
    """A --teacher that cannot teach this run; the message is one line."""


class Teacher:
    """Logits of the teacher for a batch of the student's model input (the caller holds no gradients for it)."""

    def __init__(self, model, identity, renormalise, autocast):
        self.model, self.identity, self.autocast = model, identity, autocast
        self.renormalise = renormalise  # (scale, shift) per channel, on the device; None: the student's input as it is

    def __call__(self, pixels):
        if self.renormalise is not None:
            scale, shift = (t.view((1, -1) + (1,) * (pixels.dim() - 2)) for t in self.renormalise)
            pixels = pixels * scale + shift
        with self.autocast():
            return self.model(pixels)


def build_teacher(settings, class_names, accelerator, task):
    """The Teacher of --teacher (None without one), on the device; the start-up line says what it is. The student
    learns from a teacher of its own kind of labels (`task`, utils/evaluation/tasks.py): a multi-label one from a
    teacher trained on multi-label data (its sigmoid), a single-label one from a softmax."""
    losses, inp = settings.losses, settings.input
    if losses.teacher is None or settings.folder.eval_only:
        return None
    with torch.random.fork_rng(devices=[]):  # its random initialisation leaves the run's random stream as it was
        model, stats, name, source, origin = _model(losses.teacher, settings.schedule.epochs, class_names, inp, task)
    model = model.to(accelerator.device).eval().requires_grad_(False)
    if settings.model.channels_last:  # the student's input comes in this format
        model = model.to(memory_format=torch.channels_last_3d if inp.video else torch.channels_last)
    identity = {"teacher": source, "weights_sha256": weights_digest(model)}
    renormalise = _renormalisation(inp.mean_std, stats)
    if renormalise is not None:
        renormalise = tuple(t.to(accelerator.device) for t in renormalise)
    accelerator.print(f"teacher: {name} with {origin} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M "
                      f"parameters, sha256 {identity['weights_sha256'][:12]}); --distill {losses.distill}, alpha "
                      f"{losses.distill_alpha:g}" + (f", T {losses.distill_temperature:g}"
                                                     if losses.distill == "soft" else "")
                      + ("; its input renormalised to its own mean/std" if renormalise else ""))
    return Teacher(model, identity, renormalise, accelerator.autocast)


def _same_kind(task, teacher_kind, teacher):
    """Refuse a teacher whose kind of labels (a kind's class) is not the student's `task`'s."""
    if task.name != teacher_kind.name:
        raise TeacherError(f"teacher: {teacher} teaches {teacher_kind.labels_text} a sample, this run's data has "
                           f"{task.labels_text} a sample; give a teacher trained on the same kind of labels (a run "
                           f"folder of this script)")


def _model(teacher, epochs, class_names, inp, task):
    """(the model --teacher `teacher` names on the CPU, its input's (mean, std), its model name, the folder or name it
    was given by (resolved), where its weights come from), for a student of `epochs` epochs of input `inp`."""
    folder = Path(teacher)
    if not folder.is_dir():
        _same_kind(task, SingleLabel, f"{teacher}'s pretrained classifier")
        if inp.channels != 3 or inp.pixel_max is not None:
            raise TeacherError(f"teacher: {teacher}'s pretrained weights see 8-bit RGB, this run's input "
                               f"{inp.channels} channels of its files' own bits; give a run folder trained on them")
        _check_input(epochs, teacher, inp)
        sizes = _train_sizes(epochs, inp)  # a ViT made for the student's crops, its embeddings resampled
        model = pretrained_model(teacher, len(class_names), inp.video, class_names, log=lambda line: None,
                                 image_size=ImageSize(sizes[-1], varying=len(sizes) > 1))
        recommended = data_config(teacher)  # a torchvision name recommends nothing: ImageNet's, Kinetics' then
        stats = (recommended["mean"], recommended["std"]) if "mean" in recommended else \
            (KINETICS_MEAN, KINETICS_STD) if inp.video else (IMAGENET_MEAN, IMAGENET_STD)
        return model, stats, teacher, teacher, "its pretrained weights"
    folder = folder.resolve()
    checkpoint = folder if (folder / STATE_FILE).is_file() else None  # runs/<run>/checkpoints/<name>
    run = folder.parent.parent if checkpoint else folder
    ema = checkpoint is None and (run / "model_ema.safetensors").is_file()  # the weights --keep_best followed
    weights = folder / ("model_ema.safetensors" if ema else "model.safetensors")
    if (run / "config.yaml").is_file() and not weights.is_file():
        raise TeacherError(f"teacher: {weights} does not exist: " + (
            "a sharded (FSDP) checkpoint cannot teach; give the finished run's folder" if checkpoint else
            "the run has not finished; give one of its checkpoints (<run>/checkpoints/<name>)"))
    trained = read_run(run)  # what the run recorded, not its data; a ViT's embeddings resampled to other crops
    _, model = load_run(run, ema=ema, checkpoint=checkpoint,
                        varying=_train_sizes(epochs, inp) != [trained.input.val_crop_size])
    names = trained.classes
    if names != list(class_names):
        raise TeacherError(f"teacher: {folder} was trained on other classes ({len(names)}: {', '.join(names[:5])}...) "
                           f"than this data's ({len(class_names)}); give a teacher trained on the same classes")
    _same_kind(task, kind_named(trained.label_kind), folder)
    if trained.input.video != inp.video:
        kinds = ("videos", "images") if inp.video else ("images", "videos")
        raise TeacherError(f"teacher: {folder} was trained on {kinds[1]}, this run trains on {kinds[0]}")
    if inp.video and trained.input.frames != inp.frames:
        raise TeacherError(f"teacher: {folder} took clips of {trained.input.frames} frames, this run's have "
                           f"{inp.frames} (--clip_len x --num_segments): give the same")
    seen = lambda i: (i.channels, i.bands, i.pixel_max, i.file_format)  # noqa: E731 (which pixels, scaled how)
    if seen(trained.input) != seen(inp):
        raise TeacherError(f"teacher: {folder} saw {trained.input.channels} channels (bands {trained.input.bands}, "
                           f"divided by {trained.input.pixel_max}), this run's input is {inp.channels} (bands "
                           f"{inp.bands}, divided by {inp.pixel_max}); give a teacher trained on the same bands")
    _check_input(epochs, trained.model, inp)
    return model, trained.input.mean_std, trained.model, str(folder), f"{folder}'s {'EMA ' if ema else ''}weights"


def _check_input(epochs, name, inp):
    """The teacher takes the student's train input: its size (every train crop size; progressive resizing's first
    and last), and for video its clip length."""
    try:
        for size in _train_sizes(epochs, inp):
            check_image_size(name, size, inp.frames)
        if inp.video:
            check_clip_frames(name, inp.frames)
    except ValueError as e:
        raise TeacherError(f"teacher: {e}") from None


def _train_sizes(epochs, inp):
    """The sides of the student's train crops, smallest first (progressive resizing's first and last)."""
    return sorted({inp.train_crop(0), inp.train_crop(epochs - 1)})


def _renormalisation(student, teacher):
    """(scale, shift) per channel taking the student's normalised input to the teacher's; None when they agree
    (or the student's input is not normalised: synthetic data)."""
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
