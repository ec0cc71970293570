"""The options checked against the kind of labels, once the loaded data says whether its samples carry one label or
several: an option meant for the other kind (each task's REFUSED, utils/evaluation/tasks.py), set away from its
default, is refused in one line (ConfigError), never trained on without a word."""

from utils.core.errors import requirement
from utils.evaluation.tasks import task_kind


def label_kind(args, defaults, source, train):
    """The targets of the data's samples (its source says: a class index, or several labels as a multi-hot row;
    utils/data/datasets/labels.py), once the data is loaded, with the options checked against their kind
    (check_labels)."""
    targets = source.targets(train)
    check_labels(args, defaults, targets.multi_label)
    return targets


def check_labels(args, defaults, multi_label):
    """The options against the kind of labels (`defaults`: the parser's own, what "left unset" means): the other
    kind's options refused (the task's REFUSED), its own tracked figures, and the multi-label losses' settings (which
    single-label data refuses before they are read)."""
    need = requirement(args)
    kind = task_kind(multi_label)
    for key, why in kind.REFUSED.items():
        need(getattr(args, key) == defaults[key], key, why)
    need(args.track_metric in (None, *kind.TRACKED), "track_metric", kind.UNTRACKED.format(args.track_metric))
    need(0 < args.threshold < 1, "threshold", "must be in (0, 1)")
    need(args.pos_weight is None or args.multi_label_loss == "bce", "pos_weight", "weighs the positives of the BCE; "
         "--multi_label_loss asl has its own asymmetry and no weights: drop one of the two")
    need(args.focal_gamma is None or args.multi_label_loss == "bce", "focal_gamma", "focuses the BCE; "
         "--multi_label_loss asl is focal already (gamma_neg 4, gamma_pos 1): drop one of the two")
