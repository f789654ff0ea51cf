"""bfloat16 inference (bfloat16 products, float32 state and outputs): close to float32, weights
converted once and reconverted when they change, never used under autograd."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.kernels import bf16
from spacy_elmo.models import default_model_path

from .conftest import ALLENNLP

SENTENCES = [
    "The quick brown fox jumped over the lazy dog near the river bank .".split(),
    "She sat on the bank of the river and watched the boats go by all afternoon".split(),
    "Deposits at the bank rose sharply last quarter".split(),
    ["Hi"],
    [],
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per layer and token: ``[L+1, n]``."""
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30)


@pytest.fixture(scope="module")
def default_bilm():
    return load_bilm(default_model_path())


def test_trained_model_is_within_float32_rounding_of_float32(default_bilm):
    bilm = copy.deepcopy(default_bilm)
    ref = bilm.embed_sentences(SENTENCES)
    bilm.set_inference_precision("bfloat16")
    fast = bilm.embed_sentences(SENTENCES)
    assert bilm.inference_precision == "bfloat16"
    assert all(f.dtype == np.float32 and f.shape == r.shape for f, r in zip(fast, ref))
    a, b = np.concatenate(ref[:4], axis=1), np.concatenate(fast[:4], axis=1)
    assert not np.array_equal(a, b)  # the products did run in bfloat16
    # casting the whole model (state included) gave a 1st percentile of 0.93 on real text
    assert cosines(a, b).min() > 0.999
    assert np.abs(a - b).max() < 0.05 * np.abs(a).max()


def test_weights_are_converted_once_and_again_after_an_update(default_bilm):
    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("bfloat16")
    for _ in range(3):
        bilm.embed_sentences(SENTENCES[:2])
    assert bilm._bf16.lstm.conversions == 1 and bilm._bf16.encoder.conversions == 1
    before = bilm.embed_sentences(SENTENCES[:1])[0]
    with torch.no_grad():  # an optimizer-like in-place step (moves the version counter)
        bilm.lstm.layers[0].w_state.mul_(0.5)
        bilm.token_encoder.convs[0].weight.mul_(0.5)
    after = bilm.embed_sentences(SENTENCES[:1])[0]
    assert bilm._bf16.lstm.conversions == 2 and bilm._bf16.encoder.conversions == 2
    reference = copy.deepcopy(bilm)
    reference.set_inference_precision("float32")
    expected = reference.embed_sentences(SENTENCES[:1])[0]
    assert cosines(after, expected).min() > 0.999 and cosines(after, before).min() < 0.999
    # a load_state_dict replaces the weights too
    bilm.load_state_dict(default_bilm.state_dict())
    assert np.allclose(bilm.embed_sentences(SENTENCES[:1])[0], before)


def test_token_cache_switches_with_the_precision(default_bilm):
    bilm = copy.deepcopy(default_bilm)
    bilm.set_token_cache(100)
    ref = bilm.embed_sentences(SENTENCES[:2])
    bilm.set_inference_precision("bfloat16")
    fast = bilm.embed_sentences(SENTENCES[:2])
    # layer 0 is the token encoder's output: from the cache it would equal float32 exactly
    assert not np.array_equal(fast[0][0], ref[0][0])
    bilm.set_inference_precision("float32")
    assert np.array_equal(bilm.embed_sentences(SENTENCES[:2])[0], ref[0])


def test_autograd_and_cast_models_never_take_the_mixed_path(default_bilm):
    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("bfloat16")
    from spacy_elmo.bilm import TokenBatch

    batch = TokenBatch.from_sentences(SENTENCES[:3])
    expected = default_bilm(batch).detach()  # float32, grad mode too
    trained = bilm(batch)  # grad mode: training runs in float32 whatever the inference precision
    assert trained.requires_grad and torch.equal(trained.detach(), expected)
    bilm.to(torch.bfloat16)  # a model cast as a whole runs as it is
    assert bilm.embed_sentences(SENTENCES[:1])[0].dtype == np.float32


def test_stateful_and_fixture_models_run_in_bfloat16():
    bilm = load_bilm(ALLENNLP)
    ref = bilm.embed_sentences(SENTENCES)
    bilm.set_inference_precision("bfloat16")
    fast = bilm.embed_sentences(SENTENCES)
    for r, f in zip(ref[:4], fast[:4]):
        assert cosines(r, f).min() > 0.99
    stateful = load_bilm(ALLENNLP, stateful=True)
    stateful.set_inference_precision("bfloat16")
    stateful.embed_sentences(SENTENCES[:2])
    assert stateful._state is not None and stateful._state[0].dtype == torch.float32


def test_bad_precision_is_one_clear_error(default_bilm):
    with pytest.raises(ValueError, match="inference precision must be one of"):
        copy.deepcopy(default_bilm).set_inference_precision("float16")


def test_derived_layouts_are_the_products_they_stand_for():
    copies = {
        "highways.0.transform.weight": torch.randn(6, 6).bfloat16(),
        "highways.0.carry.weight": torch.randn(6, 6).bfloat16(),
        "projection.weight": torch.randn(4, 6).bfloat16(),
    }
    bf16.derive_layouts(copies)
    x = torch.randn(3, 6).bfloat16()
    both = x @ copies["highways.0.transform_carry"]
    assert torch.equal(both[:, :6], x @ copies["highways.0.transform.weight"].t())
    assert torch.equal(both[:, 6:], x @ copies["highways.0.carry.weight"].t())
    assert torch.equal(x @ copies["projection.weight_t"], x @ copies["projection.weight"].t())
