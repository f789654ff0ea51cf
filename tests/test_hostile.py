"""Hostile text through the ``elmo`` component (tiny fixture biLM): nothing crashes, every
vector is finite, shapes are right, whitespace tokens get zeros, and every other token's layers
are the raw biLM's for its sentence read on its own (the same in a batch as alone)."""
import re

import numpy as np
import pytest
from spacy.tokens import Doc

from spacy_elmo.bilm.characters import MAX_CHARS, token_char_ids

DIM = 32  # the fixture biLM: 2 x projection_dim 16
LAYERS = 3
MAX_LENGTH = 200  # the component's default context length

TEXTS = {
    "empty": "",
    "spaces": "   ",
    "whitespace mix": " \t\n\n \u00a0\u2003\r\n",
    "one char": "a",
    "control chars": "a\x00b \x01\x02\x1b[31m red \x7f\x85 \u200b\u200e\u2028 end\x00",
    "combining marks": "e\u0301\u0301\u0301 Z\u0351\u0352\u0353\u0354\u0355\u0356\u0357\u0358 \u0301alone",
    "emoji zwj": "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \U0001F3F3\uFE0F\u200D\U0001F308 \U0001F44D\U0001F3FD!",
    "rtl and mixed": "\u05e9\u05dc\u05d5\u05dd world \u0645\u0631\u062d\u0628\u0627 \u4e16\u754c \u202ehidden\u202c \u0928\u092e\u0938\u094d\u0924\u0947 123",
    "boundary lookalikes": "<S> </S> <S></S> </S><S> <UNK> <s>",
    "long token": "x" * 100_000,
    "long mixed token": ("\u00e9\U0001F600a" * 20_000) + " ok",
}


def sentences(doc):
    """Non-whitespace token indices per sentence: the Doc's own, else a split after sentence-final
    punctuation and at blank lines (the component's documented built-in split)."""
    if doc.has_annotation("SENT_START"):
        return [s for s in ([t.i for t in sent if not t.is_space] for sent in doc.sents) if s]
    out, current = [], []
    for token in doc:
        if token.is_space:
            if "\n\n" in token.text and current:
                out.append(current)
                current = []
            continue
        current.append(token.i)
        if re.fullmatch(r"[.!?\u3002\uff01\uff1f\u2026\u061f\u0964]+|\.\.\.", token.text):
            out.append(current)
            current = []
    return [s for s in out + [current] if s]


def check(doc, bilm=None):
    """Shapes, finiteness, zeros for whitespace, and (given the raw biLM) each sentence's layers
    equal to the biLM's for that sentence alone."""
    layers = doc._.elmo_layers
    assert layers.shape == (LAYERS, len(doc), DIM)
    assert np.isfinite(layers).all()
    for token in doc:
        if token.is_space:
            assert not layers[:, token.i].any(), repr(token.text)
    if bilm is not None:
        for indices in sentences(doc):
            if len(indices) > MAX_LENGTH:  # read in overlapping windows, not as one sentence
                continue
            (alone,) = bilm.embed_sentences([[doc[i].text for i in indices]])
            np.testing.assert_allclose(layers[:, indices], alone, atol=1e-5, rtol=0, err_msg=repr(doc[indices[0]].text))
    return layers


@pytest.mark.parametrize("name", list(TEXTS))
def test_hostile_texts(nlp, allennlp_bilm, name):
    check(nlp(TEXTS[name]), allennlp_bilm)


def test_hostile_texts_in_one_pipe_batch(nlp):
    docs = list(nlp.pipe(TEXTS.values(), batch_size=4))
    assert [len(d) for d in docs] == [len(nlp.make_doc(t)) for t in TEXTS.values()]
    for doc, text in zip(docs, TEXTS.values()):
        alone = nlp(text)._.elmo_layers  # batching packs other Docs' sentences beside it: no effect allowed
        np.testing.assert_allclose(check(doc), alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["\x00", "\x00\x00", "\u0000x"],
        ["<S>", "</S>", "<S>", "</S>"],
        ["y" * 100_000, "z"],
        ["\u0301", "\u200d", "\ufe0f", "\U0001F3FD"],  # marks and joiners on their own
    ],
)
def test_hostile_words_docs(nlp, allennlp_bilm, words):
    layers = check(nlp(Doc(nlp.vocab, words=words)), allennlp_bilm)
    assert layers.shape[1] == len(words)


@pytest.mark.parametrize(
    "words",
    [
        ["\ud800"],  # a lone high surrogate
        ["a", "\udfff", "b", "\ud83d"],  # lone low/high surrogates between ordinary tokens
        ["", "", "x"],  # empty-string tokens
    ],
)
def test_words_spacy_may_refuse(nlp, allennlp_bilm, words):
    """spaCy's StringStore cannot hold lone surrogates and Doc refuses empty words; the biLM
    itself takes them (a lone surrogate has no UTF-8 bytes: it reads as an empty token)."""
    (layers,) = allennlp_bilm.embed_sentences([words])
    assert layers.shape == (LAYERS, len(words), DIM) and np.isfinite(layers).all()
    try:
        doc = Doc(nlp.vocab, words=words)
    except (UnicodeEncodeError, ValueError):  # refused by spaCy before our component sees it
        return
    check(nlp(doc), allennlp_bilm)


def test_words_without_spaces(nlp):
    words = ["New", "York", "is", "big", ".", "Yes", "!"]
    doc = nlp(Doc(nlp.vocab, words=words, spaces=[False] * len(words)))
    assert doc.text == "NewYorkisbig.Yes!"
    layers = check(doc)
    spaced = check(nlp(Doc(nlp.vocab, words=words)))
    assert np.abs(layers - spaced).max() < 1e-5  # spaces are not part of any token


def test_literal_boundary_tokens_are_the_boundary_ids():
    assert np.array_equal(token_char_ids("<S>")[:3], [259, 257, 260])
    assert np.array_equal(token_char_ids("</S>")[:3], [259, 258, 260])
    assert token_char_ids("<s>")[1] == ord("<") + 1  # only the exact strings are special


def test_lone_surrogates_and_long_tokens_get_valid_char_ids():
    for token in ["\ud800", "a\udfffb", "x" * 100_000, "\U0001F468\u200D\U0001F469" * 50]:
        ids = token_char_ids(token)
        assert ids.shape == (MAX_CHARS,) and ids.min() >= 1 and ids.max() <= 261


def test_twenty_thousand_tokens_without_sentence_boundaries(nlp):
    words = [f"w{i % 97}" for i in range(20_000)]  # no sentence-final punctuation: one long segment
    doc = nlp(Doc(nlp.vocab, words=words))
    check(doc)


def test_twenty_thousand_tokens_with_sentence_boundaries(nlp, allennlp_bilm):
    words, starts = [], []
    for i in range(20_000):
        words.append("." if i % 25 == 24 else f"w{i % 89}")
        starts.append(i % 25 == 0)
    doc = Doc(nlp.vocab, words=words, sent_starts=starts)
    layers = check(nlp(doc))
    assert len(list(doc.sents)) == 800
    (first,) = allennlp_bilm.embed_sentences([words[:25]])
    (last,) = allennlp_bilm.embed_sentences([words[-25:]])
    np.testing.assert_allclose(layers[:, :25], first, atol=1e-5, rtol=0)
    np.testing.assert_allclose(layers[:, -25:], last, atol=1e-5, rtol=0)


def test_whitespace_only_doc_is_all_zeros(nlp):
    doc = nlp("  \n\n\t  ")
    layers = check(doc)
    assert not layers.any()
    assert doc.tensor.shape[0] == len(doc) and np.isfinite(doc.tensor).all()


def test_vectors_and_similarity_of_empty_and_whitespace_docs_are_finite(nlp):
    docs = [nlp(t) for t in ["", "   ", "\n\n", "a b"]]
    for doc in docs:
        assert doc.vector.shape == (DIM,) and np.isfinite(doc.vector).all() and np.isfinite(doc.vector_norm)
        for other in docs:
            assert np.isfinite(doc.similarity(other))
        for token in doc:
            assert np.isfinite(token.vector).all() and np.isfinite(token.similarity(docs[-1][0]))
