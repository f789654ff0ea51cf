"""The component's per-Doc work around the biLM (issue 27: overhead over the raw biLM): the same
numbers as before, on the component's threads, each Doc's layers written from the right context."""
import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Doc

from spacy_elmo.bilm.model import BiLM
from spacy_elmo.bilm.scalar_mix import FixedMix, ScalarMix, apply_mix, spec_weights
from spacy_elmo.layers.contexts import Context, SentenceContexts, is_run

from .conftest import ALLENNLP


class _ThreadsSeen(dict):
    """A Doc's user_data that records torch's thread count whenever an extension is written."""

    seen: list = []

    def __setitem__(self, key, value):
        _ThreadsSeen.seen.append(torch.get_num_threads())
        super().__setitem__(key, value)


def test_set_annotations_runs_on_the_component_threads():
    """The mix is a torch product per Doc: on torch's default thread count (all cores) these small
    products cost 3-4x more than on the component's one thread, so set_annotations must use the
    component's setting as predict does."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "threads": 1})
    component = nlp.get_pipe("elmo")
    docs = [Doc(nlp.vocab, words=["Two", "threads", "here", "."]), Doc(nlp.vocab, words=["And", "here"])]
    layers = component.predict(docs)
    for doc in docs:
        doc.user_data = _ThreadsSeen()
    previous = torch.get_num_threads()
    _ThreadsSeen.seen = []
    try:
        torch.set_num_threads(2)
        component.set_annotations(docs, layers)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    assert _ThreadsSeen.seen and set(_ThreadsSeen.seen) == {1}
    assert after == 2  # and the caller's setting comes back


@pytest.mark.parametrize("gamma", [1.0, 0.37])
@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("n_tokens", [0, 1, 17])
def test_fixed_mix_gives_the_scalar_mix_bit_for_bit(gamma, layer_norm, n_tokens):
    rng = np.random.default_rng(n_tokens)
    layers = rng.normal(size=(3, n_tokens, 16)).astype(np.float32)
    module = ScalarMix(3, [1, 2, 5], gamma=gamma, layer_norm=layer_norm, trainable=False)
    with torch.inference_mode():
        expected = module(torch.from_numpy(layers)).numpy()
    fixed = module.fixed()(layers)
    assert fixed.dtype == np.float32 and fixed.shape == (n_tokens, 16)
    assert np.array_equal(fixed, expected)
    weights = spec_weights("top", 3)
    assert np.array_equal(FixedMix(weights)(layers), apply_mix(layers, weights))


def test_fixed_mix_rejects_a_wrong_layer_count():
    with pytest.raises(ValueError, match="3 weights for 2 layers"):
        FixedMix([0.2, 0.3, 0.5])(np.zeros((2, 4, 8), dtype=np.float32))


def test_apply_mix_is_tensordot():
    rng = np.random.default_rng(1)
    layers = torch.from_numpy(rng.normal(size=(3, 5, 7, 4)).astype(np.float32))
    weights = torch.softmax(torch.tensor([0.1, -0.4, 2.0]), 0)
    assert torch.equal(apply_mix(layers, weights, 0.8), 0.8 * torch.tensordot(weights, layers, dims=1))
    assert apply_mix(torch.zeros(3, 0, 4), weights).shape == (0, 4)


def test_runs_and_whole_contexts():
    assert is_run([3, 4, 5], 3, 3) and is_run([], 0, 0)
    assert not is_run([3, 5, 4, 6], 3, 4) and not is_run([0, 1], 1, 2) and not is_run([0, 1, 2], 0, 2)
    assert Context([0, 1, 2], 0, 3).whole(3)
    assert not Context([0, 1, 2], 0, 2).whole(3)  # an output left out
    assert not Context([0, 2], 0, 2).whole(3) and not Context([1, 0], 0, 2).whole(2)


def _fake_forward(self, batch, boundaries=True):
    """Layers that name their token and position: layer k, row b, position t holds
    (k + 1) * 1000 + the token's id in the batch + t / 100, every feature alike."""
    ids = batch.token_index[:, 1:-1].float() if not boundaries else batch.token_index.float()
    steps = torch.arange(ids.shape[1]).float() / 100
    n_layers, dim = self.n_output_layers, self.output_dim
    out = torch.stack([(k + 1) * 1000 + ids + steps for k in range(n_layers)])
    lengths = (batch.lengths - 2).unsqueeze(1)
    out = out * (torch.arange(ids.shape[1]).unsqueeze(0) < lengths).float()  # padding: zeros
    self.seen_strings.append(batch.strings)
    return out.unsqueeze(-1).expand(n_layers, *ids.shape, dim).contiguous()


def test_every_token_is_written_from_its_own_context(monkeypatch):
    """With a fake biLM whose outputs name the token and its position in its context: one-sentence
    Docs, several sentences, whitespace tokens, long sentences cut into windows and empty Docs each
    get every token's layers from the context (and window) that keeps it, zeros for whitespace."""
    monkeypatch.setattr(BiLM, "forward", _fake_forward)
    nlp = spacy.blank("en")
    contexts = {"@misc": "spacy-elmo.sentence_contexts.v1", "max_length": 6, "overlap": 2}
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "max_batch_tokens": 40, "contexts": contexts, "token_cache_size": 0})
    component = nlp.get_pipe("elmo")
    bilm = component.bilm
    bilm.seen_strings = []
    words = [
        ["one", "sentence", "."],
        ["Two", "here", ".", "And", "two", "!"],
        ["spaced", "\n\n", "out", " ", "."],
        [f"w{i}" for i in range(15)],
        [],
        ["solo"],
    ]
    starts = [None, [True, False, False, True, False, False], None, None, None, None]
    docs = [Doc(nlp.vocab, words=w, sent_starts=s) for w, s in zip(words, starts)]
    layers = component.predict(docs)
    getter = SentenceContexts(6, 2)
    n_layers, dim = bilm.n_output_layers, bilm.output_dim
    # which batch strings table each value came from is not known here: compare token by token
    # through the position part (t / 100) and the layer part, and the token part through the strings
    for doc, out in zip(docs, layers):
        assert out.shape == (n_layers, len(doc), dim) and out.dtype == np.float32 and out.flags.c_contiguous
        expected_position = np.full(len(doc), -1.0)
        for context in getter(doc):
            for position in range(context.keep_start, context.keep_end):
                expected_position[context.indices[position]] = position
        for i, token in enumerate(doc):
            if token.is_space:
                assert not out[:, i].any()
                continue
            value = out[:, i, 0]
            assert np.all(out[:, i] == value[:, None])  # every feature alike
            assert np.allclose(value - value[0], np.arange(n_layers) * 1000)
            position = round((value[0] - 1000) % 1 * 100)
            assert position == expected_position[i], (doc.text, i)
            token_id = int(round(value[0] - 1000 - position / 100))
            assert any(strings[token_id] == token.text for strings in bilm.seen_strings if token_id < len(strings))
