"""The one scoring loop of validation, the multi-view test and predict.py: a model's outputs over a loader,
gathered exactly from every rank, with what each rank scored and which files could not be decoded."""

from typing import NamedTuple

import torch


class Scored(NamedTuple):
    """One batch's items from every rank, in item order, the padded repeats dropped, on the CPU."""
    fields: tuple  # what the caller's score() returned: one tensor per field, one row per item
    owner: torch.Tensor  # the rank that scored each item
    valid: torch.Tensor  # whether it could be decoded (a skipped file is scored on nothing)

    def kept(self):
        """(the fields of the valid items..., their owners)."""
        return (*(field[self.valid] for field in self.fields), self.owner[self.valid])


@torch.no_grad()
def scored_batches(accelerator, loader, score, bad_files):
    """Scored batches of `loader`: `score(batch)` gives this rank's tuple of per-item tensors (on the device).

    Accelerate pads the last batches so that every rank gets as many; gather_for_metrics drops those repeats, so
    each item is counted once whatever the world size, and the owner column tells every rank which of the kept
    items are its own, with no shard arithmetic. A file that cannot be decoded is recorded by `bad_files`
    (utils/data/loading/bad_files.BadImages): skipped, or, met by any rank, the end of the loop on every rank alike (the
    gathered validity tells them all at the same batch, so none is left waiting in a collective)."""
    rank = accelerator.process_index
    for batch in loader:
        bad_files.check(batch)
        fields = tuple(score(batch))
        owner = torch.full(batch["valid"].shape, rank, dtype=torch.int64, device=batch["valid"].device)
        *fields, owner, valid = (t.cpu() for t in accelerator.gather_for_metrics((*fields, owner, batch["valid"])))
        if not bad_files.skip and not valid.all():
            bad_files.stop(accelerator)
        yield Scored(tuple(fields), owner, valid)


def kept_rows(batches):
    """The valid items of all `batches` (Scored), each field concatenated: (fields..., owners)."""
    parts = [batch.kept() for batch in batches]
    return tuple(torch.cat(column) for column in zip(*parts))


def kept_positions(batches):
    """Where each valid item of all `batches` (Scored) stands in the loader's order, padding dropped: in an unshuffled
    validation loader, its index in the dataset (gather_for_metrics keeps that order on any number of processes)."""
    if not batches:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([batch.valid for batch in batches]).nonzero().flatten()


def without(task, fields, positions, left_out, class_names):
    """The validation figures (`task`'s row, as metrics.jsonl has them) of the kept rows `fields` (at `positions` of
    the split) without the samples at the places `left_out` (--audit's leaked ones), and how many were left out."""
    keep = torch.tensor([p not in left_out for p in positions.tolist()], dtype=torch.bool)
    figures = task.figures(tuple(field[keep] for field in fields))
    return {"left_out": int((~keep).sum()), **task.row(figures, class_names)}
