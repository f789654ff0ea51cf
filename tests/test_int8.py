"""int8 inference (int8 LSTM products, float32 state and outputs): close to float32, the same
vectors for a token whatever its batch (bit for bit), weights quantized once and again when
they change, never used under autograd, one clear error where the CPU has no int8 path."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import BiLM
from spacy_elmo.kernels import cpu, int8
from spacy_elmo.models import default_model_path

from .conftest import ALLENNLP

pytestmark = pytest.mark.skipif(cpu.int8_path() is None, reason="this CPU has no int8 product path (needs AVX2)")

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


@pytest.fixture(scope="module")
def int8_fixture():
    bilm = load_bilm(ALLENNLP)
    bilm.set_inference_precision("int8")
    return bilm


@pytest.mark.parametrize("path", ["default", "fixture"])
def test_int8_is_close_to_float32(default_bilm, path):
    bilm = copy.deepcopy(default_bilm) if path == "default" else load_bilm(ALLENNLP)
    ref = bilm.embed_sentences(SENTENCES)
    bilm.set_inference_precision("int8")
    fast = bilm.embed_sentences(SENTENCES)
    assert bilm.inference_precision == "int8"
    assert all(f.dtype == np.float32 and f.shape == r.shape for f, r in zip(fast, ref))
    a, b = np.concatenate(ref[:4], axis=1), np.concatenate(fast[:4], axis=1)
    assert np.array_equal(a[0], b[0])  # the token encoder stays float32
    assert not np.array_equal(a[1:], b[1:])  # the LSTM products did run in int8
    cos = cosines(a, b)
    assert cos.min() > (0.998 if path == "default" else 0.99), cos.min(axis=1)


def test_a_tokens_vectors_do_not_depend_on_its_batch(int8_fixture):
    alone = [int8_fixture.embed_sentences([s])[0] for s in SENTENCES]
    together = int8_fixture.embed_sentences(SENTENCES)  # padded to the longest, sorted, other rows
    by_two = int8_fixture.embed_sentences(SENTENCES[::-1], batch_size=2)[::-1]
    for a, b, c in zip(alone, together, by_two):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_int8_is_deterministic(int8_fixture):
    first = int8_fixture.embed_sentences(SENTENCES)
    second = int8_fixture.embed_sentences(SENTENCES)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


@pytest.fixture()
def wide_encoder_int8(monkeypatch):
    """The fixture model in int8 with its token encoder counted as wide (its 124 filters stand
    for the published shapes' 2,048), and the same model in float32."""
    monkeypatch.setattr(int8, "ENCODER_MIN_FILTERS", 100)
    reference = load_bilm(ALLENNLP)
    bilm = load_bilm(ALLENNLP)
    bilm.set_inference_precision("int8")
    return bilm, reference


def test_a_wide_token_encoder_runs_its_products_in_int8(wide_encoder_int8):
    bilm, reference = wide_encoder_int8
    assert bilm._int8.encoder is not None
    ref, fast = reference.embed_sentences(SENTENCES), bilm.embed_sentences(SENTENCES)
    a, b = np.concatenate(ref[:4], axis=1), np.concatenate(fast[:4], axis=1)
    assert not np.array_equal(a[0], b[0])  # layer 0 now comes from int8 highway and projection products
    cos = cosines(a, b)
    assert cos[0].min() > 0.999 and cos.min() > 0.99, cos.min(axis=1)
    alone = [bilm.embed_sentences([s])[0] for s in SENTENCES]  # per-row scales: the batch does not matter
    by_two = bilm.embed_sentences(SENTENCES[::-1], batch_size=2)[::-1]
    assert all(np.array_equal(x, y) and np.array_equal(x, z) for x, y, z in zip(alone, fast, by_two))
    assert all(np.array_equal(x, y) for x, y in zip(fast, bilm.embed_sentences(SENTENCES)))  # deterministic
    bilm.set_token_cache(1000)  # the cache serves the int8 encoder's vectors, cold and warm
    assert all(np.array_equal(x, y) for x, y in zip(fast, bilm.embed_sentences(SENTENCES)))
    assert all(np.array_equal(x, y) for x, y in zip(fast, bilm.embed_sentences(SENTENCES)))


def test_the_encoders_int8_weights_are_per_channel_and_remade_when_their_source_changes(wide_encoder_int8):
    bilm, _ = wide_encoder_int8
    encoder = bilm.token_encoder
    weights = bilm._int8.encoder.weights(encoder)
    assert sorted(weights) == ["highways.0", "highways.1", "projection"]
    highway = encoder.highways[0]
    joined = torch.cat([highway.transform.weight, highway.carry.weight]).t()  # transform and carry as one [in, 2 out]
    alone = int8.QuantizedWeight(highway.carry.weight.detach().t().contiguous())
    assert torch.equal(weights["highways.0"].scales[highway.dim :], alone.scales)  # joining changes no channel's scale
    assert weights["highways.0"].in_features == joined.shape[0] and weights["highways.0"].out_features == joined.shape[1]
    before = bilm.embed_sentences(SENTENCES[:1])[0]
    assert bilm._int8.encoder.conversions == 1
    with torch.no_grad():
        encoder.projection.weight.mul_(0.5)
    after = bilm.embed_sentences(SENTENCES[:1])[0]
    assert bilm._int8.encoder.conversions == 2 and not np.array_equal(after[0], before[0])


def test_narrow_and_other_encoders_stay_float32(default_bilm):
    from spacy_elmo.bilm.efml import EfmlBiLM
    from spacy_elmo.bilm.transformer import TransformerBiLM

    assert default_bilm.token_encoder.n_filters < int8.ENCODER_MIN_FILTERS  # the default's 512 filters: measured 1.03x
    assert not int8.quantizes_encoder(default_bilm.token_encoder)
    assert not EfmlBiLM.int8_token_encoder and not TransformerBiLM.int8_token_encoder
    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("int8")
    assert bilm._int8.encoder is None


def test_weights_are_quantized_once_and_again_when_their_source_changes(default_bilm):
    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("int8")
    for _ in range(3):
        bilm.embed_sentences(SENTENCES[:2])
    assert bilm._int8.lstm.conversions == 1
    before = bilm.embed_sentences(SENTENCES[:1])[0]
    with torch.no_grad():  # an optimizer-like in-place step: the quantized copies are stale now
        bilm.lstm.layers[0].w_state.mul_(0.5)
    after = bilm.embed_sentences(SENTENCES[:1])[0]
    assert bilm._int8.lstm.conversions == 2 and cosines(after, before).min() < 0.999
    bilm.load_state_dict(default_bilm.state_dict())  # a load replaces the weights: quantized again
    assert np.array_equal(bilm.embed_sentences(SENTENCES[:1])[0], before)
    assert bilm._int8.lstm.conversions == 3


def test_save_and_load_give_the_same_int8_vectors(default_bilm, tmp_path):
    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("int8")
    expected = bilm.embed_sentences(SENTENCES[:3])
    torch.save(bilm.state_dict(), tmp_path / "weights.pt")
    fresh = BiLM(bilm.config)
    fresh.load_state_dict(torch.load(tmp_path / "weights.pt"))
    fresh.set_inference_precision("int8")
    assert all(np.array_equal(a, b) for a, b in zip(expected, fresh.embed_sentences(SENTENCES[:3])))
    clone = copy.deepcopy(bilm)  # a copy starts with no quantized weights and makes its own
    assert clone.inference_precision == "int8"
    assert all(np.array_equal(a, b) for a, b in zip(expected, clone.embed_sentences(SENTENCES[:3])))


def test_autograd_never_takes_the_int8_path(default_bilm):
    from spacy_elmo.bilm import TokenBatch

    bilm = copy.deepcopy(default_bilm)
    bilm.set_inference_precision("int8")
    batch = TokenBatch.from_sentences(SENTENCES[:3])
    expected = default_bilm(batch).detach()
    trained = bilm(batch)
    assert trained.requires_grad and torch.equal(trained.detach(), expected)


def test_released_float_weights_give_the_same_vectors_and_every_other_use_one_clear_error(default_bilm, tmp_path):
    import pickle

    from spacy_elmo.bilm import FloatWeightsReleased, save_native

    bilm = copy.deepcopy(default_bilm)
    with pytest.raises(ValueError, match="set_inference_precision"):
        bilm.release_float_products()  # float32 still: nothing to release into
    bilm.set_inference_precision("int8")
    expected = bilm.embed_sentences(SENTENCES)
    products = sum(p.numel() * 4 for n, p in bilm.lstm.named_parameters() if n.rsplit(".", 1)[-1] in int8.INT8_PRODUCTS)
    assert bilm.release_float_products() == products > 0
    assert bilm.float_products_released and bilm.release_float_products() == 0
    assert all(p.numel() == 0 for n, p in bilm.lstm.named_parameters() if n.rsplit(".", 1)[-1] in int8.INT8_PRODUCTS)
    assert all(np.array_equal(a, b) for a, b in zip(expected, bilm.embed_sentences(SENTENCES)))
    bilm.clear_token_cache()  # the int8 copies are the only weights left: kept
    assert all(np.array_equal(a, b) for a, b in zip(expected, bilm.embed_sentences(SENTENCES)))
    from spacy_elmo.bilm import TokenBatch

    folder = tmp_path / "model"
    save_native(default_bilm, folder)
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    for attempt in (
        bilm.state_dict,
        lambda: save_native(bilm, folder),  # refused before the folder is touched
        lambda: bilm.set_inference_precision("float32"),
        bilm.train,
        lambda: copy.deepcopy(bilm),
        lambda: pickle.dumps(bilm),
        lambda: bilm(TokenBatch.from_sentences(SENTENCES[:2])),  # autograd on
    ):
        with pytest.raises(FloatWeightsReleased, match="int8"):
            attempt()
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before
    assert default_bilm.inference_precision == "float32" and default_bilm.lstm.layers[0].w_input.numel() > 0


def test_product_is_the_exact_integer_product_scaled():
    torch.manual_seed(0)
    w, x = torch.randn(96, 40), torch.randn(7, 96) * torch.logspace(-3, 2, 7)[:, None]
    q = int8.QuantizedWeight(w, keep_values=True)
    assert q.values is not None and q.values.dtype == torch.int8 and q.values.abs().max() == 127
    assert (q.dequantized() - w).abs().max() <= q.scales.max() / 2 + 1e-6  # round to nearest
    levels = int8.activation_levels()
    xq, scale = int8.quantize_rows(x, levels)
    exact = (xq.long() - levels - 1) @ q.values.long().t()  # int32-exact sums, no saturation
    expected = exact.float() * q.scales * scale
    got = int8.linear(x, q, levels)
    assert torch.allclose(got, expected, rtol=1e-6, atol=0)
    cos = torch.nn.functional.cosine_similarity(got, x @ w, dim=1)
    assert cos.min() > 0.99
    assert int8.linear(x[:0], q).shape == (0, 40)
    assert torch.equal(int8.linear(torch.zeros(2, 96), q), torch.zeros(2, 40))


def test_the_compiled_row_quantizer_gives_the_eager_ones_values():
    from spacy_elmo.kernels import native

    compiled = native.library()
    if compiled is None:
        pytest.skip("no C compiler: the eager quantizer is the only one")
    torch.manual_seed(0)
    x = torch.randn(40, 700) * torch.logspace(-5, 4, 40)[:, None]
    x[3] = 0  # an all-zero row: scale 1, every value at the zero point
    x[7, ::2] = 0.5 * x[7].abs().max() / 127 * torch.arange(1, 351)  # values at rounding ties
    for levels in (63, 127):
        q, scale = compiled.quantize_rows(x, levels)
        q_eager, scale_eager = int8.quantize_rows(x, levels)
        assert q.dtype == torch.uint8 and scale.shape == (40, 1)
        assert torch.allclose(scale, scale_eager, rtol=2.5e-7, atol=0) and scale[3].item() == 1.0
        assert (q.int() - q_eager.int()).abs().max() <= 1 and (q != q_eager).float().mean() < 1e-3
        assert q.max() <= 2 * levels + 1 and q.min() >= 1 and torch.all(q[3] == levels + 1)
        strided = torch.zeros(40, 900)[:, 100:800].copy_(x)  # rows apart by more than their width
        assert all(torch.equal(a, b) for a, b in zip(compiled.quantize_rows(strided, levels), (q, scale)))
    bad = torch.randn(3, 16)
    bad[1, 4], bad[2, 9] = float("nan"), float("inf")
    q, scale = compiled.quantize_rows(bad, 127)
    assert not torch.isnan(scale[0]).any() and torch.isnan(scale[1:]).all()  # its products come out NaN, not garbage
    assert torch.isnan(int8.linear(bad, int8.QuantizedWeight(torch.randn(16, 5)), 127)[1:]).all()
    with pytest.raises(ValueError, match="contiguous rows"):
        compiled.quantize_rows(torch.randn(16, 3).t(), 127)
    with pytest.raises(ValueError, match="levels"):
        compiled.quantize_rows(bad, 200)


def test_bad_input_is_one_clear_error(default_bilm, monkeypatch):
    q = int8.QuantizedWeight(torch.randn(8, 4))
    with pytest.raises(ValueError, match=r"expected x \[n, 8\]"):
        int8.linear(torch.randn(3, 5), q)
    with pytest.raises(ValueError, match="float32 CPU"):
        int8.QuantizedWeight(torch.randn(2, 3, 4))
    assert q.values is None  # only the packed copy is kept by default
    with pytest.raises(ValueError, match="keep_values=True"):
        q.dequantized()
    monkeypatch.setattr(cpu, "features", lambda: frozenset({"sse2", "neon"}))
    bilm = copy.deepcopy(default_bilm)
    with pytest.raises(int8.Int8Unavailable, match="needs an x86 CPU with AVX2"):
        bilm.set_inference_precision("int8")
    assert bilm.inference_precision == "float32"  # refused before anything changed


def test_int8_path_follows_the_cpu_flags():
    assert cpu.int8_path(frozenset({"avx2", "fma"})) == "avx2"
    assert cpu.int8_path(frozenset({"avx2", "avx512_vnni"})) == "vnni"
    assert cpu.int8_path(frozenset({"avx2", "avx_vnni"})) == "vnni"
    assert cpu.int8_path(frozenset({"sse4_2"})) is None


@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_the_eager_step_gives_the_compiled_steps_outputs(precision, monkeypatch):
    """Both precisions share the eager step (``bf16.eager_step``) where there is no C compiler."""
    from spacy_elmo.kernels import native

    if native.library() is None:
        pytest.skip("needs the compiled kernels (a C compiler)")
    bilm = load_bilm(ALLENNLP)
    bilm.set_inference_precision(precision)
    compiled = bilm.embed_sentences(SENTENCES[:3])
    monkeypatch.setattr(native, "library", lambda: None)
    eager = bilm.embed_sentences(SENTENCES[:3])
    for a, b in zip(compiled, eager):
        assert cosines(a, b).min() > (0.999 if precision == "int8" else 0.99), cosines(a, b).min(axis=1)


def test_the_sense_probe_reads_the_same_on_int8(default_bilm):
    """Task-level: the hand-written sense probe (288 leave-one-out items) through the component at
    int8 and at float32 scores within two items of each other on the embedded default."""
    from spacy_elmo.evaluation import sense_probe

    reports = {p: sense_probe.evaluate(sense_probe.probe_pipeline(None, "top", precision=p, threads=1)) for p in ("float32", "int8")}
    ref, fast = reports["float32"]["correct"], reports["int8"]["correct"]
    assert len(ref) == len(fast) == 288
    assert sum(a != b for a, b in zip(ref, fast)) <= 2


def test_the_wsd_cache_keeps_int8_vectors_apart(default_bilm, tmp_path):
    """The WSD embedding cache names int8 vectors apart from float32's: never one for the other."""
    from spacy_elmo.evaluation.wsd import cached_instances
    from spacy_elmo.evaluation.wsd_data import WsdSentence

    words = ["the", "bank", "of", "the", "river"]
    sentences = [WsdSentence("s1", words, words, ["DET", "NOUN", "ADP", "DET", "NOUN"], [(1, "d000.s000.t000")])]
    bilm, lines = copy.deepcopy(default_bilm), []
    full = cached_instances(bilm, "semcor", sentences, tmp_path, lines.append)
    bilm.set_inference_precision("int8")
    quantized = cached_instances(bilm, "semcor", sentences, tmp_path, lines.append)
    assert "cached the embeddings" in lines[-1] and len(list(tmp_path.glob("*.npz"))) == 2
    assert not np.array_equal(full[:, 1:], quantized[:, 1:]) and np.array_equal(full[:, 0], quantized[:, 0])
    again = cached_instances(bilm, "semcor", sentences, tmp_path, lines.append)
    assert "from the cache" in lines[-1] and np.array_equal(again, quantized)
