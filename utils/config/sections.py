"""The option sections whose readers live above utils/config (utils/run/): typed here, where every section is read
from the parser's namespace once (settings.py). The others sit beside the code that reads them."""

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
class EndOptions:
    """What the end of a run draws and sends (utils/run/records.py)."""

    no_plots: bool  # figures as CSV and JSON only, no pictures
    push_to_hub: str  # the Hub model repository model/ is uploaded to (None: none)
