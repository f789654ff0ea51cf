"""Clustering one word's occurrences into senses: substitute bags, TF-IDF, average linkage, the number of senses.

Each occurrence is a bag of the LM's substitutes for it (forward and backward, each weighted by
its probability, folded onto lemmas, function words dropped); TF-IDF over the word's occurrences
makes the substitutes that tell occurrences apart count most. Occurrences (their bags, their
vectors, or both side by side) are clustered by average linkage on cosine distance.

The number of senses comes from the data (:func:`cut_senses`): a stopping rule on the merge
distance relative to the word's own spread, capped at ``max_senses``. A word whose occurrences
all merge below that distance has one sense.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np
from scipy import sparse
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


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


def cut_senses(distances: np.ndarray, max_senses: int = 10, separation: float = 1.0, n_senses: Optional[int] = None) -> np.ndarray:
    """int ``[n]`` sense labels 0..k-1 (0 the largest) from average linkage over ``distances``.

    With ``n_senses`` the tree is cut into that many clusters. Otherwise the number comes from
    the data, by a stopping rule on merge distance that is free of the representation's scale:
    two clusters stay apart when their average distance exceeds ``separation`` times the mean
    distance between the word's occurrences; at most ``max_senses`` clusters.
    """
    n = len(distances)
    if n < 3 or max_senses < 2 or n_senses == 1:
        return np.zeros(n, dtype=np.int64)
    condensed = squareform(distances, checks=False)
    tree = linkage(condensed, method="average")
    if n_senses is not None:
        return _relabel(fcluster(tree, n_senses, criterion="maxclust"))
    threshold = separation * float(condensed.mean())
    if threshold <= 0:
        return np.zeros(n, dtype=np.int64)
    labels = fcluster(tree, threshold, criterion="distance")
    if labels.max() > max_senses:
        labels = fcluster(tree, max_senses, criterion="maxclust")
    return _relabel(labels)


def adjusted_rand(a: Sequence[int], b: Sequence[int]) -> float:
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
