"""How much a word's use differs between two corpora, from its occurrences in each.

Every measure compares two samples of one word's occurrences: their vectors (rows, one per
occurrence) and their graded sense assignments (rows summing to 1, the senses induced jointly
over both corpora).

- **APD**, average pairwise distance: the mean cosine distance over every pair of one occurrence
  from A and one from B (SemEval-2020 Task 1's measure). It includes the word's own spread: a
  word with several senses has a high APD even when nothing changed.
- **APD-c**: APD less the mean of the two corpora's own APD (over their distinct pairs). About 0
  when both samples come from the same distribution; for unit vectors it equals half the squared
  distance between the two corpora's mean vectors.
- **PRT**, prototype distance: the cosine distance between the two corpora's mean (unit) vectors.
- **JSD**: the Jensen-Shannon divergence (base 2, in [0, 1]) of the word's sense shares in A and B.
- **MAHAL**: the squared Mahalanobis distance between the two corpora's mean (unit) vectors under
  the pooled occurrences' covariance cut to its top ``MAHAL_DIMS`` principal axes (a regularised
  Hotelling's T-squared without its sample-size factor), less what sampling alone gives it
  (``axes * (1/n_A + 1/n_B)``), so about 0 for two samples of one distribution whatever their
  sizes. Each axis counts by how far the means part along it relative to the occurrences' own
  spread there, so a word's few dominant directions (its forms, the syntax around it) no longer
  drown the rest as they do in APD-c.

APD and APD-c use the identity ``mean_ij u_i . v_j = mean(u) . mean(v)`` on unit rows, so each
costs one pass over the occurrences, and a bootstrap replicate one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

MEASURES = ("apd", "apd_c", "prt", "jsd", "mahal")
MAHAL_DIMS = 10  # principal axes MAHAL keeps (docs/change.md#choosing-the-default-measure)


def unit(matrix: np.ndarray) -> np.ndarray:
    """float64 rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"expected a matrix of occurrence vectors (one row each), got shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def _check_pair(a: np.ndarray, b: np.ndarray) -> None:
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"each corpus needs at least one occurrence (got {len(a)} and {len(b)})")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the two corpora's vectors differ in width ({a.shape[1]} and {b.shape[1]})")


def apd(a: np.ndarray, b: np.ndarray) -> float:
    """Average cosine distance over all pairs (one occurrence of ``a``, one of ``b``)."""
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    return float(1.0 - ua.mean(0) @ ub.mean(0))


def within_apd(a: np.ndarray) -> float:
    """Average cosine distance over the distinct pairs of one corpus's occurrences (0 for fewer than 2)."""
    ua = unit(a)
    n = len(ua)
    if n < 2:
        return 0.0
    total = ua.sum(0)
    self_sims = float((ua * ua).sum())
    return float(1.0 - (total @ total - self_sims) / (n * (n - 1)))


def apd_c(a: np.ndarray, b: np.ndarray) -> float:
    """APD less the mean of the two corpora's own APD (about 0 for samples of one distribution)."""
    return apd(a, b) - 0.5 * (within_apd(a) + within_apd(b))


def prt(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine distance between the two corpora's prototypes (the means of their unit vectors)."""
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    ma, mb = ua.mean(0), ub.mean(0)
    norm = np.linalg.norm(ma) * np.linalg.norm(mb)
    return float(1.0 - ma @ mb / norm) if norm > 0 else 1.0


def whitened(a: np.ndarray, b: np.ndarray, dims: int = MAHAL_DIMS) -> Tuple[np.ndarray, np.ndarray]:
    """The two corpora's unit rows in the pooled occurrences' top ``dims`` principal axes, centred
    on the pooled mean and each axis scaled to unit variance (axes without spread are dropped)."""
    if dims < 1:
        raise ValueError(f"dims must be 1 or more, got {dims}")
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    pooled = np.vstack([ua, ub])
    centred = pooled - pooled.mean(0)
    _, spread, axes = np.linalg.svd(centred, full_matrices=False)
    spread = spread / np.sqrt(len(pooled))
    r = int(min(dims, (spread > 1e-9 * max(float(spread[0]) if len(spread) else 0.0, 1e-12)).sum()))
    z = centred @ axes[:r].T / spread[:r] if r else np.zeros((len(pooled), 0))
    return z[: len(ua)], z[len(ua) :]


def sampling_floor(za: np.ndarray, zb: np.ndarray) -> float:
    """What the squared distance of two :func:`whitened` samples' means comes to with no change at
    all: each kept axis has unit spread, so its means differ by ``1/n_A + 1/n_B`` in expectation."""
    return za.shape[1] * (1.0 / len(za) + 1.0 / len(zb))


def mahal(a: np.ndarray, b: np.ndarray, dims: int = MAHAL_DIMS) -> float:
    """Squared distance between the two corpora's means in :func:`whitened` coordinates less its
    :func:`sampling_floor` (about 0 for samples of one distribution; 0 when no axis has spread)."""
    za, zb = whitened(a, b, dims)
    return float(((za.mean(0) - zb.mean(0)) ** 2).sum()) - sampling_floor(za, zb)


def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (base 2: 0 for equal distributions, 1 for disjoint ones)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"two distributions over the same senses are needed, got shapes {p.shape} and {q.shape}")
    if (p < 0).any() or (q < 0).any() or p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("sense shares must be non-negative and not all zero")
    p, q = p / p.sum(), q / q.sum()
    m = 0.5 * (p + q)

    def kl(x: np.ndarray) -> float:
        inside = x > 0
        return float((x[inside] * np.log2(x[inside] / m[inside])).sum())

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def sense_shares(weights: np.ndarray) -> np.ndarray:
    """A corpus's share of each sense: the mean of its occurrences' graded assignments."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or len(weights) == 0:
        raise ValueError(f"expected graded sense assignments [occurrences, senses], got shape {weights.shape}")
    return weights.mean(0)


def sense_counts(weights: np.ndarray) -> np.ndarray:
    """int ``[senses]``: how many occurrences have each sense as their strongest."""
    weights = np.asarray(weights)
    return (
        np.bincount(weights.argmax(1), minlength=weights.shape[1]).astype(np.int64)
        if len(weights)
        else np.zeros(weights.shape[1], np.int64)
    )


@dataclass(frozen=True)
class BinaryRule:
    """SemEval-2020 Task 1's binary change: a word gained (lost) a sense when the sense has at most
    ``at_most`` occurrences in A (B) and at least ``at_least`` in B (A)."""

    at_least: int = 5
    at_most: int = 2

    def __post_init__(self) -> None:
        if self.at_most < 0 or self.at_least <= self.at_most:
            raise ValueError(f"the binary rule needs 0 <= at_most < at_least, got at_most={self.at_most}, at_least={self.at_least}")

    def changes(self, counts_a: np.ndarray, counts_b: np.ndarray) -> Tuple[List[int], List[int]]:
        """(senses gained in B, senses lost in B), from each sense's occurrence counts in A and B."""
        counts_a, counts_b = np.asarray(counts_a), np.asarray(counts_b)
        if counts_a.shape != counts_b.shape:
            raise ValueError(f"sense counts of A and B differ in length ({counts_a.shape} and {counts_b.shape})")
        gained = [int(s) for s in np.flatnonzero((counts_a <= self.at_most) & (counts_b >= self.at_least))]
        lost = [int(s) for s in np.flatnonzero((counts_b <= self.at_most) & (counts_a >= self.at_least))]
        return gained, lost

    def changed(self, counts_a: np.ndarray, counts_b: np.ndarray) -> bool:
        gained, lost = self.changes(counts_a, counts_b)
        return bool(gained or lost)


def measure_all(a: np.ndarray, b: np.ndarray, weights_a: np.ndarray, weights_b: np.ndarray) -> Dict[str, float]:
    """Every measure of :data:`MEASURES` for one word."""
    return {
        "apd": apd(a, b),
        "apd_c": apd_c(a, b),
        "prt": prt(a, b),
        "jsd": jsd(sense_shares(weights_a), sense_shares(weights_b)),
        "mahal": mahal(a, b),
    }


def bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    weights_a: np.ndarray,
    weights_b: np.ndarray,
    n_resamples: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> Dict[str, Tuple[float, float]]:
    """Percentile intervals of every measure: the occurrences of each corpus resampled with
    replacement (the senses stay those induced on the full samples); the same ``seed`` gives the
    same intervals."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be 1 or more, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    wa, wb = np.asarray(weights_a, np.float64), np.asarray(weights_b, np.float64)
    if len(wa) != len(ua) or len(wb) != len(ub):
        raise ValueError("one row of sense weights per occurrence is needed in each corpus")
    rng = np.random.default_rng(seed)
    na, nb = len(ua), len(ub)
    ca = np.stack([np.bincount(rng.integers(0, na, na), minlength=na) for _ in range(n_resamples)]).astype(np.float64)
    cb = np.stack([np.bincount(rng.integers(0, nb, nb), minlength=nb) for _ in range(n_resamples)]).astype(np.float64)
    sa, sb = ca @ ua, cb @ ub  # [R, dim]: summed unit vectors of each replicate
    ma, mb = sa / na, sb / nb
    between = 1.0 - (ma * mb).sum(1)

    def within(sums: np.ndarray, n: int) -> np.ndarray:
        if n < 2:
            return np.zeros(len(sums))
        return 1.0 - ((sums * sums).sum(1) - n) / (n * (n - 1))  # a drawn occurrence paired with its repeats counts distance 0

    za, zb = whitened(a, b)  # the axes and scales of the full samples; each replicate moves only the means
    norms = np.linalg.norm(ma, axis=1) * np.linalg.norm(mb, axis=1)
    values = {
        "apd": between,
        "apd_c": between - 0.5 * (within(sa, na) + within(sb, nb)),
        "prt": np.where(norms > 0, 1.0 - (ma * mb).sum(1) / np.where(norms > 0, norms, 1.0), 1.0),
        "jsd": np.array([jsd(pa, pb) for pa, pb in zip(ca @ wa / na, cb @ wb / nb)]),
        "mahal": ((ca @ za / na - cb @ zb / nb) ** 2).sum(1) - sampling_floor(za, zb),
    }
    tail = (1 - confidence) / 2 * 100
    return {name: (float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail))) for name, v in values.items()}
