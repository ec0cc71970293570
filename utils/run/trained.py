"""A trained run of this script read back: its options, its class names and its weights in its model (for
predict.py, utils/inference.py, and a --teacher given as a run folder)."""

import contextlib
import io
import json
from pathlib import Path

from utils.config.options import parse_args
from utils.core.errors import UserError
from utils.data.sources.catalog import is_video
from utils.models.libraries import build_model
from utils.models.torchvision_models import ModelError, read_state_dict


class RunError(UserError, ValueError):
    """A run folder, input or output that cannot be used as asked; the message is one line."""


def load_run(run_dir, ema=False, checkpoint=None):
    """(the run's options, its class names, its model in eval mode with the chosen weights on the CPU).

    Weights: <run>/model.safetensors, model_ema.safetensors with `ema`, or a checkpoint folder's."""
    run_dir = Path(run_dir)
    config, labels = run_dir / "config.yaml", run_dir / "labels.json"
    for file in (config, labels):
        if not file.is_file():
            raise RunError(f"{run_dir}: no {file.name} (give a folder written by train_classification.py)")
    args = read_options(config)
    names = [name for _, name in sorted(json.loads(labels.read_text()).items(), key=lambda kv: int(kv[0]))]
    weights = Path(checkpoint) / "model.safetensors" if checkpoint else \
        run_dir / ("model_ema.safetensors" if ema else "model.safetensors")
    if not weights.is_file():
        hint = " (the run trained without --model_ema)" if ema else " (training has not finished: pass --checkpoint)"
        raise RunError(f"{weights} does not exist{hint if not checkpoint else ''}")
    shift = args.clip_len * args.num_segments if args.temporal_shift else None  # TSM, as the run trained
    model = build_model(args.model, num_classes=len(names), video=is_video(args), class_names=names,
                        temporal_shift=shift)
    try:
        model.load_state_dict(read_state_dict(weights))
    except (RuntimeError, ModelError) as e:
        raise RunError(f"{weights}: does not fit {args.model} with {len(names)} classes "
                       f"({str(e).splitlines()[0][:200]})") from None
    return args, names, model.eval()


def read_options(config):
    """The options a run's config.yaml holds, as this version of the script parses them; a RunError naming the file
    when it cannot (an option since renamed, a model whose library is not installed here)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return parse_args(["--config", str(config)])
    except SystemExit:
        why = said.getvalue().strip().splitlines()[-1:] or ["no reason given"]
        raise RunError(f"{config}: this version of the script cannot read it ({why[0].split('error: ', 1)[-1]})") \
            from None
