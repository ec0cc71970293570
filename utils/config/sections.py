"""The option sections whose readers live above utils/config (the script's loop, utils/run/): typed here, where every
section is read from the parser's namespace once (settings.py). The others sit beside the code that reads them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchOptions:
    """How the processes start and meet (utils/run/accelerator.py), and the recipe they were given."""

    config: str  # --config: the YAML recipe whose keys set the defaults (None: none)
    mixed_precision: str  # over the accelerate config's (None: the config's)
    compile: bool  # torch.compile the prepared model
    compile_mode: str
    dist_timeout_s: int  # how long a rank waits for the others in a collective


@dataclass(frozen=True)
class LoopOptions:
    """The training loop's own (train_classification.py): when it validates, logs and ends, and what it does with a
    step that cannot go on as usual."""

    max_train_steps: int  # stop after this many optimizer steps (None: the epochs decide)
    val_every: int  # validate every N epochs, and after the last
    log_every: int  # a training line every N optimizer steps
    clip_grad_norm: float  # the global gradient norm's ceiling (None: no clipping)
    skip_nonfinite_steps: int  # optimizer steps with a NaN/inf loss skipped before the run stops


@dataclass(frozen=True)
class EndOptions:
    """What the end of a run draws and sends (utils/run/records.py)."""

    no_plots: bool  # figures as CSV and JSON only, no pictures
    push_to_hub: str  # the Hub model repository model/ is uploaded to (None: none)
