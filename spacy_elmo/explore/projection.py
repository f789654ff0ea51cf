"""The geometry of the explore page: occurrences on a 2-D map, and each one's nearest occurrences.

Both work on the occurrence vectors scaled to unit length, so that the map and the neighbour lists
agree with cosine similarity, and both are deterministic (the same vectors give the same page).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

BLOCK = 2048  # rows of the similarity matrix computed at once (2048 x n float32)
EXACT_UP_TO = 256  # below this size a full eigendecomposition is as fast as iterating


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (float32) with each row scaled to length 1; zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"expected a matrix of occurrence vectors, got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def project_2d(vectors: np.ndarray) -> Tuple[np.ndarray, Tuple[float, float]]:
    """PCA of the unit-length vectors to two dimensions: ``([n, 2] float32, explained)``, where
    ``explained`` is the share of the variance along each axis.

    Each axis's sign is fixed (its largest loading is positive), so the map does not flip between
    runs or machines. Fewer than two occurrences, or vectors that span less than two dimensions,
    give zeros on the missing axes.
    """
    unit = unit_rows(vectors)
    out = np.zeros((len(unit), 2), dtype=np.float32)
    explained = [0.0, 0.0]
    if len(unit) < 2:
        return out, (0.0, 0.0)
    centred = (unit - unit.mean(axis=0, keepdims=True)).astype(np.float64)
    # the leading eigenvectors of the smaller of X^T X (dim x dim) and X X^T (n x n)
    n, dim = centred.shape
    gram = centred.T @ centred if dim <= n else centred @ centred.T
    values, vectors = leading_eigenvectors(gram, 2)
    total = float(np.trace(gram))
    for axis in range(2):
        value = float(values[axis])
        if total <= 0 or value <= total * 1e-9:
            break
        vector = vectors[:, axis]
        direction = vector if dim <= n else centred.T @ vector / np.sqrt(value)
        if direction[np.argmax(np.abs(direction))] < 0:
            direction = -direction
        out[:, axis] = centred @ direction
        explained[axis] = value / total
    return out, (explained[0], explained[1])


def leading_eigenvectors(matrix: np.ndarray, k: int, tol: float = 1e-8, max_iter: int = 300) -> Tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues (descending) and their eigenvectors (columns) of a symmetric
    positive semi-definite matrix: a full ``eigh`` up to EXACT_UP_TO rows, above that subspace
    iteration (a fixed start, so deterministic) on k + 8 vectors until the eigenvalues settle
    to ``tol`` (relative), which is orders of magnitude faster than ``eigh`` for k = 2."""
    size = len(matrix)
    if size <= EXACT_UP_TO:
        values, vectors = np.linalg.eigh(matrix)
        return values[::-1][:k], vectors[:, ::-1][:, :k]
    basis = np.linalg.qr(np.random.default_rng(0).standard_normal((size, min(size, k + 8))))[0]
    previous = np.zeros(k)
    for _ in range(max_iter):
        product = matrix @ basis
        small_values, small_vectors = np.linalg.eigh(basis.T @ product)
        values = small_values[::-1][:k]
        if np.all(np.abs(values - previous) <= tol * max(abs(values[0]), 1e-300)):
            break
        previous = values
        basis = np.linalg.qr(product)[0]
    return values, basis @ small_vectors[:, ::-1][:, :k]


def nearest_occurrences(vectors: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Each occurrence's ``k`` most cosine-similar other occurrences, most similar first.

    Returns ``(indices [n, k'] int32, cosines [n, k'] float32)`` with ``k' = min(k, n - 1)``; ties
    are ordered by index. Exact: the similarity matrix is computed in blocks of rows.
    """
    if k < 0:
        raise ValueError(f"k must be 0 or more, got {k}")
    unit = unit_rows(vectors)
    n = len(unit)
    k = min(k, max(n - 1, 0))
    indices = np.zeros((n, k), dtype=np.int32)
    cosines = np.zeros((n, k), dtype=np.float32)
    if k == 0:
        return indices, cosines
    for start in range(0, n, BLOCK):
        rows = np.arange(start, min(start + BLOCK, n))
        sims = unit[rows] @ unit.T
        sims[np.arange(len(rows)), rows] = -np.inf  # not its own neighbour
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top_sims = np.take_along_axis(sims, top, axis=1)
        order = np.lexsort((top, -top_sims), axis=1)  # by similarity, then index
        indices[rows] = np.take_along_axis(top, order, axis=1)
        cosines[rows] = np.take_along_axis(top_sims, order, axis=1)
    return indices, cosines
