"""The ``context`` representation of sense induction: occurrences told apart by the words around them."""

import numpy as np
import pytest

from spacy_elmo.induction.clustering import adjusted_rand
from spacy_elmo.induction.context import ContextEmbedder, context_tokens
from spacy_elmo.induction.induce import InductionSettings, induce
from spacy_elmo.induction.induced import Occurrence
from spacy_elmo.induction.substitutes import LMHead

RIVER = ["river", "water", "shore", "fishing", "boat", "muddy", "willows", "stream"]
MONEY = ["money", "loan", "account", "deposit", "cash", "savings", "interest", "credit"]
RIVER_SENTENCES = [f"We sat on the {a} bank and watched the {b} for hours ." for a in RIVER for b in RIVER[:3] if a != b][:16]
MONEY_SENTENCES = [f"She went to the bank to ask about her {a} and the {b} today ." for a in MONEY for b in MONEY[:3] if a != b][:16]


def topic_head(dim: int) -> LMHead:
    """A head whose output embeddings put the river words on one axis and the money words on another."""
    rng = np.random.default_rng(0)
    vocab = ["<S>", "</S>", "<UNK>", "the", "bank", "banks", "We", "sat", "watched", "hours", "She", "went", "ask", "today"]
    vocab += RIVER + MONEY
    weight = rng.normal(scale=0.05, size=(len(vocab), dim)).astype(np.float32)
    for word in RIVER:
        weight[vocab.index(word), 0] += 1.0
    for word in MONEY:
        weight[vocab.index(word), 1] += 1.0
    return LMHead.from_arrays(vocab, weight, np.zeros(len(vocab), np.float32), "a test head")


def test_context_tokens_keep_content_words_within_the_window():
    text = "The old man rowed his boat to the bank of the river at dawn"
    start = text.index("bank")
    assert context_tokens(text, start, start + 4) == ["old", "man", "rowed", "boat", "river", "dawn"]
    assert context_tokens(text, start, start + 4, window=2) == []  # "to the" / "of the": stop words only
    assert context_tokens(text, start, start + 4, window=5, exclude={"boat"}) == ["rowed", "river", "dawn"]
    with pytest.raises(ValueError, match="context window"):
        context_tokens(text, start, start + 4, window=0)


def test_head_vectors_look_words_up_exactly_then_by_case(bilm):
    head = topic_head(bilm.config.projection_dim)
    embedder = ContextEmbedder.from_head(head)
    rows = embedder.word_vectors(["river", "River", "RIVER", "unheard"])
    assert np.allclose(np.linalg.norm(rows[:2], axis=1), 1.0, atol=1e-5)
    assert np.allclose(rows[0], rows[1])  # capitalised at the start of a sentence: the same word
    assert not rows[3].any()  # a word the head does not know adds nothing
    occurrence = Occurrence("the bank of the muddy river", 4, 8)
    vector = embedder.embed([occurrence])[0]
    assert np.allclose(vector, embedder.word_vectors(["muddy", "river"]).mean(0), atol=1e-6)


def test_context_words_are_weighted_by_smooth_inverse_frequency(bilm):
    """With the training counts, each context word weighs a / (a + p(w)): a frequent word less than a rare one."""
    plain = topic_head(bilm.config.projection_dim)
    counts = np.ones(len(plain.vocab), np.int64)
    counts[plain.vocab.index("river")] = 9_000  # 9,000 of 9,000 + V - 1 tokens: p(river) ~ 1, p(muddy) ~ 1e-4
    head = LMHead.from_arrays(plain.vocab, plain.weight, plain.bias, "counted", counts=counts)
    p = counts / counts.sum()
    occurrence = Occurrence("the bank of the muddy river", 4, 8)
    for a in (1e-3, 0.5):
        embedder = ContextEmbedder.from_head(head, smoothing=a)
        w = a / (a + p[[plain.vocab.index("muddy"), plain.vocab.index("river")]])
        expected = (w[:, None] * embedder.word_vectors(["muddy", "river"])).sum(0) / w.sum()
        assert np.allclose(embedder.embed([occurrence])[0], expected, atol=1e-6)
        assert np.allclose(embedder.word_weights(["River", "unheard"]), [w[1], 1.0])  # by the row the vector came from
    rare_first = ContextEmbedder.from_head(head, smoothing=1e-3).embed([occurrence])[0]
    muddy, river = ContextEmbedder.from_head(head).word_vectors(["muddy", "river"])
    assert rare_first @ muddy > 0.99 * np.linalg.norm(rare_first) and rare_first @ river < rare_first @ muddy
    uniform = ContextEmbedder.from_head(head).embed([occurrence])[0]
    assert np.allclose(uniform, (muddy + river) / 2, atol=1e-6)  # smoothing 0, the default: every word alike
    assert InductionSettings().context_smoothing == 0
    assert np.allclose(ContextEmbedder.from_head(plain).embed([occurrence])[0], uniform, atol=1e-6)  # no counts: alike
    with pytest.raises(ValueError, match="smoothing"):
        ContextEmbedder.from_head(head, smoothing=-1)
    with pytest.raises(ValueError, match="context_smoothing"):
        InductionSettings(context_smoothing=-0.1)


def test_a_head_reads_its_counts_from_the_vocabulary_file(tmp_path):
    import torch

    from spacy_elmo.induction.substitutes import HeadError, native_head

    (tmp_path / "vocab.txt").write_text("<S>\t5\n</S>\t5\n<UNK>\t1\nriver\t30\nmoney\t9\n", encoding="utf-8")
    torch.save({"weight": torch.randn(5, 4), "bias": torch.zeros(5)}, tmp_path / "softmax.pt")
    head = native_head(tmp_path)
    assert head.counts.tolist() == [5, 5, 1, 30, 9] and np.isclose(head.frequencies().sum(), 1.0)
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nriver\nmoney\n", encoding="utf-8")
    assert native_head(tmp_path).counts is None and native_head(tmp_path).frequencies() is None  # no counts: unknown
    with pytest.raises(HeadError, match="one count >= 0 per vocabulary word"):
        LMHead.from_arrays(["a", "b"], np.zeros((2, 3)), np.zeros(2), counts=[1, 2, 3])


def test_a_model_without_a_head_reads_its_char_cnn_vectors(bilm):
    embedder = ContextEmbedder.from_bilm(bilm)
    a = embedder.word_vectors(["river", "money", "river"])
    assert a.shape == (3, bilm.config.projection_dim)
    assert np.allclose(a[0], a[2]) and not np.allclose(a[0], a[1])
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    again = ContextEmbedder.from_bilm(bilm).word_vectors(["money"])  # batch-independent: alone as in a batch
    assert np.allclose(again[0], a[1], atol=1e-5)


def test_context_separates_two_topics_and_names_them(bilm):
    head = topic_head(bilm.config.projection_dim)
    sentences = RIVER_SENTENCES + MONEY_SENTENCES
    gold = [0] * len(RIVER_SENTENCES) + [1] * len(MONEY_SENTENCES)
    (ws,) = induce(sentences, ["bank"], bilm=bilm, head=head, progress=False, settings=InductionSettings(representation="context"))
    truth = [gold[int(o.source.split()[-1])] for o in ws.occurrences]  # source: "text I", I the sentence
    assert len(ws.senses) == 2
    assert adjusted_rand(truth, ws.labels) == pytest.approx(1.0)
    by_gold = {truth[ws.senses[c].examples[0]]: ws.senses[c].context for c in range(2)}  # each sense's distinctive context words
    # "sat", "watched", "ask" and "today" tell the two templates apart as well as the topic words do;
    # the words that point where the sense's contexts differ come first, and a sense never takes the
    # other's topic words (which third word follows depends on the head's substitutes, noise here:
    # a random head over the default biLM's states)
    assert set(by_gold[0][:2]) <= set(RIVER) and set(by_gold[1][:2]) <= set(MONEY), by_gold
    assert not set(by_gold[0]) & set(MONEY) and not set(by_gold[1]) & set(RIVER), by_gold
    assert "context_vectors" in ws.extra and ws.extra["context_vectors"].shape == (len(sentences), bilm.config.projection_dim)


def test_context_ignores_the_form_of_the_word(bilm):
    """The same sentence with "bank" and with "banks" has one context vector: the form is not context."""
    head = topic_head(bilm.config.projection_dim)
    embedder = ContextEmbedder.from_head(head)
    one = "We sat on the bank and watched the river"
    two = "We sat on the banks and watched the river"
    a = embedder.embed([Occurrence(one, one.index("bank"), one.index("bank") + 4)], exclude={"bank", "banks"})
    b = embedder.embed([Occurrence(two, two.index("banks"), two.index("banks") + 5)], exclude={"bank", "banks"})
    assert np.allclose(a, b)


def test_representations_join_with_plus_and_bad_ones_are_named():
    assert InductionSettings(representation="substitutes+context").parts == ("substitutes", "context")
    assert InductionSettings(representation="both").parts == ("substitutes", "vectors")
    with pytest.raises(ValueError, match="representation must be one of"):
        InductionSettings(representation="context+words")
    with pytest.raises(ValueError, match="context_window"):
        InductionSettings(representation="context", context_window=0)
