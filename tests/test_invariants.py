"""What users silently rely on: a token's vectors depend only on its own context."""
import json

import numpy as np
import pytest

from .conftest import ALLENNLP

SENTENCES = [s.split() for group in json.loads((ALLENNLP / "sentences.json").read_text()) for s in group]


@pytest.mark.parametrize("batch_size", [1, 2, 7, 64])
def test_batch_size_does_not_change_outputs(allennlp_bilm, batch_size):
    alone = [allennlp_bilm.embed_sentences([s])[0] for s in SENTENCES[:12]]
    batched = allennlp_bilm.embed_sentences(SENTENCES[:12], batch_size=batch_size)
    for a, b in zip(alone, batched):
        assert np.abs(a - b).max() < 1e-6


def test_neighbours_and_padding_do_not_matter(bilmtf_bilm):
    target = sorted(SENTENCES, key=len)[len(SENTENCES) // 2]
    alone = bilmtf_bilm.embed_batch([target])[0]
    longer, shorter = max(SENTENCES, key=len), min(SENTENCES, key=len)
    assert len(longer) > len(target) > len(shorter)
    mixed = bilmtf_bilm.embed_batch([longer, target, shorter])[1]
    assert np.abs(alone - mixed).max() < 1e-6


def test_repeated_calls_are_identical(allennlp_bilm):
    first = allennlp_bilm.embed_sentences(SENTENCES, batch_size=5)
    second = allennlp_bilm.embed_sentences(SENTENCES, batch_size=5)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


def test_shapes_and_empty_sentence(allennlp_bilm):
    out = allennlp_bilm.embed_sentences([["a", "b"], [], ["c"]])
    assert [o.shape for o in out] == [(3, 2, 32), (3, 0, 32), (3, 1, 32)]
    assert all(o.dtype == np.float32 for o in out)
    with_bounds = allennlp_bilm.embed_sentences([["a", "b"]], keep_boundaries=True)[0]
    assert with_bounds.shape == (3, 4, 32)
    assert np.abs(with_bounds[:, 1:3] - out[0]).max() < 1e-6
    assert allennlp_bilm.embed_sentences([]) == []


def test_order_is_kept_when_sorting_by_length(allennlp_bilm):
    sentences = [["x"] * n for n in (5, 1, 3)]
    assert [o.shape[1] for o in allennlp_bilm.embed_sentences(sentences, batch_size=2)] == [5, 1, 3]


def test_bad_batch_size(allennlp_bilm):
    with pytest.raises(ValueError, match="batch_size"):
        allennlp_bilm.embed_sentences([["a"]], batch_size=0)


@pytest.mark.parametrize("budget", [3, 40, 1000])
def test_token_budget_batching_gives_the_same_vectors(allennlp_bilm, budget):
    plain = allennlp_bilm.embed_sentences(SENTENCES[:12] + [[]], batch_size=1)
    packed = allennlp_bilm.embed_sentences(SENTENCES[:12] + [[]], max_batch_tokens=budget)
    for a, b in zip(plain, packed):
        assert a.shape == b.shape and (a.size == 0 or np.abs(a - b).max() < 1e-6)


def test_streaming_embeddings_match_and_check_arguments_eagerly(allennlp_bilm):
    with pytest.raises(ValueError, match="max_batch_tokens"):
        allennlp_bilm.iter_embeddings([["a"]], max_batch_tokens=2)
    listed = allennlp_bilm.embed_sentences(SENTENCES[:7], batch_size=3)
    streamed = dict(allennlp_bilm.iter_embeddings(SENTENCES[:7], batch_size=3))
    assert sorted(streamed) == list(range(7))
    assert all(np.array_equal(listed[i], streamed[i]) for i in range(7))
