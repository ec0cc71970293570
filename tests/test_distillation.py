"""--teacher: distillation from a run of this script (or a pretrained model by name). The teacher sees exactly the
student's erased and mixed input, in eval mode and without gradients; it is neither trained, nor saved, nor in the
optimizer; what it is goes into every checkpoint, and a resume with another teacher is refused. With LAMB, layer
decay, BCE and gradient checkpointing on top, a run SIGKILLed mid-epoch on 2 processes resumes to the same bits."""

import json
import shutil

import pytest
import torch
from conftest import TINY, assert_same_weights, main_fails, read_json, resume_job, resumed_from, run_main
from ranks import ranks_killed, ranks_ok, run_ranks
from safetensors.torch import load_file, save_file

from utils.run.teacher import _renormalisation


def resnet18_job(images, out, workers, *extra):
    """conftest's resume job on resnet18 (a teacher of ImageNet's statistics); a student's --model in `extra` wins."""
    return resume_job(images, out, workers, "--model", "resnet18", *extra)


@pytest.fixture(scope="module")
def teacher_run(images, tmp_path_factory):
    """A finished resnet18 run of that job, the teacher of this file's tests."""
    out = tmp_path_factory.mktemp("teacher") / "run"
    run_main(resnet18_job(images, out, 0))
    return out


@pytest.mark.slow
def test_the_teacher_sees_the_students_mixed_and_erased_input_in_eval_mode_without_gradients(images, teacher_run,
                                                                                              tmp_path, capsys):
    import torchvision

    calls = []

    def record(module, inputs):
        if isinstance(module, (torchvision.models.ResNet, torchvision.models.MobileNetV3)):
            calls.append((type(module).__name__, module.training, torch.is_grad_enabled(), inputs[0].clone()))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        run_main([*resnet18_job(images, tmp_path / "run", 0, "--model", "mobilenet_v3_small", "--teacher", teacher_run,
                              "--mixup_alpha", "0.4", "--random_erase", "0.5", "--max_train_steps", "4")])
    finally:
        handle.remove()
    out = capsys.readouterr().out
    # both ImageNet's statistics: nothing renormalised
    assert f"teacher: resnet18 with {teacher_run}'s weights" in out and "renormalised" not in out
    training = [c for c in calls if c[1] and c[0] == "MobileNetV3"]
    taught = [c for c in calls if c[0] == "ResNet"]
    assert len(training) == len(taught) == 4
    for student, teacher in zip(training, taught):
        assert student[2] and not teacher[1] and not teacher[2]  # the teacher: eval mode, no gradients
        assert torch.equal(student[3], teacher[3])  # the very pixels the student trained on, mixed and erased
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_4" / "training_state.json").read_text())
    assert state["teacher"]["teacher"] == str(teacher_run) and len(state["teacher"]["weights_sha256"]) == 64


@pytest.mark.slow
def test_a_run_folder_and_its_last_checkpoint_teach_with_the_same_weights(images, teacher_run):
    """--teacher runs/<run> and --teacher runs/<run>/checkpoints/<last>: the same model, the same digest."""
    from utils.config.options import parse_args
    from utils.config.settings import input_for
    from utils.evaluation.tasks import task_for
    from utils.run.teacher import _model, weights_digest

    last = sorted((teacher_run / "checkpoints").iterdir())[-1]
    digests = []
    for teacher in (teacher_run, last):
        args = parse_args([str(a) for a in resnet18_job(images, teacher_run, 0, "--teacher", teacher)])
        model, stats, name, source, origin = _model(args.teacher, args.epochs, ["cat", "dog", "eel"], input_for(args),
                                                    task_for(False, 3))
        assert name == "resnet18" and source == str(teacher.resolve()) and stats == input_for(args).mean_std
        digests.append(weights_digest(model))
    assert digests[0] == digests[1] == weights_digest_of_file(teacher_run / "model.safetensors")


@pytest.mark.slow
def test_a_run_folder_with_an_ema_teaches_with_its_averaged_weights(images, teacher_run, tmp_path):
    """A finished --model_ema run teaches with model_ema.safetensors: the weights its validation, best/ and model/
    followed, not the raw ones."""
    from utils.config.options import parse_args
    from utils.config.settings import input_for
    from utils.evaluation.tasks import task_for
    from utils.run.teacher import _model, weights_digest

    run = tmp_path / "ema_run"
    shutil.copytree(teacher_run, run)
    raw = load_file(run / "model.safetensors")
    save_file({k: v * 0.5 if v.is_floating_point() else v for k, v in raw.items()}, run / "model_ema.safetensors")
    args = parse_args([str(a) for a in resnet18_job(images, teacher_run, 0, "--teacher", run)])
    model, _, _, _, origin = _model(args.teacher, args.epochs, ["cat", "dog", "eel"], input_for(args),
                                    task_for(False, 3))
    assert origin == f"{run.resolve()}'s EMA weights"
    assert weights_digest(model) == weights_digest_of_file(run / "model_ema.safetensors")
    assert weights_digest(model) != weights_digest_of_file(run / "model.safetensors")


def weights_digest_of_file(path):
    import torchvision

    from utils.run.teacher import weights_digest

    model = torchvision.models.resnet18(num_classes=3)
    model.load_state_dict(load_file(path))
    return weights_digest(model)


def test_a_teacher_taking_other_statistics_gets_the_students_input_in_its_own():
    raw = torch.rand(2, 3, 4, 4)
    student, teacher = ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3)), ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    as_student, as_teacher = ((raw - torch.tensor(m).view(1, 3, 1, 1)) / torch.tensor(s).view(1, 3, 1, 1)
                              for m, s in (student, teacher))
    scale, shift = _renormalisation(student, teacher)
    assert torch.allclose(as_student * scale.view(1, 3, 1, 1) + shift.view(1, 3, 1, 1), as_teacher, atol=1e-5)
    assert _renormalisation(teacher, teacher) is None and _renormalisation(None, teacher) is None


@pytest.mark.parametrize("extra, message", [
    (("--teacher", "resnet18", "--teacher_pretrained"),
     "resnet18's pretrained classifier has 1000 classes and the data 7"),
    (("--teacher", "REFERENCE"), "was trained on other classes (3: cat, dog, eel...) than this data's (7)"),
    (("--teacher", "REFERENCE", "--teacher_pretrained"), "teacher_pretrained: for a --teacher model name"),
    (("--teacher", "hf/nobody/no-such-model", "--teacher_pretrained"), "hf/nobody/no-such-model: not in the Hugging "
                                                                       "Face cache and HF_HUB_OFFLINE is set"),
    (("--teacher", "timm/resnet18.no_such_tag", "--teacher_pretrained"), "is not a timm pretrained model"),
    (("--teacher", "vit_b_16", "--teacher_pretrained", "--num_classes", "1000"), "teacher: vit_b_16 takes --image_size "
                                                                                 "224 only, got 16"),
    (("--teacher", "UNFINISHED"), "model.safetensors does not exist: the run has not finished; give one of its "
                                  "checkpoints"),
    (("--teacher", "UNREADABLE"), "config.yaml: this version of the script cannot read it (num_clases: unknown key "),
])
def test_a_teacher_that_cannot_teach_this_run_is_one_line(extra, message, teacher_run, tmp_path, capsys):
    unfinished, unreadable = tmp_path / "unfinished", tmp_path / "unreadable"  # runs of the synthetic classes
    for folder in (unfinished, unreadable):
        folder.mkdir()
        (folder / "labels.json").write_text(json.dumps({i: f"class_{i}" for i in range(7)}))
    (unfinished / "config.yaml").write_text("dataset: synthetic\nnum_classes: 7\n")
    (unreadable / "config.yaml").write_text("dataset: synthetic\nnum_clases: 7\n")
    (unreadable / "model.safetensors").write_bytes(b"")
    extra = [{"REFERENCE": str(teacher_run), "UNFINISHED": str(unfinished), "UNREADABLE": str(unreadable)}.get(e, e)
             for e in extra]
    code, err = main_fails([*TINY, *extra, "--output_dir", tmp_path / "run"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_with_lamb_layer_decay_bce_and_a_teacher_and_another_teacher_is_refused(
        images, teacher_run, tmp_path):
    """timm's test_convnext (LayerNorm, no BatchNorm) distilled from the reference resnet18 run (other mean/std:
    its input is renormalised), LAMB, layer decay, BCE with a threshold, gradient checkpointing, MixUp and erasing:
    2 processes with a worker each, 5 steps an epoch over 3 epochs, killed after step 7, resumed from step_6."""
    pytest.importorskip("timm")
    teacher = tmp_path / "teacher"  # a copy whose weights the end of the test changes
    teacher.mkdir()
    for name in ("config.yaml", "labels.json", "model.safetensors"):
        shutil.copy(teacher_run / name, teacher / name)
    job = ("--model", "timm/test_convnext", "--optimizer", "lamb", "--lr", "0.004", "--weight_decay", "0.02",
           "--layer_decay", "0.6", "--bce_loss", "--bce_target_thresh", "0.2", "--teacher", teacher,
           "--distill_temperature", "2", "--grad_checkpointing", "--mixup_alpha", "0.2", "--random_erase", "0.25")
    whole, out = tmp_path / "whole", tmp_path / "run"
    first = ranks_ok(resnet18_job(images, whole, 1, *job), nproc=2)
    assert "layer_decay 0.6: " in first.stdout and "its input renormalised to its own mean/std" in first.stdout
    argv = resnet18_job(images, out, 1, *job, "--checkpoint_every_steps", "1", "--keep_last", "2")
    ranks_killed(argv, "step:7", nproc=2)
    proc = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert resumed_from(proc.stdout) == out / "checkpoints" / "step_6"
    assert_same_weights(out, whole)
    assert read_json(out / "results.json")["val_loss"] == read_json(whole / "results.json")["val_loss"]
    # Nothing of the teacher is saved or optimised: the checkpoint holds the student's weights and their state only.
    final = sorted((out / "checkpoints").iterdir())[-1]
    saved = load_file(final / "model.safetensors")
    student = load_file(whole / "model.safetensors")
    assert saved.keys() == student.keys()
    optimizer = torch.load(final / "optimizer.bin", weights_only=True)
    assert sum(len(g["params"]) for g in optimizer["param_groups"]) == len(student)
    # The same teacher folder with other weights: its digest differs, the resume is refused in one line.
    weights = load_file(teacher / "model.safetensors")
    weights["fc.bias"] = weights["fc.bias"] + 1
    save_file(weights, teacher / "model.safetensors")
    refused = run_ranks([*argv, "--resume", "latest", "--epochs", "3"], nproc=2)
    assert refused.returncode == 2 and "resume: the checkpoint was distilled from" in refused.stderr, refused.report()
