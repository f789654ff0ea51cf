import numpy as np
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm.token_cache import TokenVectorCache

from .conftest import ALLENNLP

SENTENCES = [["the", "cat", "sat", "on", "the", "mat", "."], ["a", "dog", "ran", "."], ["", "<S>", "caf\u00e9"]]


def test_cache_gives_the_same_vectors_and_hits():
    plain = load_bilm(ALLENNLP)
    cached = load_bilm(ALLENNLP)
    cached.set_token_cache(8)  # smaller than the vocabulary: exercises eviction
    for _ in range(3):
        for a, b in zip(plain.embed_sentences(SENTENCES, batch_size=1), cached.embed_sentences(SENTENCES, batch_size=1)):
            assert np.abs(a - b).max() < 1e-6
    assert cached.token_cache.hits > 0 and len(cached.token_cache) <= 8


def test_cache_is_dropped_when_weights_change():
    model = load_bilm(ALLENNLP)
    model.set_token_cache(100)
    before = model.embed_sentences(SENTENCES[:1])[0]
    with torch.no_grad():
        model.token_encoder.projection.bias.add_(1.0)
    after = model.embed_sentences(SENTENCES[:1])[0]
    assert np.allclose(after[0] - before[0], 1.0, atol=1e-5)  # layer 0 moved by the new bias


def test_batch_larger_than_capacity_bypasses_the_cache():
    cache = TokenVectorCache(2)
    model = load_bilm(ALLENNLP)
    from spacy_elmo.bilm.characters import TokenBatch

    batch = TokenBatch.from_sentences([["a", "b", "c", "d"]])
    with torch.no_grad():
        out = cache.encode(model.token_encoder, batch.strings, batch.char_ids)
        ref = model.token_encoder(batch.char_ids)
    assert torch.allclose(out[1:], ref[1:], atol=1e-6) and len(cache) == 0
