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


def _distinct_sentences(n_sentences, seed):
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz\u00e9\u4e2d")
    vocab = ["".join(rng.choice(letters, size=rng.integers(1, 9))) for _ in range(600)]
    return [[vocab[i] for i in rng.integers(0, len(vocab), size=rng.integers(1, 12))] for _ in range(n_sentences)]


def test_concurrent_calls_on_one_cached_model_match_a_single_thread():
    import sys
    import threading

    reference_model = load_bilm(ALLENNLP)  # no cache
    shared = load_bilm(ALLENNLP)
    shared.set_token_cache(50)  # far fewer slots than distinct words: constant eviction
    work = [_distinct_sentences(40, seed) for seed in range(4)]
    expected = [reference_model.embed_sentences(sentences, batch_size=3) for sentences in work]
    failures = []

    def run(k):
        try:
            for _ in range(3):
                got = shared.embed_sentences(work[k], batch_size=3)
                for a, b in zip(got, expected[k]):
                    if a.shape != b.shape or not np.abs(a - b).max(initial=0.0) < 1e-5:
                        failures.append(f"thread {k}: wrong vectors")
                        return
        except Exception as err:  # noqa: BLE001 - reported below
            failures.append(f"thread {k}: {type(err).__name__}: {err}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up quickly
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not failures, failures[:4]
    assert shared.token_cache.hits > 0 and len(shared.token_cache) <= 50


def _other_weights(model):
    """A state dict like ``model``'s with every token-encoder tensor changed."""
    return {k: (v * 0.9 + 0.01 if k.startswith("token_encoder.") else v.clone()) for k, v in model.state_dict().items()}


def test_cache_is_dropped_when_load_state_dict_assigns_new_tensors():
    model = load_bilm(ALLENNLP)
    model.set_token_cache(100)
    fresh = load_bilm(ALLENNLP)
    new_state = _other_weights(model)
    fresh.load_state_dict(new_state)
    model.embed_sentences(SENTENCES)  # fills the cache with the old weights' vectors
    model.load_state_dict({k: v.clone() for k, v in new_state.items()}, assign=True)
    assert len(model.token_cache) == 0  # emptied by the load itself, not only by the next key check
    for a, b in zip(model.embed_sentences(SENTENCES), fresh.embed_sentences(SENTENCES)):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_cache_is_dropped_when_parameter_data_is_replaced():
    model = load_bilm(ALLENNLP)
    model.set_token_cache(100)
    fresh = load_bilm(ALLENNLP)
    new_state = _other_weights(model)
    fresh.load_state_dict(new_state)
    model.embed_sentences(SENTENCES)
    for name, param in model.named_parameters():
        param.data = new_state[name].clone()
    for a, b in zip(model.embed_sentences(SENTENCES), fresh.embed_sentences(SENTENCES)):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_cached_model_pickles_and_deep_copies():
    import copy
    import pickle

    model = load_bilm(ALLENNLP)
    model.set_token_cache(10)
    model.embed_sentences(SENTENCES)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert clone.token_cache is not None and clone.token_cache.capacity == 10
        for a, b in zip(clone.embed_sentences(SENTENCES), model.embed_sentences(SENTENCES)):
            assert np.abs(a - b).max() < 1e-6


def test_concurrent_nlp_calls_on_one_pipeline_match_a_single_thread():
    import sys
    import threading

    import spacy
    from spacy.tokens import Doc

    def make(cache_size):
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "token_cache_size": cache_size})
        return nlp

    reference, shared = make(0), make(50)
    work = [_distinct_sentences(12, 10 + seed) for seed in range(4)]
    expected = [[reference(Doc(reference.vocab, words=words))._.elmo_layers for words in sentences] for sentences in work]
    failures = []

    def run(k):
        try:
            for _ in range(2):
                for words, want in zip(work[k], expected[k]):
                    got = shared(Doc(shared.vocab, words=words))._.elmo_layers
                    if got.shape != want.shape or not np.abs(got - want).max() < 1e-5:
                        failures.append(f"thread {k}: wrong vectors")
                        return
        except Exception as err:  # noqa: BLE001 - reported below
            failures.append(f"thread {k}: {type(err).__name__}: {err}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not failures, failures[:4]
