"""Property tests (hypothesis): character ids, batch independence, ScalarMix weights and the
native format, each over generated inputs (small example counts, so each runs in seconds)."""
import tempfile

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo import ScalarMix, load_bilm, save_native
from spacy_elmo.bilm import characters
from spacy_elmo.bilm.characters import BOS_TOKEN, EOS_TOKEN, MAX_CHARS, TokenBatch, token_char_ids

# database=None: no example database written into the working tree
FIXTURE_SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# every code point, lone surrogates included
any_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
any_text = st.text(alphabet=any_char, max_size=80)
words = st.text(alphabet=st.sampled_from(list("abcde\u00e9\u4e2d.!") + ["\U0001F600"]), min_size=1, max_size=6)
sentences = st.lists(words, min_size=0, max_size=9)


@settings(max_examples=300, deadline=None, database=None)
@given(any_text)
def test_char_ids_are_deterministic_and_in_range(token):
    ids = token_char_ids(token)
    assert ids.shape == (MAX_CHARS,) and ids.dtype == np.int64
    assert ids.min() >= 1 and ids.max() <= 261  # 0 is reserved for padding positions
    assert np.array_equal(ids, characters._char_ids(token))  # the cache returns what it computes
    assert np.array_equal(ids, token_char_ids(token))
    if token not in (BOS_TOKEN, EOS_TOKEN):
        data = token.encode("utf-8", "ignore")[: MAX_CHARS - 2]
        assert ids[0] == 259 and ids[len(data) + 1] == 260
        assert np.array_equal(ids[1 : len(data) + 1], np.frombuffer(data, np.uint8).astype(np.int64) + 1)
        assert (ids[len(data) + 2 :] == 261).all()


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(any_text, max_size=6))
def test_token_batch_rows_point_at_their_tokens_ids(sentence):
    batch = TokenBatch.from_sentences([sentence])
    row = batch.token_index[0].tolist()
    assert len(row) == len(sentence) + 2 and batch.lengths.tolist() == [len(sentence) + 2]
    for position, token in zip(row[1:-1], sentence):
        assert np.array_equal(batch.char_ids[position].numpy(), token_char_ids(token))


@settings(max_examples=15, **FIXTURE_SETTINGS)
@given(st.lists(sentences, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_a_sentences_vectors_do_not_depend_on_its_batch(allennlp_bilm, batch, rng):
    alone = [allennlp_bilm.embed_sentences([s])[0] for s in batch]
    shuffled = list(range(len(batch)))
    rng.shuffle(shuffled)
    together = allennlp_bilm.embed_sentences([batch[i] for i in shuffled], batch_size=len(batch))
    budget = allennlp_bilm.embed_sentences(batch, batch_size=2, max_batch_tokens=max(3, 2 * max(len(s) for s in batch) + 4))
    for k, i in enumerate(shuffled):
        assert together[k].shape == alone[i].shape == (3, len(batch[i]), 32)
        assert np.abs(together[k] - alone[i]).max(initial=0.0) < 1e-5
    for a, b in zip(budget, alone):
        assert np.abs(a - b).max(initial=0.0) < 1e-5


mix_specs = st.one_of(
    st.just("average"),
    st.just("top"),
    st.integers(0, 5).map(lambda i: f"layer:{i}"),
    st.lists(st.floats(min_value=0.0, max_value=1e308, allow_nan=False, allow_infinity=False), min_size=6, max_size=6).filter(
        lambda w: sum(w) > 0
    ),
)


@settings(max_examples=200, deadline=None, database=None)
@given(mix_specs, st.booleans(), st.floats(min_value=-10, max_value=10, allow_nan=False))
def test_scalar_mix_weights_sum_to_one(spec, trainable, gamma):
    mix = ScalarMix(6, spec, gamma=gamma, trainable=trainable)
    weights = mix.weights.detach()
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    assert abs(float(weights.sum()) - 1.0) < 1e-6
    layers = torch.ones(6, 2, 3)
    assert torch.allclose(mix(layers).detach(), torch.full((2, 3), float(mix.gamma.detach())), atol=1e-5 * max(1.0, abs(gamma)))
    if isinstance(spec, list):
        total = sum(spec)
        if total > 0 and np.isfinite(total) and not trainable:
            assert np.allclose(weights.numpy(), np.array(spec) / total, atol=1e-6)


@settings(max_examples=8, **FIXTURE_SETTINGS)
@given(st.integers(0, 2**31 - 1), st.lists(sentences, min_size=1, max_size=4))
def test_native_save_load_preserves_outputs(allennlp_bilm, seed, batch):
    model = load_bilm(_fixture_dir())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # different weights every example, without touching the global RNG
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    with tempfile.TemporaryDirectory() as folder:
        save_native(model, folder)
        loaded = load_bilm(folder)
        for a, b in zip(model.embed_sentences(batch), loaded.embed_sentences(batch)):
            assert np.array_equal(a, b)
        assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), loaded.state_dict().values()))


def _fixture_dir():
    from .conftest import ALLENNLP

    return ALLENNLP
