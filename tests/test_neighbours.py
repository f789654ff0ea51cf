"""The nearest-neighbour index over token occurrences, checked against brute-force exact search."""
from __future__ import annotations

import numpy as np
import pytest
import spacy

from spacy_elmo.search.index import TokenIndex, exact_search, recall_at_k, topk
from spacy_elmo.senses import NoElmoError


def brute_force(matrix: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return np.argsort(-(q @ unit.T), axis=1, kind="stable")[:, :k]


def random_index(n: int = 3000, dim: int = 24, **kwargs) -> tuple:
    rng = np.random.default_rng(7)
    matrix = rng.normal(size=(n, dim)).astype(np.float32)
    index = TokenIndex(store_context=False, **kwargs)
    index.add(matrix[: n // 2], [0] * (n // 2), [0] * (n // 2), list(range(n // 2)), ["a"] * (n // 2))
    index.add(matrix[n // 2 :], [1] * (n - n // 2), [0] * (n - n // 2), list(range(n - n // 2)), ["b"] * (n - n // 2))
    return index, matrix, rng.normal(size=(40, dim)).astype(np.float32)


def test_topk_orders_best_first():
    scores, ids = topk(np.array([[0.1, 0.9, 0.5, 0.7]]), 3)
    assert ids.tolist() == [[1, 3, 2]] and scores[0].tolist() == pytest.approx([0.9, 0.7, 0.5])


@pytest.mark.parametrize("block_size", [1, 7, 500, 100000])
def test_exact_search_in_blocks_matches_brute_force(block_size):
    index, matrix, queries = random_index(block_size=block_size)
    scores, ids = index.search(queries, k=12)
    np.testing.assert_array_equal(ids, brute_force(matrix, queries, 12))
    assert np.all(np.diff(scores, axis=1) <= 0)
    unit = matrix[ids[0]] / np.linalg.norm(matrix[ids[0]], axis=1, keepdims=True)
    np.testing.assert_allclose(scores[0], unit @ (queries[0] / np.linalg.norm(queries[0])), atol=1e-5)
    # k larger than a block and than the index
    assert exact_search(matrix[:5], queries[:2], 10, block_size=2)[1].shape == (2, 5)


def test_add_after_search_and_metadata():
    index, matrix, _ = random_index(n=100)
    assert index.query(matrix[60], k=1)[0].text == "b" and index.query(matrix[60], k=1)[0].token == 10
    index.add(matrix[:1] * -1, [5], [2], [3], ["c"])
    hit = index.query(-matrix[0], k=1)[0]
    assert (hit.doc, hit.sentence, hit.token, hit.text) == (5, 2, 3, "c") and hit.score == pytest.approx(1.0, abs=1e-5)


def test_hnswlib_recall_and_round_trip(tmp_path):
    pytest.importorskip("hnswlib")
    index, matrix, queries = random_index(n=4000, backend="hnswlib", ef=100)
    _, ids = index.search(queries, k=10)
    _, exact_ids = index.search(queries, k=10, exact=True)
    np.testing.assert_array_equal(exact_ids, brute_force(matrix, queries, 10))
    assert recall_at_k(ids, exact_ids) >= 0.9
    index.save(tmp_path / "hnsw")
    loaded = TokenIndex.load(tmp_path / "hnsw")
    np.testing.assert_array_equal(loaded.search(queries, k=10)[1], ids)


def test_errors(tmp_path):
    index, _, _ = random_index(n=50)
    with pytest.raises(ValueError, match="dimension 5 for an index of dimension 24"):
        index.add(np.ones((1, 5)), [0], [0], [0], ["x"])
    with pytest.raises(ValueError, match="dimension 5"):
        index.query(np.ones(5))
    with pytest.raises(ValueError, match="k must be >= 1"):
        index.search(np.ones((1, 24)), k=0)
    with pytest.raises(ValueError, match="the index is empty"):
        TokenIndex().search(np.ones((1, 3)))
    with pytest.raises(ValueError, match="backend must be one of"):
        TokenIndex(backend="annoy")
    with pytest.raises(ValueError, match="no ANN graph"):
        index.search(np.ones((1, 24)), exact=False)
    with pytest.raises(FileNotFoundError, match="not a token index folder"):
        TokenIndex.load(tmp_path)
    with pytest.raises(NoElmoError, match="run the 'elmo' component"):
        TokenIndex().add_docs([spacy.blank("en")("no vectors here")])


def test_docs_in_context(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo")
    docs = list(nlp.pipe(["The bank lends money. We sat on the river bank.", "A play in three acts.  The children play outside."]))
    index = TokenIndex()
    index.add_docs(docs)
    assert len(index) == sum(not t.is_space for d in docs for t in d)  # whitespace tokens are not indexed
    query = docs[1][9]
    assert query.text == "play"
    hits = index.query(query, k=3)
    assert (hits[0].doc, hits[0].sentence, hits[0].token, hits[0].text) == (1, 1, 9, "play")
    assert hits[0].score == pytest.approx(1.0, abs=1e-5) and hits[0].context == "The children play outside."
    vectors = np.stack([t._.elmo for d in docs for t in d if not t.is_space])
    expected = brute_force(vectors, query._.elmo[None], 3)[0]
    flat = [(d, t.i) for d, doc in enumerate(docs) for t in doc if not t.is_space]
    assert [(h.doc, h.token) for h in hits] == [flat[i] for i in expected]
    span_hits = index.query(docs[0][0:5], k=2)
    assert len(span_hits) == 2 and all(-1 <= h.score <= 1 for h in span_hits)
    only_play = index.query(docs[0][1], k=5, word="PLAY")  # the query is "bank"; only occurrences of "play" count
    assert [h.text for h in only_play] == ["play", "play"] and only_play[0].score >= only_play[1].score
    assert index.query(query, k=3, word="nonexistent") == []
    index.save(tmp_path / "exact")
    loaded = TokenIndex.load(tmp_path / "exact")
    assert loaded.query(query, k=3) == hits
    layered = TokenIndex(layer="layer:2")
    layered.add_docs(docs)
    assert layered.query(query, k=1)[0].token == 9
