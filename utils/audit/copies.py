"""Near copies: candidate pairs from nearest neighbours (faiss), each then verified on the pixels.

Candidates, every sample against every other of both splits:
- its `neighbours` nearest by a pixel descriptor: the grey thumbnail at 16 x 16, less its mean, to unit length (so the
  cosine is the normalised cross-correlation: a brighter or darker copy is as near as the original);
- its `neighbours` nearest by the model's features, when the audit has a model;
- every sample whose perceptual hash (imagehash's pHash) is within `hash_radius` bits.

A candidate is a near copy when one image, cropped by a window of the other, matches it: the highest normalised
cross-correlation of one thumbnail's windows (up to 5 % off each side, in steps of 1.25 % of its side, at every
offset) with the other's whole view, both resampled to 24 x 24, is at least `similarity`.

Why our own check, not the hashes' distance alone: on small images the hashes do not tell a copy from another sample of
its class. On the embedded digits, distinct images lie 4 to 10 pHash bits from their nearest other (of 64), a 5 % crop
8 to 20 bits from its original; the best aligned correlation of a distinct pair is at most 0.994 there, a cropped,
brightened, resized or re-encoded copy's at least 0.99 (benchmarks/audit_injected.py measures it).
"""

import numpy as np
import torch

from utils.audit.look import THUMB

SIDE = 24  # the side both views are compared at
STEP = 0.0125  # the windows' margins and offsets, as a fraction of the side
MARGIN = 0.05  # the most a window leaves out of a side


def resampler(start, length):
    """(SIDE, THUMB): the linear map that resamples the span [start, start + length) of a row of THUMB pixels (as
    fractions of the side) to SIDE values, each the mean of two bilinear samples in its bin (as roi_align samples)."""
    matrix = np.zeros((SIDE, THUMB), dtype=np.float32)
    width = length * THUMB / SIDE
    for u in range(SIDE):
        for point in (0.25, 0.75):
            x = np.clip(start * THUMB + (u + point) * width - 0.5, 0, THUMB - 1)  # in pixel centres
            left = int(np.floor(x))
            right, frac = min(left + 1, THUMB - 1), x - left
            matrix[u, left] += 0.5 * (1 - frac)
            matrix[u, right] += 0.5 * frac
    return torch.from_numpy(matrix)


def spans():
    """[(margin, [(SIDE, THUMB) resampler of each offset])]: the whole side first (margin 0), then each margin m per
    side (a multiple of STEP up to MARGIN) at every offset 0..2m in STEPs; a window is a pair of one margin's offsets
    (rows, columns)."""
    found = [(0.0, [resampler(0.0, 1.0)])]
    for m in np.arange(STEP, MARGIN + 1e-9, STEP):
        found.append((float(m), [resampler(o, 1 - 2 * m) for o in np.arange(0, 2 * m + 1e-9, STEP)]))
    return found


SPANS = spans()


def standardised(vectors):
    """Rows less their mean, to unit length (a constant row stays zero)."""
    vectors = vectors - vectors.mean(dim=-1, keepdim=True)
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def views(thumbs, whole_only=False):
    """(n, K, SIDE * SIDE) standardised views of (n, THUMB, THUMB) uint8 thumbnails: the whole first, then every
    window (K = 1 with `whole_only`)."""
    images = thumbs.float() / 255
    found = []
    for _, resamplers in SPANS[:1] if whole_only else SPANS:
        r = torch.stack(resamplers)  # (offsets, SIDE, THUMB)
        rows = torch.einsum("oyc,ncx->noyx", r, images)  # each row offset: (n, offsets, SIDE, THUMB)
        both = torch.einsum("noyx,pvx->nopyv", rows, r)  # and each column offset: (n, offsets, offsets, SIDE, SIDE)
        found.append(both.reshape(len(images), -1, SIDE * SIDE))
    return standardised(torch.cat(found, dim=1))


def descriptors(thumbs):
    """(n, 256) float32: each thumbnail at 16 x 16 (2 x 2 means), standardised."""
    small = torch.nn.functional.avg_pool2d(thumbs.float()[:, None], THUMB // 16)
    return standardised(small.reshape(len(thumbs), -1))


def nearest(vectors, k):
    """(similarities, indices), each (n, k): every row's k nearest other rows by inner product (faiss, exact)."""
    import faiss

    data = np.ascontiguousarray(vectors.numpy(), dtype=np.float32)
    index = faiss.IndexFlatIP(data.shape[1])
    index.add(data)
    sims, found = index.search(data, min(k + 1, len(data)))
    return sims, found


def hash_neighbours(hashes, radius):
    """[(i, j)], i < j, of the 64-bit hashes within `radius` bits of each other (faiss's binary index, exact)."""
    import faiss

    codes = np.ascontiguousarray(hashes.numpy().astype("<i8").view(np.uint8).reshape(len(hashes), 8))
    index = faiss.IndexBinaryFlat(64)
    index.add(codes)
    limits, _, found = index.range_search(codes, radius + 1)  # faiss keeps distances below the radius it is given
    return [(i, int(j)) for i in range(len(hashes)) for j in found[limits[i]:limits[i + 1]] if i < j]


def candidates(usable, thumbs, hashes, features, neighbours, hash_radius):
    """Sorted [(i, j)], i < j: the pairs of `usable` samples (indices into the arrays) worth verifying."""
    at = torch.as_tensor(usable)
    pairs = set()
    for vectors in (descriptors(thumbs[at]), None if features is None else standardised_rows(features[at])):
        if vectors is None:
            continue
        _, found = nearest(vectors, neighbours)
        pairs |= {tuple(sorted((int(at[i]), int(at[j])))) for i, row in enumerate(found) for j in row
                  if j >= 0 and j != i}
    pairs |= {(int(at[i]), int(at[j])) for i, j in hash_neighbours(hashes[at], hash_radius)}
    return sorted(pairs)


def standardised_rows(features):
    """Features to unit length (the cosine: features are compared as they point, not as they are centred)."""
    return features / features.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def aligned(thumbs, pairs, process_index=0, num_processes=1, block=256):
    """{(i, j): the best aligned correlation of the pair} for the pairs whose first sample is this process's
    (i % num_processes): each sample's windows against its partners' whole views, both ways."""
    partners = {}
    for i, j in pairs:
        partners.setdefault(i, []).append(j)
        partners.setdefault(j, []).append(i)
    mine = sorted(s for s in partners if s % num_processes == process_index)
    whole = views(thumbs, whole_only=True)[:, 0]  # every sample's whole view
    best = {}
    for start in range(0, len(mine), block):
        chunk = mine[start:start + block]
        seen = views(thumbs[chunk])  # (b, K, D)
        for s, own in zip(chunk, seen):
            others = partners[s]
            scores = (own @ whole[others].T).max(dim=0).values  # this sample's best window against each partner
            for other, score in zip(others, scores.tolist()):
                best[(s, other)] = score
    return best


def near_pairs(best, pairs, similarity):
    """[(i, j, score)] of the candidate `pairs` whose aligned correlation, the best of either one's windows against
    the other (`best`: every process's `aligned`, merged), is at least `similarity`."""
    found = []
    for i, j in pairs:
        score = max(best[(i, j)], best[(j, i)])
        if score >= similarity:
            found.append((i, j, score))
    return found
