"""The options checked against the kind of labels, once the loaded data says whether its samples carry one label or
several: an option meant for the other kind (each task's REFUSED, utils/evaluation/tasks.py), set away from its
default, is refused in one line (ConfigError), never trained on without a word."""

from utils.core.errors import requirement
from utils.evaluation.tasks import MultiLabel, SingleLabel


def label_kind(args, defaults, source, train):
    """Whether the data's samples carry several labels (its source says), once the data is loaded, with the options
    checked against it (check_labels)."""
    multi_label = source.multi_hot_width(train) is not None
    check_labels(args, defaults, multi_label)
    return multi_label


def check_labels(args, defaults, multi_label):
    """The options against the kind of labels (`defaults`: the parser's own, what "left unset" means)."""
    need = requirement(args)
    if not multi_label:
        for key, why in SingleLabel.REFUSED.items():
            need(getattr(args, key) == defaults[key], key, why)
        need(args.track_metric != "map", "track_metric", "map ranks each class's sigmoid scores of multi-label data; "
             "one label a sample tracks top1, balanced_accuracy or macro_f1")
        return
    refused = MultiLabel.REFUSED
    for key in ("bce_loss", "bce_target_thresh", "metrics"):
        need(getattr(args, key) == defaults[key], key, refused[key])
    need(0 < args.threshold < 1, "threshold", "must be in (0, 1)")
    need(args.pos_weight is None or args.multi_label_loss == "bce", "pos_weight", "weighs the positives of the BCE; "
         "--multi_label_loss asl has its own asymmetry and no weights: drop one of the two")
    for key in ("class_weights", "logit_adjust", "calibrate"):
        need(getattr(args, key) == defaults[key], key, refused[key])
    need(args.focal_gamma is None or args.multi_label_loss == "bce", "focal_gamma", "focuses the BCE; "
         "--multi_label_loss asl is focal already (gamma_neg 4, gamma_pos 1): drop one of the two")
    need(args.track_metric in (None, *MultiLabel.TRACKED), "track_metric", f"{args.track_metric} scores one label a "
         f"sample; multi-label data tracks map or macro_f1")
