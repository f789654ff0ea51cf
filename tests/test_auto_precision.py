"""``precision = "auto"`` at inference: the fastest precision this CPU runs natively, as measured for
the model's kind of shape, that keeps the vectors within the stated distance of float32's."""

from __future__ import annotations

import numpy as np
import pytest
import spacy

from spacy_elmo import load_bilm
from spacy_elmo.bilm import auto_precision
from spacy_elmo.bilm.auto_precision import MIN_GAIN, candidates, choose_inference_precision, cosine_p1
from spacy_elmo.kernels.cpu import int8_path

from .conftest import ALLENNLP

VNNI = frozenset({"avx2", "avx512_vnni"})
AVX2 = frozenset({"avx2"})


def test_candidates_follow_the_measured_speed_ups_for_the_cpu_and_the_shape():
    assert [p for p, _ in candidates(4096, VNNI, native_bf16=True)] == ["int8", "bfloat16"]  # wide: int8 3.16x, bf16 1.78x
    assert [p for p, _ in candidates(512, VNNI, native_bf16=True)] == ["int8", "bfloat16"]  # narrow: int8 1.57x, bf16 1.25x
    # AMX's bf16 tiles: bfloat16 measured 2.34x for the narrow default there, ahead of int8
    assert [p for p, _ in candidates(512, VNNI | {"amx_bf16", "amx_int8"}, native_bf16=True)] == ["bfloat16", "int8"]
    assert [p for p, _ in candidates(4096, AVX2, native_bf16=False)] == ["int8"]
    assert candidates(512, AVX2, native_bf16=False) == []  # int8 measured 0.96x there: slower than float32
    assert candidates(None, VNNI, native_bf16=False) == []  # a transformer: int8's speed there was not measured
    assert candidates(4096, None, native_bf16=False) == []  # unknown flags: nothing assumed
    assert all(speed >= MIN_GAIN for _, speed in candidates(4096, VNNI, native_bf16=True))


def test_at_two_threads_the_two_thread_measurements_decide():
    assert candidates(4096, AVX2, native_bf16=False, threads=2) == []  # AVX2 int8 measured 1.14x at two threads
    assert candidates(4096, VNNI, native_bf16=True, threads=2) == [("int8", 2.94), ("bfloat16", 1.69)]
    assert candidates(512, VNNI, native_bf16=True, threads=4) == candidates(512, VNNI, native_bf16=True)  # not measured: one thread's


def test_the_first_candidate_within_the_bar_is_chosen_else_float32(monkeypatch):
    bilm = load_bilm(ALLENNLP)
    monkeypatch.setattr(auto_precision, "candidates", lambda *a, **k: [("bfloat16", 1.8)])
    choice = choose_inference_precision(bilm, min_cosine=0.9)
    assert choice.precision == "bfloat16" and choice.tried[0]["precision"] == "bfloat16"
    assert 0.9 <= choice.tried[0]["cosine_p1"] < 1.0 and bilm.inference_precision == "float32"  # left as it was found
    strict = choose_inference_precision(bilm, min_cosine=1.0)  # bfloat16 rounding never meets cosine 1 on every token
    assert strict.precision == "float32" and "no faster precision" in strict.reason and len(strict.tried) == 1
    assert choose_inference_precision(bilm, min_cosine=0.9).tried == choice.tried  # deterministic: nothing timed
    with pytest.raises(ValueError, match="min_cosine"):
        choose_inference_precision(bilm, min_cosine=1.5)


def test_auto_resolves_on_the_model_and_in_the_component(monkeypatch):
    monkeypatch.setattr(auto_precision, "candidates", lambda *a, **k: [("bfloat16", 1.8)])
    bilm = load_bilm(ALLENNLP)
    bilm.set_inference_precision("auto")
    assert bilm.inference_precision == "bfloat16" and "precision auto -> bfloat16" in bilm.precision_choice.describe()
    bilm.set_inference_precision("float32")
    assert bilm.precision_choice is None
    with pytest.raises(ValueError, match="'auto'"):
        bilm.set_inference_precision("fp16")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "precision": "auto"})
    reference = spacy.blank("en")
    reference.add_pipe("elmo", config={"weights": str(ALLENNLP), "precision": "bfloat16"})
    text = "The bank raised its rates ."
    np.testing.assert_array_equal(nlp(text).tensor, reference(text).tensor)


@pytest.mark.skipif(int8_path() is None, reason="no int8 path on this CPU")
def test_int8_is_checked_like_any_candidate(monkeypatch):
    monkeypatch.setattr(auto_precision, "candidates", lambda *a, **k: [("int8", 2.5), ("bfloat16", 1.8)])
    choice = choose_inference_precision(load_bilm(ALLENNLP), min_cosine=0.5)
    assert choice.precision == "int8" and [t["precision"] for t in choice.tried] == ["int8"]


def test_cosine_p1_reads_the_worst_tokens():
    a = np.ones((100, 4))
    b = a.copy()
    b[:2] = -1.0  # two opposite tokens of 100: the 1st percentile sees them
    assert cosine_p1(a, a) == pytest.approx(1.0) and cosine_p1(a, b) < 0.0
