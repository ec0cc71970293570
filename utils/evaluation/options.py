"""What validation scores and how, and what it leaves for the reports: the evaluation's options, typed once
(utils/config/settings.py) and read by the scoring loop, the task's figures and the records at a run's end."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EvaluationOptions:
    metrics: tuple  # --metrics: extra evaluate metrics by name (None: none)
    threshold: float  # multi-label: a class predicted at this sigmoid probability
    tta: str  # --tta flip: each view averaged with its horizontal flip (None: none)
    track_metric: str  # the figure best/, --keep_best and --early_stop follow (None: the task's own)
    top_losses: int  # the validation samples of highest loss drawn and listed at the end (0: none)
    dump_rank_metrics: bool  # each rank's validation sums written beside the gathered figures
    calibrate: bool  # a temperature fitted to the validation logits after training
