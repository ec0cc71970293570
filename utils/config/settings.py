"""What a run needs beyond its options, derived from them once, after parsing, into one frozen object:
the data source, the model's input and the names for files and dashboards, and the start-up notes saying
where the LR in force and the warmup came from."""

from dataclasses import dataclass

from utils.data.sources.catalog import source_for
from utils.data.transforms.input import Input, resolve_input
from utils.data.sources.protocol import DataSource
from utils.training.schedule import DEFAULT_WARMUP_EPOCHS, lr_notes, warmup_epochs


@dataclass(frozen=True)
class Settings:
    source: DataSource  # where the data comes from: its datasets, names, resume signature (utils/data/sources/protocol.py)
    input: Input  # modality, source kind, sizes per phase, mean/std, interpolation (utils/data/transforms/input.py)
    source_name: str  # how results.json and the run folder name the data
    sample_unit: str  # what the console calls a sample: clips or images
    lr_notes: tuple  # where the LR came from (also at the top of config.yaml)
    warmup_notes: tuple  # where the warmup came from, when it is not what was asked


def resolve(args, num_processes):
    """The Settings of the run `args` describes on `num_processes` processes."""
    warmup = warmup_epochs(args)
    shortened = args.warmup_epochs is None and warmup < DEFAULT_WARMUP_EPOCHS
    source = source_for(args)
    return Settings(source=source, input=resolve_input(args, source), source_name=source.name(args),
                    sample_unit="clips" if source.video else "images",
                    lr_notes=tuple(lr_notes(args, num_processes)),
                    warmup_notes=(f"warmup: {warmup:g} epochs (the default {DEFAULT_WARMUP_EPOCHS:g}, shortened to a "
                                  f"fifth of --epochs {args.epochs})",) if shortened else ())
