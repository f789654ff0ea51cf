"""Clustering one word's occurrences into senses: substitute bags, TF-IDF, cosine distances, the number of senses.

Each occurrence is a bag of the LM's substitutes for it (forward and backward, each weighted by
its probability, folded onto lemmas, function words dropped); TF-IDF over the word's occurrences
makes the substitutes that tell occurrences apart count most. Occurrences (their bags, their
vectors, their context vectors, or several side by side) are compared by cosine distance and
placed by their principal coordinates (:func:`embed_distances`).

The number of senses is decided against a null (:func:`count_senses`): a group of occurrences is
split in two only when the split separates it better than one Gaussian with its spread would be
separated, and each side keeps a minimum share; ``max_senses`` caps the number. A word whose
occurrences look like one distribution has one sense. How the rule was calibrated, and the
alternatives measured: docs/senses.md, "How many senses: the calibration".
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse

from . import SIGNIFICANCE


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def remove_form(vectors: np.ndarray, forms: Sequence[str]) -> np.ndarray:
    """``vectors`` less the mean vector of their form (``forms[i]``, e.g. ``cell`` or ``cells``): what the
    form alone contributes (number, capitals, inflection) is taken out, what the context adds stays.

    A form seen once is centred on the mean of all the occurrences instead."""
    x = np.asarray(vectors, dtype=np.float32)
    out = x - x.mean(0, keepdims=True)
    keys = np.asarray(forms)
    for form in np.unique(keys):
        members = keys == form
        if members.sum() > 1:
            out[members] = x[members] - x[members].mean(0, keepdims=True)
    return out


def substitute_bags(
    ids: Sequence[np.ndarray], log_probs: Sequence[np.ndarray], n_words: int, fold: np.ndarray, drop: np.ndarray, temperature: float = 1.0
) -> sparse.csr_matrix:
    """float32 ``[n, n_words]``: each occurrence's substitutes, summed over the directions given.

    ``ids[d]`` / ``log_probs[d]``: int ``[n, k]`` and float ``[n, k]`` for direction ``d``; each
    direction's top-k is renormalised (at ``temperature``) after dropping the ``drop`` words, so
    both directions weigh the same; ``fold`` maps a word id to its lemma's id.
    """
    blocks = []
    for id_block, lp_block in zip(ids, log_probs):
        id_block = np.asarray(id_block, dtype=np.int64)
        lp = np.asarray(lp_block, dtype=np.float64) / temperature
        p = np.exp(lp - lp.max(axis=1, keepdims=True)) * ~drop[id_block]
        p /= np.maximum(p.sum(axis=1, keepdims=True), 1e-12)
        rows = np.repeat(np.arange(len(id_block)), id_block.shape[1])
        blocks.append(sparse.csr_matrix((p.ravel(), (rows, fold[id_block].ravel())), shape=(len(id_block), n_words)))
    out = blocks[0]
    for block in blocks[1:]:
        out = out + block
    return out.astype(np.float32).tocsr()


def tfidf(bags: sparse.csr_matrix) -> Tuple[sparse.csr_matrix, np.ndarray]:
    """Unit-length TF-IDF rows of ``bags`` (IDF over these rows, smoothed) and the IDF weights ``[n_words]``."""
    n = bags.shape[0]
    df = np.bincount(bags.indices, minlength=bags.shape[1])
    idf = (np.log((1 + n) / (1 + df)) + 1).astype(np.float32)
    weighted = bags @ sparse.diags(idf)
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    return (sparse.diags(1 / np.where(norms == 0, 1, norms)) @ weighted).tocsr().astype(np.float32), idf


def cosine_distances(blocks: Sequence[Any]) -> np.ndarray:
    """float64 ``[n, n]`` cosine distances of the rows of the side-by-side unit blocks (each block weighs the same)."""
    sims = None
    for block in blocks:
        s = block @ block.T
        s = s.toarray() if sparse.issparse(s) else np.asarray(s)
        sims = s if sims is None else sims + s
    assert sims is not None
    dist = 1.0 - sims / len(blocks)
    np.fill_diagonal(dist, 0.0)
    return np.clip(dist, 0.0, 2.0)


def embed_distances(distances: np.ndarray, dims: int = 16) -> np.ndarray:
    """float64 ``[n, <=dims]`` points whose squared Euclidean distances approximate ``2 * distances``.

    ``distances`` are cosine distances of unit rows (``1 - similarity``); the similarities, centred
    on both sides, are a Gram matrix whose top eigenvectors (scaled by the square roots of their
    eigenvalues) are the points' principal coordinates (classical multidimensional scaling).
    """
    n = len(distances)
    if n < 2:
        return np.zeros((n, 1))
    gram = 1.0 - np.asarray(distances, dtype=np.float64)
    gram = gram - gram.mean(0, keepdims=True) - gram.mean(1, keepdims=True) + gram.mean()
    r = int(min(dims, n - 1))
    if n > 4 * r:
        from scipy.sparse.linalg import eigsh

        values, axes = eigsh(gram, k=r, which="LA", v0=np.random.default_rng(0).standard_normal(n))
    else:
        values, axes = np.linalg.eigh(gram)
    top = np.argsort(-values)[:r]
    return axes[:, top] * np.sqrt(np.clip(values[top], 0.0, None))


def _lloyd(x: np.ndarray, labels: np.ndarray, steps: int = 50) -> Tuple[np.ndarray, float]:
    """2-means from ``labels``: the converged labels and their within-cluster sum of squares."""
    for _ in range(steps):
        if labels.min() == labels.max():
            break
        centres = np.stack([x[labels == c].mean(0) for c in (0, 1)])
        new = ((x[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
        if (new == labels).all():
            break
        labels = new
    ss = float(sum(((x[labels == c] - x[labels == c].mean(0)) ** 2).sum() for c in (0, 1) if (labels == c).any()))
    return labels, ss


def _two_means(x: np.ndarray, rng: np.random.Generator, restarts: int = 3) -> Tuple[np.ndarray, float]:
    """The best 2-means split of centred ``x`` (within-cluster sum of squares) from the sign of its first
    principal axis and from ``restarts`` k-means++ seedings: labels (0/1) and that sum."""
    axis = np.linalg.svd(x[: min(len(x), 2000)], full_matrices=False)[2][0] if x.shape[1] > 1 else np.ones(1)
    best, best_ss = _lloyd(x, (x @ axis > 0).astype(np.int64))
    for _ in range(restarts):
        first = x[rng.integers(len(x))]
        far = ((x - first) ** 2).sum(1)
        if far.sum() <= 0:
            break
        second = x[rng.choice(len(x), p=far / far.sum())]
        labels, ss = _lloyd(x, (((x - second) ** 2).sum(1) < far).astype(np.int64))
        if ss < best_ss:
            best, best_ss = labels, ss
    return best, best_ss


SplitTest = Callable[[np.ndarray, np.random.Generator], Tuple[np.ndarray, float]]  # points, rng -> halves (0/1), z-score


def leading_axes(x: np.ndarray, axes: Optional[int]) -> np.ndarray:
    """``x`` centred and projected onto its ``axes`` leading principal axes (all of them when ``None``
    or when ``x`` has no more)."""
    centred = x - x.mean(0)
    if axes is None or axes >= x.shape[1]:
        return centred
    values, vectors = np.linalg.eigh(np.cov(centred, rowvar=False).reshape(x.shape[1], x.shape[1]))
    return centred @ vectors[:, np.argsort(values)[::-1][:axes]]


def split_score(x: np.ndarray, rng: np.random.Generator, n_null: int = 10, axes: Optional[int] = None) -> Tuple[np.ndarray, float]:
    """Split ``x`` in two and say how far that split is from what one Gaussian gives.

    The statistic is the 2-means within-cluster sum of squares over the total (lower = better
    separated); the null is a Gaussian with the same covariance spectrum as ``x`` (SigClust, Liu
    et al. 2008), drawn ``n_null`` times and split the same way. Returns the split's labels and
    the z-score of the statistic against the null (below 0: more separated than one Gaussian).
    ``axes``: split and test on the ``axes`` leading principal axes of ``x`` only (``None``: all).
    """
    centred = leading_axes(x, axes)
    total = float((centred**2).sum())
    labels, within = _two_means(centred, rng)
    if total <= 0:
        return labels, 0.0
    spectrum = np.clip(np.linalg.eigvalsh(np.cov(centred, rowvar=False).reshape(centred.shape[1], centred.shape[1])), 0.0, None)
    null = []
    for _ in range(n_null):
        sample = rng.standard_normal((len(x), len(spectrum))) * np.sqrt(spectrum)
        sample -= sample.mean(0)
        null.append(_two_means(sample, rng)[1] / max(float((sample**2).sum()), 1e-12))
    spread = max(float(np.std(null)), 1e-3)
    return labels, (within / total - float(np.mean(null))) / spread


def count_senses(
    points: np.ndarray,
    max_senses: int = 10,
    min_share: float = 0.05,
    significance: float = SIGNIFICANCE,
    n_senses: Optional[int] = None,
    seed: int = 0,
    min_size: int = 3,
    test: Optional[SplitTest] = None,
    axes: Optional[int] = 2,
) -> np.ndarray:
    """int ``[n]`` sense labels 0..k-1 (0 the largest): the number of senses decided against a null.

    Top-down: the senses so far (at first one, all the occurrences) are split in two, the most
    spread first, and a split is kept only when (1) it separates the occurrences better than one
    Gaussian with their spread would be separated (:func:`split_score`: its z-score is below
    ``-significance``) and (2) each side holds at least ``min_share`` of the word's occurrences
    (and ``min_size``). So occurrences drawn from one distribution stay one sense, and no sense is
    a handful of outliers. ``max_senses`` caps the number; ``n_senses`` fixes it instead (the
    splits are then made without the test). The senses found are refined by a few k-means steps.
    ``axes``: the test reads each group's ``axes`` leading principal axes only (``None``: all);
    the defaults (two axes, z below -0.6) were chosen on hand-labelled sense sets and checked on
    synthetic clouds of known k (``bench/null_rule.py``: one cloud, heavy-tailed included, stays
    one sense in 95% of draws of 40-300 points) and on a held-out labelled set (docs/senses.md,
    "How many senses").
    ``test`` replaces :func:`split_score` (the calibration bench compares other nulls through it).
    """
    n = len(points)
    if n < 2 * min_size or max_senses < 2 or n_senses == 1:
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if test is None:
        test = functools.partial(split_score, axes=axes)
    limit = n_senses if n_senses is not None else max_senses
    smallest = max(min_size, int(np.ceil(min_share * n))) if n_senses is None else 1
    open_: list = [np.arange(n)]
    done: list = []
    while open_ and len(open_) + len(done) < limit:
        open_.sort(key=lambda c: -float(((points[c] - points[c].mean(0)) ** 2).sum()))
        members = open_.pop(0)
        if len(members) < 2 * smallest:
            done.append(members)
            continue
        if n_senses is None:
            halves, z = test(points[members], rng)
            keep = z < -significance
        else:
            halves, _ = _two_means(points[members] - points[members].mean(0), rng)
            keep = True
        parts = [members[halves == 0], members[halves == 1]]
        if keep and min(len(p) for p in parts) >= smallest:
            open_.extend(parts)
        else:
            done.append(members)
    clusters = open_ + done
    labels = np.zeros(n, dtype=np.int64)
    for c, members in enumerate(clusters):
        labels[members] = c
    if len(clusters) > 1:
        labels = _refine(points, labels, smallest)
    return _relabel(labels)


def _refine(points: np.ndarray, labels: np.ndarray, smallest: int, steps: int = 10) -> np.ndarray:
    """A few k-means steps from ``labels``; a cluster that falls below ``smallest`` merges into the nearest."""
    for _ in range(steps):
        ids = np.unique(labels)
        centres = np.stack([points[labels == c].mean(0) for c in ids])
        sizes = np.array([(labels == c).sum() for c in ids])
        keep = sizes >= smallest if (sizes >= smallest).any() else sizes == sizes.max()
        new = ids[keep][((points[:, None, :] - centres[keep][None]) ** 2).sum(-1).argmin(1)]
        if (new == labels).all():
            break
        labels = new
    return labels


def cut_senses(
    distances: np.ndarray,
    max_senses: int = 10,
    n_senses: Optional[int] = None,
    *,
    min_share: float = 0.05,
    significance: float = SIGNIFICANCE,
    seed: int = 0,
    axes: Optional[int] = 2,
) -> np.ndarray:
    """int ``[n]`` sense labels 0..k-1 (0 the largest) from cosine ``distances``: the occurrences'
    principal coordinates (:func:`embed_distances`) split by :func:`count_senses` (its test on
    ``axes`` leading axes of each group)."""
    if len(distances) < 3:
        return np.zeros(len(distances), dtype=np.int64)
    return count_senses(embed_distances(distances), max_senses, min_share, significance, n_senses, seed, axes=axes)


def adjusted_rand(a: ArrayLike, b: ArrayLike) -> float:
    """The adjusted Rand index of two labelings of the same items (1: the same partition, about 0: unrelated)."""
    x, y = np.unique(np.asarray(a), return_inverse=True)[1].ravel(), np.unique(np.asarray(b), return_inverse=True)[1].ravel()
    n = len(x)
    if n != len(y):
        raise ValueError(f"the two labelings have {n} and {len(y)} items; expected the same items")
    if n < 2:
        return 1.0
    table = np.zeros((x.max() + 1, y.max() + 1))
    np.add.at(table, (x, y), 1)

    def pairs(counts: np.ndarray) -> float:
        return float((counts * (counts - 1) / 2).sum())

    index, rows, cols = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    expected = rows * cols / (n * (n - 1) / 2)
    top = (rows + cols) / 2
    return 1.0 if top == expected else (index - expected) / (top - expected)


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 by decreasing cluster size (ties: first occurrence)."""
    values, first, counts = np.unique(labels, return_index=True, return_counts=True)
    order = sorted(range(len(values)), key=lambda i: (-counts[i], first[i]))
    mapping = {values[i]: rank for rank, i in enumerate(order)}
    return np.array([mapping[v] for v in labels], dtype=np.int64)
