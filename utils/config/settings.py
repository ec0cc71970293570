"""What a run needs beyond its options, derived from them once, while they are parsed (options.parse), into one
frozen object: the data source, the model's input and the names for files and dashboards, and where the warmup
came from."""

from dataclasses import dataclass

from utils.data.sources.protocol import DataSource
from utils.data.transforms.input import Input
from utils.training.schedule import DEFAULT_WARMUP_EPOCHS, warmup_epochs


@dataclass(frozen=True)
class Settings:
    source: DataSource  # where the data comes from: its datasets, names, resume signature (utils/data/sources/)
    input: Input  # modality, sizes per phase, clips, mean/std, interpolation (utils/data/transforms/input.py)
    source_name: str  # how results.json and the run folder name the data
    sample_unit: str  # what the console calls a sample: clips or images
    warmup_notes: tuple  # where the warmup came from, when it is not what was asked


def settle(args, source, inp):
    """The Settings of the run `args` describes: its data `source` and model input `inp`, picked and resolved once."""
    warmup = warmup_epochs(args)
    shortened = args.warmup_epochs is None and warmup < DEFAULT_WARMUP_EPOCHS
    return Settings(source=source, input=inp, source_name=source.name(args),
                    sample_unit="clips" if source.video else "images",
                    warmup_notes=(f"warmup: {warmup:g} epochs (the default {DEFAULT_WARMUP_EPOCHS:g}, shortened to a "
                                  f"fifth of --epochs {args.epochs})",) if shortened else ())
