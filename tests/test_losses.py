"""The training objective: --bce_loss (timm's BCE, smoothing and --bce_target_thresh, soft targets from mixing),
validation scoring cross-entropy whatever the training loss, and the distillation term's arithmetic (DeiT's soft
and hard kinds, alpha, the two heads of a distillation-token model)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, parse_fails, read_json, read_jsonl, run_main

from utils.config.options import parse_args
from utils.config.settings import typed_options
from utils.evaluation.label_losses import sigmoid_distillation, softmax_distillation
from utils.evaluation.tasks import task_for
from utils.training.objective import Objective

ONE_LABEL = task_for(False, 5)  # one label a sample, of the 5 classes of logits_and_labels


def logits_and_labels():
    g = torch.Generator().manual_seed(0)
    return torch.randn(6, 5, generator=g) * 3, torch.tensor([0, 1, 2, 3, 4, 0])



def losses_of(argv):
    """The loss's typed options of a command line."""
    return typed_options(parse_args(argv))["losses"]

def test_bce_one_hot_targets_are_smoothed_as_timm_does_and_its_loss_is_the_mean_over_samples_and_classes():
    logits, labels = logits_and_labels()
    objective = Objective(losses_of(["--bce_loss", "--label_smoothing", "0.2"]), ONE_LABEL)
    targets = torch.full((6, 5), 0.2 / 5).scatter_(1, labels.view(-1, 1), 1 - 0.2 + 0.2 / 5)
    expected = F.binary_cross_entropy_with_logits(logits, targets)  # mean over the 30 elements
    assert objective(logits, labels, None).item() == pytest.approx(expected.item(), rel=1e-6)
    ce = Objective(losses_of(["--label_smoothing", "0.2"]), ONE_LABEL)(logits, labels, None)
    assert ce.item() == pytest.approx(F.cross_entropy(logits, labels, label_smoothing=0.2).item(), rel=1e-6)
    assert abs(ce.item() - expected.item()) > 0.1  # the two losses differ: the switch changes the computation


def test_mixed_targets_are_smoothed_then_thresholded():
    logits, _ = logits_and_labels()
    mixed = torch.zeros(6, 5)
    mixed[:, 0], mixed[:, 1] = 0.7, 0.3  # what MixUp makes of two labels
    smoothed = mixed * 0.9 + 0.1 / 5  # as timm's Mixup smooths before its BCE
    plain = Objective(losses_of(["--bce_loss", "--label_smoothing", "0.1"]), ONE_LABEL)(logits, mixed, None)
    assert plain.item() == pytest.approx(F.binary_cross_entropy_with_logits(logits, smoothed).item(), rel=1e-6)
    # 0.3 * 0.9 + 0.02 = 0.29 > 0.25: both mixed classes become 1, the others (0.02) 0
    binary = torch.zeros(6, 5)
    binary[:, :2] = 1
    thresholded = Objective(losses_of(["--bce_loss", "--label_smoothing", "0.1", "--bce_target_thresh", "0.25"]),
                            ONE_LABEL)
    assert thresholded(logits, mixed, None).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(logits, binary).item(), rel=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--bce_target_thresh", "0.2"], "bce_target_thresh: applies to --bce_loss only"),
    (["--bce_loss", "--bce_target_thresh", "1.5"], "bce_target_thresh: must be in [0, 1)"),
    (["--teacher", "resnet18", "--teacher_pretrained", "--distill_alpha", "0"], "distill_alpha: must be in (0, 1]"),
    (["--teacher", "resnet18", "--teacher_pretrained", "--distill_temperature", "0"],
     "distill_temperature: must be > 0"),
    (["--teacher_pretrained"], "teacher_pretrained: needs --teacher"),
    (["--distill", "hard", "--distill_alpha", "0.3"],
     "distill: --distill, --distill_alpha: set for a distillation, which needs --teacher"),
    (["--teacher", "resnet1"], "teacher: resnet1 is not a folder; a model name needs --teacher_pretrained"),
    (["--teacher", "resnet1", "--teacher_pretrained"],
     "teacher: 'resnet1' is not a torchvision classification or video model; did you mean"),
])
def test_a_bad_loss_or_distillation_option_is_one_line_exit_2(argv, message, capsys):
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def test_soft_and_hard_distillation_losses_against_a_hand_computation():
    student, _ = logits_and_labels()
    teacher = torch.randn(6, 5, generator=torch.Generator().manual_seed(1)) * 2
    t = 3.0
    p_t = torch.softmax(teacher / t, dim=1)
    kl = (p_t * (p_t.log() - torch.log_softmax(student / t, dim=1))).sum(dim=1) * t * t
    assert torch.allclose(softmax_distillation("soft", student, teacher, t), kl, atol=1e-5)
    hard = F.cross_entropy(student, teacher.argmax(dim=1), reduction="none")
    assert torch.allclose(softmax_distillation("hard", student, teacher, t), hard)


class FixedTeacher:
    def __init__(self, logits):
        self.logits, self.seen = logits, []

    def __call__(self, pixels):
        self.seen.append(pixels)
        return self.logits


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_the_objective_weighs_the_task_and_the_teacher_and_gives_each_head_its_own(kind):
    logits, labels = logits_and_labels()
    teacher_logits = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    args = parse_args(["--teacher", "resnet18", "--teacher_pretrained", "--distill", kind, "--distill_alpha", "0.3",
                       "--distill_temperature", "2", "--label_smoothing", "0"])
    teacher, pixels = FixedTeacher(teacher_logits), torch.randn(6, 3, 4, 4)
    objective = Objective(typed_options(args)["losses"], ONE_LABEL, teacher)
    task, distill = F.cross_entropy(logits, labels), softmax_distillation(kind, logits, teacher_logits, 2.0).mean()
    assert objective(logits, labels, pixels).item() == pytest.approx((0.7 * task + 0.3 * distill).item(), rel=1e-6)
    assert teacher.seen[0] is pixels  # the teacher sees the student's very input
    # A distillation-token model answers (class head, distillation head): labels teach the first, the teacher
    # the second.
    other = logits.flip(0)
    two_heads = objective((logits, other), labels, pixels).item()
    expected = 0.7 * task + 0.3 * softmax_distillation(kind, other, teacher_logits, 2.0).mean()
    assert two_heads == pytest.approx(expected.item(), rel=1e-6)


def test_a_distillation_token_model_answers_with_two_heads_in_training_and_their_mean_in_evaluation():
    pytest.importorskip("timm")
    from utils.models.libraries import build_model, distillation_head

    model = build_model("timm/deit_tiny_distilled_patch16_224", num_classes=3)
    assert distillation_head(model) and not distillation_head(torch.nn.Linear(2, 2))
    x = torch.randn(2, 3, 224, 224)
    model.train()
    head, distill = model(x)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), (model.head(model.forward_features(x)[:, 0]) +
                                         model.head_dist(model.forward_features(x)[:, 1])) / 2, atol=1e-5)
    assert head.shape == distill.shape == (2, 3)


@pytest.mark.slow
def test_bce_trains_otherwise_and_validation_still_scores_cross_entropy(tmp_path):
    """A --bce_loss run logs other training losses than the cross-entropy run; its val loss is the cross-entropy of
    its weights, as --eval_only of them without --bce_loss computes it."""
    ce, bce = (run_main([*TINY, "--epochs", "1", "--max_train_steps", "2", "--log_every", "1", "--output_dir",
                         tmp_path / name, *extra])
               for name, extra in (("ce", ()), ("bce", ("--bce_loss",))))
    losses = {name: [r["train_loss"] for r in read_jsonl(tmp_path / name / "metrics.jsonl") if "train_loss" in r]
              for name in ("ce", "bce")}
    # 7 classes, logits near 0 at the start: cross-entropy ln 7 = 1.95, each one-vs-all term ln 2 = 0.69
    assert losses["ce"][0] == pytest.approx(1.95, abs=0.25) and losses["bce"][0] == pytest.approx(0.69, abs=0.1)
    scored = run_main([*TINY, "--eval_only", "--init_from", tmp_path / "bce", "--output_dir", tmp_path / "eval"])
    assert scored["val_loss"] == bce["val_loss"] and scored["val_top1"] == bce["val_top1"]
    assert read_json(tmp_path / "bce" / "results.json")["val_loss"] == bce["val_loss"] != ce["val_loss"]


def test_multi_label_bce_is_summed_over_classes_with_smoothed_targets_and_weighed_positives():
    """Per sample: the sum over classes of -w y' log s(x) - (1 - y') log(1 - s(x)), y' = y (1 - eps) + eps / 2."""
    from utils.evaluation.label_losses import MultiLabelBCE

    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    weights = [3.0, 0.5, 1.0]
    smoothed = targets * 0.9 + 0.05
    p = torch.sigmoid(logits)
    by_hand = -(torch.tensor(weights) * smoothed * p.log() + (1 - smoothed) * (1 - p).log()).sum(dim=1)
    assert torch.allclose(MultiLabelBCE(0.1, weights)(logits, targets), by_hand, atol=1e-6)


def test_asymmetric_loss_is_timms_per_sample_and_multi_label_distillation_is_the_bce_of_sigmoids():
    from timm.loss import AsymmetricLossMultiLabel

    from utils.evaluation.label_losses import AsymmetricLoss

    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0], [1.0, 1.0, -1.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    timm_sum = AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=1, clip=0.05)(logits, targets)
    assert torch.allclose(AsymmetricLoss(0.0)(logits, targets), timm_sum / 3)
    teacher = torch.tensor([[1.0, -2.0, 0.0], [-1.0, 2.0, 1.0], [0.5, 0.5, -3.0]])
    t = 2.0
    soft = (-(torch.sigmoid(teacher / t) * F.logsigmoid(logits / t)
              + (1 - torch.sigmoid(teacher / t)) * F.logsigmoid(-logits / t))).sum(dim=1) * t ** 2
    assert torch.allclose(sigmoid_distillation("soft", logits, teacher, t), soft, atol=1e-6)
    hard = F.binary_cross_entropy_with_logits(logits, (teacher > 0).float(), reduction="none").sum(dim=1)
    assert torch.allclose(sigmoid_distillation("hard", logits, teacher, t), hard)


def test_the_options_pick_the_loss_of_one_label_a_sample():
    """--focal_gamma alone, --logit_adjust with the split's prior, --class_weights, else label-smoothed cross-entropy:
    the loss the options name is the one the objective averages."""
    from types import SimpleNamespace

    torch.manual_seed(0)
    logits, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    ce = F.cross_entropy(logits, labels, reduction="none")
    p_t = logits.softmax(dim=1).gather(1, labels[:, None]).squeeze(1)
    log_prior = torch.tensor([0.4, 0.3, 0.2, 0.1]).log().tolist()

    def objective(*argv, tau=None):  # --logit_adjust TAU: the prior and TAU come with the class counts (read_balance)
        balance = SimpleNamespace(log_prior=log_prior if tau else None, logit_adjust=tau, class_weights=None)
        return Objective(losses_of(["--label_smoothing", "0", *argv]), task_for(False, 4), balance=balance)(
            logits, labels, None)

    assert torch.allclose(objective("--focal_gamma", "2"), ((1 - p_t) ** 2 * ce).mean())
    prior = torch.tensor(log_prior)
    assert torch.allclose(objective(tau=1.0), F.cross_entropy(logits + prior, labels))
    assert torch.allclose(objective(tau=0.5), F.cross_entropy(logits + 0.5 * prior, labels))
    assert torch.allclose(objective(), ce.mean())
    weights = SimpleNamespace(log_prior=None, logit_adjust=None, class_weights=[0.5, 1.0, 2.0, 4.0])
    weighted = Objective(losses_of(["--label_smoothing", "0"]), task_for(False, 4), balance=weights)(logits, labels,
                                                                                                   None)
    assert torch.allclose(weighted, (ce * torch.tensor(weights.class_weights)[labels]).mean())
