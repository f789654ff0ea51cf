"""How much a word's use differs between two corpora, from its occurrences in each.

Every measure compares two samples of one word's occurrences: their vectors (rows, one per
occurrence) and their graded sense assignments (rows summing to 1, the senses induced jointly
over both corpora).

- **APD**, average pairwise distance: the mean cosine distance over every pair of one occurrence
  from A and one from B (SemEval-2020 Task 1's measure). It includes the word's own spread: a
  word with several senses has a high APD even when nothing changed.
- **APD-c**: APD less the mean of the two corpora's own APD (over their pairs of distinct
  occurrences). For unit vectors it is half the unbiased estimate of the squared distance between
  the two corpora's mean vectors (:func:`mean_distance`), so 0 in expectation when both samples
  come from one distribution.
- **PRT**, prototype distance: the cosine distance between the two corpora's mean (unit) vectors,
  each mean's squared length estimated over pairs of distinct occurrences (as APD-c's terms are),
  so that two samples of one distribution score about 0 rather than the sampling floor.
- **JSD**: the Jensen-Shannon divergence (base 2, in [0, 1]) of the word's sense shares in A and B.
- **MAHAL**: the squared Mahalanobis distance between the two corpora's mean (unit) vectors under
  the pooled occurrences' covariance cut to its top ``MAHAL_DIMS`` principal axes (a regularised
  Hotelling's T-squared without its sample-size factor), estimated without bias as APD-c is
  (:func:`mean_distance` in the whitened axes), so 0 in expectation for two samples of one
  distribution whatever their sizes. Each axis counts by how far the means part along it relative
  to the occurrences' own spread there, so a word's few dominant directions (its forms, the syntax
  around it) no longer drown the rest as they do in APD-c. With fewer occurrences (both corpora
  together) than its axes + 2 it is not computed (NaN): the whitened points then form a regular
  simplex and every split of them scores the same.

The bootstrap (:func:`bootstrap`) resamples each corpus's occurrences and computes every measure
in each replicate as on the sample itself: a pair of two draws of one occurrence is not a pair of
distinct occurrences, so it is left out of the within-corpus terms, as the sample has no such
pair. APD, APD-c and MAHAL are then unbiased in each replicate too, and their intervals are the
replicates' percentiles, and so does PRT, its lengths taken without their sampling floor; JSD,
biased upwards by sampling (it is at least 0), is corrected by the replicates' mean excess over
the estimate and gets the basic bootstrap interval around the corrected value, so that with no
change its interval holds 0 as often as its coverage says.

APD and APD-c use the identity ``mean_ij u_i . v_j = mean(u) . mean(v)`` on unit rows, so each
costs one pass over the occurrences, and a bootstrap replicate one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

MEASURES = ("apd", "apd_c", "prt", "jsd", "mahal")
MAHAL_DIMS = 10  # principal axes MAHAL keeps (docs/change.md#choosing-the-default-measure)
CENTRED = ("jsd",)  # biased measures, corrected by the replicates' mean excess (see estimates_and_intervals)


def unit(matrix: np.ndarray) -> np.ndarray:
    """float64 rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"expected a matrix of occurrence vectors (one row each), got shape {matrix.shape}")
    with np.errstate(invalid="ignore"):  # a NaN or infinite row stays non-finite, for the measures to refuse by name
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1.0, norms)


def non_finite_rows(matrix: np.ndarray) -> np.ndarray:
    """int indices of the rows holding NaN or an infinite value."""
    return np.flatnonzero(~np.isfinite(np.asarray(matrix, dtype=np.float64)).all(axis=1))


def _check_pair(a: np.ndarray, b: np.ndarray) -> None:
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"each corpus needs at least one occurrence (got {len(a)} and {len(b)})")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the two corpora's vectors differ in width ({a.shape[1]} and {b.shape[1]})")
    bad_a, bad_b = len(non_finite_rows(a)), len(non_finite_rows(b))
    if bad_a or bad_b:
        raise ValueError(
            f"occurrence vectors hold NaN or infinite values ({bad_a} rows in A, {bad_b} in B): nothing can be measured from them"
        )


def draw_counts(rng: np.random.Generator, n: int, n_resamples: int) -> np.ndarray:
    """float64 ``[n_resamples, n]``: how often each of ``n`` occurrences is drawn in each resample of size ``n``."""
    drawn = rng.integers(0, n, (n_resamples, n)) + n * np.arange(n_resamples)[:, None]
    return np.bincount(drawn.ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(np.float64)


def _mean_and_pair_dot(x: np.ndarray, counts: Optional[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """``([R, dim] mean rows, [R] mean dot product over pairs of distinct occurrences)`` of ``x`` with
    each occurrence drawn ``counts[r, i]`` times (``None``: the sample itself, once each). Two draws of
    one occurrence are not a pair of distinct occurrences; with no such pair at all (one occurrence
    drawn) the occurrence's dot product with itself stands in."""
    drawn = np.ones((1, len(x))) if counts is None else counts
    n = drawn.sum(1)
    sums = drawn @ x
    squared = drawn * drawn
    same = squared @ (x * x).sum(1)  # every ordered pair of draws of one occurrence (itself included)
    pairs = n * n - squared.sum(1)
    inside = np.where(pairs > 0, ((sums * sums).sum(1) - same) / np.where(pairs > 0, pairs, 1.0), same / squared.sum(1))
    return sums / n[:, None], inside


def mean_distance(a: np.ndarray, b: np.ndarray, counts_a: Optional[np.ndarray] = None, counts_b: Optional[np.ndarray] = None) -> np.ndarray:
    """The unbiased estimate of the squared distance between the means of the distributions ``a`` and
    ``b`` are drawn from: ``mean dot(a_i, a_j) + mean dot(b_i, b_j) - 2 mean(a) . mean(b)``, the first
    two over pairs of distinct occurrences, so its expectation is 0 when both come from one
    distribution. ``[1]``, or ``[R]`` for the resamples ``counts_a``/``counts_b`` (:func:`draw_counts`)."""
    mean_a, inside_a = _mean_and_pair_dot(np.asarray(a, np.float64), counts_a)
    mean_b, inside_b = _mean_and_pair_dot(np.asarray(b, np.float64), counts_b)
    return inside_a + inside_b - 2.0 * (mean_a * mean_b).sum(1)


def apd(a: np.ndarray, b: np.ndarray) -> float:
    """Average cosine distance over all pairs (one occurrence of ``a``, one of ``b``)."""
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    return float(1.0 - ua.mean(0) @ ub.mean(0))


def within_apd(a: np.ndarray) -> float:
    """Average cosine distance over the pairs of distinct occurrences of one corpus (one occurrence:
    its distance to itself, 0 unless its vector is zero)."""
    ua = unit(a)
    if len(ua) == 0:
        raise ValueError("a corpus needs at least one occurrence")
    return float(1.0 - _mean_and_pair_dot(ua, None)[1][0])


def apd_c(a: np.ndarray, b: np.ndarray) -> float:
    """APD less the mean of the two corpora's own APD: half :func:`mean_distance` of the unit vectors
    (0 in expectation for samples of one distribution)."""
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    return float(0.5 * mean_distance(ua, ub)[0])


def prt(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine distance between the two corpora's prototypes (the means of their unit vectors), each
    prototype's length taken without its sampling floor (see :func:`_prt_rows`)."""
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    (ma, pair_a), (mb, pair_b) = _mean_and_pair_dot(ua, None), _mean_and_pair_dot(ub, None)
    return float(_prt_rows(ma, mb, pair_a, pair_b)[0])


def _prt_rows(ma: np.ndarray, mb: np.ndarray, pair_a: Optional[np.ndarray] = None, pair_b: Optional[np.ndarray] = None) -> np.ndarray:
    """``1 - ma . mb / (|ma| |mb|)``, rows of means. With ``pair_a``/``pair_b`` (the mean dot product
    over pairs of distinct occurrences, an unbiased estimate of the squared length of the mean the
    sample is drawn from), those replace the squared lengths: a sample mean's own length carries
    each occurrence's dot product with itself, a floor that makes two samples of one distribution
    look apart (in 256 dimensions, 0.2 where nothing changed), while ``ma . mb`` of two independent
    samples has no such term. Where a pair term is not positive, the plain length stands in."""
    plain_a, plain_b = (ma * ma).sum(1), (mb * mb).sum(1)
    sq_a = plain_a if pair_a is None else np.where(pair_a > 0, pair_a, plain_a)
    sq_b = plain_b if pair_b is None else np.where(pair_b > 0, pair_b, plain_b)
    norms = np.sqrt(np.clip(sq_a, 0.0, None) * np.clip(sq_b, 0.0, None))
    return np.where(norms > 0, 1.0 - (ma * mb).sum(1) / np.where(norms > 0, norms, 1.0), 1.0)


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


def mahal_computable(za: np.ndarray, zb: np.ndarray) -> bool:
    """Whether MAHAL says anything about two :func:`whitened` samples: with fewer occurrences than the
    kept axes + 2 (Hotelling's condition) the points span all their axes as a regular simplex, and
    every split of them into A and B scores the same."""
    return len(za) + len(zb) >= za.shape[1] + 2


def mahal(a: np.ndarray, b: np.ndarray, dims: int = MAHAL_DIMS) -> float:
    """:func:`mean_distance` of the two corpora in :func:`whitened` coordinates: the squared distance
    between their means, 0 in expectation for samples of one distribution (0 when no axis has
    spread); NaN when not :func:`mahal_computable` (too few occurrences for the axes)."""
    za, zb = whitened(a, b, dims)
    return float(mean_distance(za, zb)[0]) if mahal_computable(za, zb) else float("nan")


def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (base 2: 0 for equal distributions, 1 for disjoint ones)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"two distributions over the same senses are needed, got shapes {p.shape} and {q.shape}")
    if (p < 0).any() or (q < 0).any() or p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("sense shares must be non-negative and not all zero")
    return float(_jsd_rows(p[None], q[None])[0])


def _jsd_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """:func:`jsd` of each row pair (rows non-negative, not all zero)."""
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    m = 0.5 * (p + q)

    def kl(x: np.ndarray) -> np.ndarray:
        inside = x > 0
        return np.where(inside, x * np.log2(np.where(inside, x, 1.0) / np.where(inside, m, 1.0)), 0.0).sum(1)

    return np.maximum(0.0, 0.5 * kl(p) + 0.5 * kl(q))


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


def _measures(
    ua: np.ndarray,
    ub: np.ndarray,
    wa: np.ndarray,
    wb: np.ndarray,
    za: np.ndarray,
    zb: np.ndarray,
    counts_a: Optional[np.ndarray] = None,
    counts_b: Optional[np.ndarray] = None,
) -> Dict[str, np.ndarray]:
    """Every measure of unit rows ``ua``/``ub``, sense weights ``wa``/``wb`` and whitened rows
    ``za``/``zb``, on the samples (``[1]`` each) or on the resamples ``counts_a``/``counts_b`` (``[R]``),
    by one formula: the replicates are measured as the sample is."""
    draws_a = np.ones((1, len(ua))) if counts_a is None else counts_a
    draws_b = np.ones((1, len(ub))) if counts_b is None else counts_b
    (ma, pair_a), (mb, pair_b) = _mean_and_pair_dot(ua, counts_a), _mean_and_pair_dot(ub, counts_b)
    mahal_values = mean_distance(za, zb, counts_a, counts_b) if mahal_computable(za, zb) else np.full(len(ma), np.nan)
    return {
        "apd": 1.0 - (ma * mb).sum(1),
        "apd_c": 0.5 * mean_distance(ua, ub, counts_a, counts_b),
        "prt": _prt_rows(ma, mb, pair_a, pair_b),
        "jsd": _jsd_rows(draws_a @ wa / len(wa), draws_b @ wb / len(wb)),
        "mahal": mahal_values,
    }


def _prepared(
    a: np.ndarray, b: np.ndarray, weights_a: np.ndarray, weights_b: np.ndarray
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ua, ub = unit(a), unit(b)
    _check_pair(ua, ub)
    wa, wb = np.asarray(weights_a, np.float64), np.asarray(weights_b, np.float64)
    if wa.ndim != 2 or wb.ndim != 2 or wa.shape[1] != wb.shape[1] or len(wa) != len(ua) or len(wb) != len(ub):
        raise ValueError("one row of sense weights per occurrence, over the same senses, is needed in each corpus")
    if (wa < 0).any() or (wb < 0).any() or (wa.sum(1) <= 0).any() or (wb.sum(1) <= 0).any():
        raise ValueError("sense weights must be non-negative and not all zero in any occurrence")
    za, zb = whitened(ua, ub)
    return ua, ub, wa, wb, za, zb


def measure_all(a: np.ndarray, b: np.ndarray, weights_a: np.ndarray, weights_b: np.ndarray) -> Dict[str, float]:
    """Every measure of :data:`MEASURES` for one word (MAHAL NaN when not :func:`mahal_computable`)."""
    return {name: float(v[0]) for name, v in _measures(*_prepared(a, b, weights_a, weights_b)).items()}


def replicates(
    a: np.ndarray, b: np.ndarray, weights_a: np.ndarray, weights_b: np.ndarray, n_resamples: int = 200, seed: int = 0
) -> Tuple[Dict[str, float], Dict[str, np.ndarray]]:
    """``(estimates, replicates)``: every measure on the samples, and on ``n_resamples`` resamples
    (``[n_resamples]`` each) of each corpus's occurrences drawn with replacement, each replicate
    measured as the samples are (pairs of two draws of one occurrence left out of the within-corpus
    terms; the senses and MAHAL's axes those of the full samples); MAHAL all NaN where it is not
    computed."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be 1 or more, got {n_resamples}")
    prepared = _prepared(a, b, weights_a, weights_b)
    rng = np.random.default_rng(seed)
    counts_a = draw_counts(rng, len(prepared[0]), n_resamples)
    counts_b = draw_counts(rng, len(prepared[1]), n_resamples)
    estimates = {name: float(v[0]) for name, v in _measures(*prepared).items()}
    return estimates, _measures(*prepared, counts_a, counts_b)


def bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    weights_a: np.ndarray,
    weights_b: np.ndarray,
    n_resamples: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> Dict[str, Tuple[float, float]]:
    """Bootstrap intervals of every measure (see :func:`estimates_and_intervals`, whose intervals
    these are: around the bias-corrected estimate for PRT and JSD)."""
    return estimates_and_intervals(a, b, weights_a, weights_b, n_resamples, confidence, seed)[1]


def estimates_and_intervals(
    a: np.ndarray,
    b: np.ndarray,
    weights_a: np.ndarray,
    weights_b: np.ndarray,
    n_resamples: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> Tuple[Dict[str, float], Dict[str, Tuple[float, float]]]:
    """Every measure and its bootstrap interval, from its :func:`replicates`. APD, APD-c and MAHAL,
    unbiased in each replicate, and PRT (its lengths without their sampling floor), keep their
    estimate and get the replicates' percentiles. JSD is biased upwards by sampling (it is at least
    0, and two samples of one distribution give a positive value): its estimate is corrected by the
    bootstrap's estimate of that bias,
    the replicates' mean excess over the estimate (``corrected = estimate - excess``), and its
    interval is the basic bootstrap interval around it (the percentiles less twice the excess), so
    that with no change the interval holds 0 as often as its coverage says. MAHAL's interval is
    ``(nan, nan)`` where it is not computed. The same ``seed`` gives the same figures."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    estimates, values = replicates(a, b, weights_a, weights_b, n_resamples, seed)
    tail = (1 - confidence) / 2 * 100
    corrected = dict(estimates)
    out = {}
    for name, v in values.items():
        if np.isnan(v).any():
            out[name] = (float("nan"), float("nan"))
            continue
        low, high = float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail))
        if name in CENTRED:
            excess = float(v.mean() - estimates[name])
            corrected[name] = estimates[name] - excess
            low, high = low - 2 * excess, high - 2 * excess
        out[name] = (low, high)
    return corrected, out


def permutation_pvalue(
    a: np.ndarray,
    b: np.ndarray,
    weights_a: np.ndarray,
    weights_b: np.ndarray,
    measure: str = "mahal",
    n_permutations: int = 999,
    seed: int = 0,
) -> float:
    """The p-value of ``measure`` under the null that A and B are one population: the occurrences'
    corpus labels shuffled ``n_permutations`` times (the sizes kept), each shuffle measured as the
    samples are (MAHAL's axes are the pooled occurrences', so they do not move with the labels), and
    ``p = (1 + shuffles at least as large) / (1 + n_permutations)`` (Phipson & Smyth 2010: never 0).
    NaN where the measure is not computed (MAHAL on too few occurrences)."""
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(MEASURES)}, got {measure!r}")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be 1 or more, got {n_permutations}")
    ua, ub, wa, wb, za, zb = _prepared(a, b, weights_a, weights_b)
    observed = float(_measures(ua, ub, wa, wb, za, zb)[measure][0])
    if not np.isfinite(observed):
        return float("nan")
    u, w, z, n_a = np.vstack([ua, ub]), np.vstack([wa, wb]), np.vstack([za, zb]), len(ua)
    rng = np.random.default_rng(seed)
    exceed = 0
    for _ in range(n_permutations):
        order = rng.permutation(len(u))
        first, second = order[:n_a], order[n_a:]
        value = float(_measures(u[first], u[second], w[first], w[second], z[first], z[second])[measure][0])
        exceed += value >= observed - 1e-12 * max(abs(observed), 1.0)
    return (1 + exceed) / (1 + n_permutations)


def energy_pvalue(x: np.ndarray, n_a: int, n_permutations: int = 999, seed: int = 0) -> float:
    """The permutation p-value of the energy distance (Szekely & Rizzo 2004) between the first
    ``n_a`` rows of ``x`` (corpus A) and the rest (B): ``2 E|a - b| - E|a - a'| - E|b - b'|`` over
    the unit rows' Euclidean distances (within a corpus over pairs of distinct occurrences), the
    corpus labels shuffled ``n_permutations`` times, ``p = (1 + shuffles at least as large) / (1 +
    n_permutations)``. It is 0 in expectation only when the two distributions are equal, so it
    answers any difference between them: a sense that appears or vanishes, or shares that move.
    ``x`` is what the senses were induced from (:attr:`..induction.induced.WordSenses.vectors`),
    read without the labels, so under the null every shuffle is as likely as the observed split."""
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be 1 or more, got {n_permutations}")
    u = unit(x)
    n_b = len(u) - n_a
    if n_a < 2 or n_b < 2:
        raise ValueError(f"the energy test needs 2 or more occurrences in each corpus, got {n_a} and {n_b}")
    if len(non_finite_rows(u)):
        raise ValueError("occurrence vectors hold NaN or infinite values: nothing can be tested on them")
    gram = u @ u.T
    sq = np.diag(gram)
    distances = np.sqrt(np.clip(sq[:, None] + sq[None, :] - 2.0 * gram, 0.0, None))
    labels = np.zeros(len(u))
    labels[n_a:] = 1.0
    rng = np.random.default_rng(seed)
    in_b = np.vstack([labels] + [rng.permutation(labels) for _ in range(n_permutations)])
    in_a = 1.0 - in_b
    to_a = in_a @ distances  # [P, n]: each occurrence's summed distance to A's occurrences
    to_b = distances.sum(0) - to_a  # ... and to B's (the rest), without a second product
    across = (to_b * in_a).sum(1) / (n_a * n_b)
    within_a = (to_a * in_a).sum(1) / (n_a * (n_a - 1))  # the diagonal is 0: distinct pairs only
    within_b = (to_b * in_b).sum(1) / (n_b * (n_b - 1))
    values = 2.0 * across - within_a - within_b
    observed = values[0]
    return float((values >= observed - 1e-12 * max(abs(observed), 1.0)).sum() / len(values))


def benjamini_hochberg(p_values: List[float]) -> List[float]:
    """Benjamini-Hochberg adjusted p-values (q-values) of the finite ``p_values`` (NaN stays NaN):
    calling the words with ``q <= alpha`` changed keeps the expected share of false calls among them
    at most ``alpha``."""
    p = np.asarray(p_values, dtype=np.float64)
    q = np.full(len(p), np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    if len(finite) == 0:
        return q.tolist()
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    scaled = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return q.tolist()


def share_change_pvalue(count_a: int, n_a: int, count_b: int, n_b: int) -> float:
    """Fisher's exact test (two-sided) of one sense's share in A (``count_a`` of ``n_a``) against B:
    a share that moved by less than its sampling noise has a large p-value."""
    from scipy.stats import fisher_exact

    table = [[count_a, n_a - count_a], [count_b, n_b - count_b]]
    return float(fisher_exact(table)[1])
