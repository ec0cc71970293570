"""--mean auto --std auto: each channel's mean and standard deviation over the pixels of every training image, decoded
as the run reads it (its bands, divided by its pixel_max, before any augmentation).

Each process sums its share of the split (a contiguous block, Accelerate's split_between_processes) in float64:
per channel the pixel count, the sum and the sum of squares; the sums are added over the processes (not their means:
shares of images of different sizes would weigh wrongly), so 1 and N processes give the statistics of the whole split.
"""

import dataclasses
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from utils.data.decoding.images import decode_rgb
from utils.data.errors import DataError


class _ImageSums(Dataset):
    """Image i of `rows` (undecoded `datasets` rows) as its per-channel (count, sum, sum of squares), float64."""

    def __init__(self, rows, indices, decode, pixel_max):
        self.rows, self.indices, self.decode, self.pixel_max = rows, indices, decode, pixel_max

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        image = self.rows[int(self.indices[i])]["image"]
        try:
            x = self.decode(image).double().flatten(1) / self.pixel_max
        except (OSError, ValueError, RuntimeError, SyntaxError, TypeError, KeyError) as e:
            name = image.get("path") if isinstance(image, dict) else f"row {self.indices[i]}"
            return None, f"{name or '<image bytes>'} ({type(e).__name__}: {e})"
        return torch.stack([torch.full((x.shape[0],), float(x.shape[1]), dtype=torch.float64), x.sum(1),
                            (x * x).sum(1)]), None


def channel_statistics(accelerator, train, inp, num_workers=0, skip_bad=False):
    """((mean), (std)) of the training split `train` (EpochSeeded over ImageRows) as the Input `inp` reads its files,
    summed over every process's share; a DataError (one line, on every process) when a file cannot be read, unless
    `skip_bad` (--skip_bad_images): then it is left out, and said."""
    from accelerate.utils import gather_object

    rows = train.dataset
    decode = rows.decode or decode_rgb
    pixel_max = inp.pixel_max or 255.0
    with accelerator.split_between_processes(list(range(len(rows.rows)))) as share:
        loader = DataLoader(_ImageSums(rows.rows, share, decode, pixel_max), batch_size=None,
                            num_workers=num_workers, collate_fn=lambda item: item)
        sums, bad = torch.zeros(3, inp.channels, dtype=torch.float64), []
        for item, error in loader:
            if error is None:
                sums += item
            else:
                bad.append(error)
    sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
    bad = gather_object(bad) if accelerator.num_processes > 1 else bad
    if bad and skip_bad:
        accelerator.print(f"statistics: {len(bad)} unreadable training file(s) left out, e.g. {bad[0]}")
    elif bad:
        raise DataError(f"mean: auto reads every training file, and {len(bad)} could not be read: {bad[0]}; remove "
                        f"or fix it, or give --mean and --std")
    count, total, squares = sums
    mean = total / count
    std = (squares / count - mean * mean).clamp_min(0).sqrt()
    return tuple(mean.tolist()), tuple(std.tolist())


def with_statistics(accelerator, inp, train, num_workers=0, record=None, skip_bad=False):
    """The Input `inp` with its --mean auto statistics: those a resumed run's start recorded in `record` (its
    run.json), so that it normalises as it did whatever its processes now; else computed (channel_statistics, files
    that cannot be read left out with `skip_bad`). A constant channel (std 0) is only centred."""
    if record is not None and Path(record).is_file():
        saved = json.loads(Path(record).read_text()).get("input", {}).get("mean_std")
        if isinstance(saved, list) and len(saved[0]) == inp.channels:
            accelerator.print(f"statistics: mean and std as {record} recorded them at the run's start")
            return dataclasses.replace(inp, mean_std=tuple(map(tuple, saved)))
    mean, std = channel_statistics(accelerator, train, inp, num_workers, skip_bad)
    std = tuple(v if v > 0 else 1.0 for v in std)
    accelerator.print(f"statistics over the {len(train)} training images ({inp.channels} channels): mean "
                      f"{', '.join(f'{v:.4g}' for v in mean)}; std {', '.join(f'{v:.4g}' for v in std)}")
    return dataclasses.replace(inp, mean_std=(mean, std))
