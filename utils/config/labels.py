"""The options checked against the kind of labels, once the loaded data says whether its samples carry one label or
several: an option meant for the other kind (each task's REFUSED, utils/evaluation/tasks.py), set away from its
default, is refused in one line (ConfigError), never trained on without a word."""

from utils.config.options import flat_options, parser_defaults
from utils.core.errors import requirement
from utils.evaluation.tasks import task_kind


def label_kind(settings, train):
    """The targets of the data's samples (the Settings' source says: a class index, or several labels as a multi-hot
    row; utils/data/datasets/labels.py), once the data is loaded, with the options checked against their kind
    (check_labels)."""
    targets = settings.source.targets(train)
    check_labels(settings, targets.multi_label)
    return targets


def check_labels(settings, multi_label):
    """The options of `settings` against the kind of labels: the other kind's options refused when set away from the
    parser's defaults (the task's REFUSED), its own tracked figures, and the multi-label losses' settings (which
    single-label data refuses before they are read)."""
    options, defaults = flat_options(settings), parser_defaults()
    need = requirement(options)
    kind = task_kind(multi_label)
    for key, why in kind.REFUSED.items():
        need(options[key] == defaults[key], key, why)
    evaluation, losses = settings.evaluation, settings.losses
    need(evaluation.track_metric in (None, *kind.TRACKED), "track_metric",
         kind.UNTRACKED.format(evaluation.track_metric))
    need(0 < evaluation.threshold < 1, "threshold", "must be in (0, 1)")
    need(settings.balance.pos_weight is None or losses.multi_label_loss == "bce", "pos_weight", "weighs the positives "
         "of the BCE; --multi_label_loss asl has its own asymmetry and no weights: drop one of the two")
    need(losses.focal_gamma is None or losses.multi_label_loss == "bce", "focal_gamma", "focuses the BCE; "
         "--multi_label_loss asl is focal already (gamma_neg 4, gamma_pos 1): drop one of the two")
