"""Reproduce the authors' reference outputs (tests/data/elmo-fixture, see its NOTES.md and SOURCE.md)."""
import json

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm

from .conftest import ALLENNLP, BILMTF

ATOL = 2e-6  # measured max 9.5e-7 (docs/evaluations.md, "Parity with the original")
SETS = {"allennlp": (ALLENNLP, "sentences.json"), "bilm-tf": (BILMTF, "lm_embeddings_sentences.json")}


def fixture_batches(name):
    """The 10 batches in the order they were made: batch i = sentences[0..2][i]."""
    folder, sentence_file = SETS[name]
    sentences = json.loads((folder / sentence_file).read_text())
    expected = []
    for k in range(3):
        with h5py.File(folder / f"lm_embeddings_{k}.hdf5", "r") as f:
            expected.append([np.concatenate(f[str(i)][...], axis=-1) for i in range(10)])  # [n, 2P]
    return [([sentences[k][i].split() for k in range(3)], [expected[k][i] for k in range(3)]) for i in range(10)]


def max_diff(actual, expected):
    assert actual.shape == expected.shape
    return float(np.abs(actual - expected).max())


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_batch_stateful(name):
    model = load_bilm(SETS[name][0], stateful=True)
    worst = 0.0
    for sentences, expected in fixture_batches(name):
        outputs = model.embed_batch(sentences)
        for out, exp in zip(outputs, expected):
            worst = max(worst, max_diff(out[2], exp))
    assert worst < ATOL, worst


@pytest.mark.parametrize("name", sorted(SETS))
def test_first_batch_stateless(name):
    model = load_bilm(SETS[name][0])
    sentences, expected = fixture_batches(name)[0]
    for out, exp in zip(model.embed_sentences(sentences, batch_size=2), expected):
        assert max_diff(out[2], exp) < ATOL


def test_later_batches_really_need_the_carried_state():
    """Guards the fixture's meaning: without carried state batch 1 must not match."""
    model = load_bilm(ALLENNLP)
    sentences, expected = fixture_batches("allennlp")[1]
    out = model.embed_batch(sentences)
    assert max(max_diff(o[2], e) for o, e in zip(out, expected)) > 0.1


def test_stateful_reset_restarts_from_zero():
    model = load_bilm(ALLENNLP, stateful=True)
    batches = fixture_batches("allennlp")
    model.embed_batch(batches[0][0])
    model.reset_state()
    for out, exp in zip(model.embed_batch(batches[0][0]), batches[0][1]):
        assert max_diff(out[2], exp) < ATOL


def test_context_free_token_layer(allennlp_bilm):
    vocab = (ALLENNLP / "vocab_test.txt").read_text().strip().split("\n")
    with h5py.File(ALLENNLP / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(vocab) == expected.shape[0] == 458
    outputs = allennlp_bilm.embed_sentences([[tok] for tok in vocab], batch_size=50)
    layer0 = np.stack([o[0, 0] for o in outputs])
    assert max_diff(layer0[:, :16], expected) < ATOL and max_diff(layer0[:, 16:], expected) < ATOL  # layer 0 is [x; x]


def test_dense_char_id_entry_point_agrees(allennlp_bilm):
    sentences, expected = fixture_batches("allennlp")[0]
    with torch.inference_mode():
        layers, mask = allennlp_bilm.forward_char_ids(allennlp_bilm.char_ids(sentences))
    for row, exp in enumerate(expected):
        n = len(sentences[row])
        assert mask[row].sum() == n + 2
        assert max_diff(layers[2, row, 1 : n + 1].numpy(), exp) < ATOL
