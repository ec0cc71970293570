"""The audit's findings over both splits, ranked: what makes a validation figure lie first.

Kinds, from the most to the least serious (a pair across the splits before a pair within one):
- conflict     the same image (an exact or near copy) under different labels (label sets, for several a sample)
- exact_copy   the same decoded pixels
- near_copy    a resized, re-encoded, slightly cropped or brightened copy (utils/audit/copies.py)
- group        a group (--groups: a patient, a video, a site) with samples in both splits
- unreadable   a file that cannot be decoded
- constant     near-constant pixels (blank): their standard deviation under `flat` of the range
- dark, bright the mean under `dark` or over 1 - `dark` of the range (on the file's own bits)
- outlier      farther from every sample of its class than its class's far-out fence (the model's features)

Within a kind, the strongest first (the most similar pair; the farthest outlier). Constant images are left out of the
copy search: two blank images are not a leak. What a run should leave out of training (exclude.csv, --exclude's
input): the training sample of every pair across the splits, both training samples of a conflict, every later copy of
an exact copy within training, and unreadable and constant training images. Dark and bright images and outliers are
listed for a person to look at, not left out."""

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from utils.audit import copies

SEVERITY = ("conflict", "exact_copy", "near_copy", "group", "unreadable", "constant", "dark", "bright", "outlier")
PAIRED = ("conflict", "exact_copy", "near_copy", "group")
OUTLIER_FENCE = 3.0  # Tukey's far-out fence: Q1 - 3 x IQR of a class's nearest-neighbour similarities
MIN_CLASS = 5  # a class with fewer samples has no fence


@dataclass(frozen=True)
class Thresholds:
    """What the audit's options set (audit.py)."""

    similarity: float  # --similarity: a near copy's aligned correlation, at least
    neighbours: int  # --neighbours: candidates a sample, by each of the pixel descriptor and the features
    hash_radius: int  # --hash_radius: candidates within this many pHash bits
    flat: float  # --flat: a constant image's standard deviation, under (0..1 scale)
    dark: float  # --dark: a dark image's mean, under; a bright one's over 1 - dark


@dataclass(frozen=True)
class Samples:
    """Both splits' samples, train first, as the survey read them: `split` (n,) 0 train 1 val, `names` and `labels`
    (a class index, or a tuple of them) as lists, the survey's tensors (`valid`, `digest`, `phash`, `thumb`, `stats`,
    and `features` or None)."""

    split: np.ndarray
    names: list
    labels: list
    errors: dict  # {name: why} of the unreadable
    tensors: dict

    def __len__(self):
        return len(self.names)


@dataclass(frozen=True)
class Finding:
    kind: str
    across: bool  # its samples are in both splits
    score: float  # a pair's similarity (1: an exact copy), an image's statistic, an outlier's distance past its fence
    first: int  # a sample's place in Samples
    second: int = None  # the other's, for a pair
    detail: str = ""

    def order(self):
        """Its sort key: across the splits first, then by kind (SEVERITY), the strongest first."""
        strongest = -self.score if self.kind not in ("constant", "dark") else self.score
        return (not self.across, SEVERITY.index(self.kind), strongest, self.first, self.second or -1)


def find(samples, thresholds, pair_scores=None, groups=None):
    """Every Finding, ranked. `pair_scores`: the near-copy candidates and their aligned correlations (`near_scores`,
    computed beforehand, sharded); `groups`: each sample's group name (None: no group check)."""
    t = samples.tensors
    valid = t["valid"].numpy()
    mean, std = t["stats"][:, 0].numpy(), t["stats"][:, 1].numpy()
    found = [Finding("unreadable", False, 0.0, i, detail=samples.errors.get(samples.names[i], ""))
             for i in np.flatnonzero(~valid)]
    constant = valid & (std < thresholds.flat)
    found += [Finding("constant", False, float(std[i]), i, detail=f"std {std[i]:.4f}")
              for i in np.flatnonzero(constant)]
    found += [Finding("dark", False, float(mean[i]), i, detail=f"mean {mean[i]:.4f}")
              for i in np.flatnonzero(valid & ~constant & (mean < thresholds.dark))]
    found += [Finding("bright", False, float(mean[i]), i, detail=f"mean {mean[i]:.4f}")
              for i in np.flatnonzero(valid & ~constant & (mean > 1 - thresholds.dark))]
    usable = np.flatnonzero(valid & ~constant)
    typical = np.flatnonzero(valid & ~constant & (mean >= thresholds.dark) & (mean <= 1 - thresholds.dark))
    exact = exact_pairs(samples, usable)
    found += [pair(samples, i, j, 1.0, "exact_copy") for i, j in exact]
    digests = t["digest"].numpy()
    found += [pair(samples, i, j, score, "near_copy") for i, j, score in (pair_scores or [])
              if digests[i].tobytes() != digests[j].tobytes()]  # exact copies are found as such
    if groups is not None:
        found += group_findings(samples, groups)
    if t.get("features") is not None:  # among the images not already found dark or bright
        found += outliers(samples, typical)
    return sorted(found, key=Finding.order)


def exact_pairs(samples, usable):
    """[(first, other)] of each set of samples with one digest: its first sample with each of the others."""
    members = defaultdict(list)
    for i in usable:
        members[samples.tensors["digest"][i].numpy().tobytes()].append(int(i))
    return [(group[0], other) for group in members.values() for other in group[1:]]


def pair(samples, i, j, score, kind):
    """A pair's Finding: a conflict when their labels differ (the detail says which kind of copy)."""
    across = bool(samples.split[i] != samples.split[j])
    if samples.labels[i] != samples.labels[j]:
        return Finding("conflict", across, score, i, j, f"{kind.replace('_', ' ')}, labels {samples.labels[i]} and "
                                                         f"{samples.labels[j]}")
    return Finding(kind, across, score, i, j)


def near_scores(samples, thresholds, process_index=0, num_processes=1):
    """(candidate pairs, {(i, j): this process's share of the aligned correlations}): the usable samples' candidates
    (every process finds the same), verified by sample i % num_processes (utils/audit/copies.py)."""
    t = samples.tensors
    usable = np.flatnonzero(t["valid"].numpy() & (t["stats"][:, 1].numpy() >= thresholds.flat))
    pairs = copies.candidates(usable, t["thumb"], t["phash"], t.get("features"), thresholds.neighbours,
                              thresholds.hash_radius)
    return pairs, copies.aligned(t["thumb"], pairs, process_index, num_processes)


def group_findings(samples, groups):
    """A Finding for each group with samples in both splits: its first training sample and its first validation
    one, the detail its counts."""
    by_group = defaultdict(lambda: ([], []))
    for i, name in enumerate(groups):
        by_group[name][int(samples.split[i])].append(i)
    return [Finding("group", True, float(len(train) + len(val)), train[0], val[0],
                    f"group {name!r}: {len(train)} training, {len(val)} validation samples")
            for name, (train, val) in sorted(by_group.items()) if train and val]


def outliers(samples, usable):
    """A Finding for each usable sample whose nearest other sample of its label is less similar (cosine of the
    features) than its class's far-out fence; the score is how far below, in the class's IQRs."""
    features = copies.standardised_rows(samples.tensors["features"])
    by_label = defaultdict(list)
    for i in usable:
        by_label[samples.labels[i]].append(int(i))
    found = []
    for _, members in sorted(by_label.items(), key=lambda kv: str(kv[0])):
        if len(members) < MIN_CLASS:
            continue
        sims, _ = copies.nearest(features[torch.as_tensor(members)], 1)
        nearest = sims[:, 1]  # the first is the sample itself
        q1, q3 = np.percentile(nearest, [25, 75])
        spread = max(q3 - q1, 1e-6)
        fence = q1 - OUTLIER_FENCE * spread
        found += [Finding("outlier", False, float((fence - s) / spread), i,
                          detail=f"nearest of its label {s:.3f}, the class's fence {fence:.3f}")
                  for i, s in zip(members, nearest) if s < fence]
    return found


def leaked(samples, found):
    """{validation sample: the kind of its first finding across the splits}: what a leak-free figure leaves out."""
    out = {}
    for f in found:
        for i in (f.first, f.second) if f.across else ():
            if samples.split[i] == 1:
                out.setdefault(i, f.kind)
    return out


def excluded(samples, found):
    """{training sample: the kind of its finding} that a run should leave out (see the module's docstring)."""
    out = {}
    for f in found:
        if f.across or f.kind in ("conflict", "unreadable", "constant"):
            chosen = (f.first, f.second)
        elif f.kind == "exact_copy":
            chosen = (f.second,)  # the first copy stays
        else:
            chosen = ()
        for i in chosen:
            if i is not None and samples.split[i] == 0:
                out.setdefault(i, f.kind)
    return out
