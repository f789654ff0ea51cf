"""Sense induction's two ways of reading the LM: the prior correction of the substitutes and the symmetric pattern."""

import numpy as np
import pytest
import torch

from spacy_elmo.cli.main import main
from spacy_elmo.induction.induce import Inducer, InductionSettings, induce
from spacy_elmo.induction.induced import Occurrence
from spacy_elmo.induction.substitutes import LMHead, lm_states, pattern_sentence

SENTENCES = [
    "He sat down on the bank of the river .",
    "She put all her money in the bank .",
    "The bank refused to lend him money .",
    "They fished from the grassy banks all afternoon .",
    "The river overflowed its bank after the storm .",
    "Thieves robbed the bank on Friday .",
]


def toy_head() -> LMHead:
    """Four words; "said" has a large bias, so every state predicts it first; each other word follows one axis."""
    vocab = ["said", "river", "money", "shore"]
    weight = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0], [2.0, -1.0]], dtype=np.float32)
    return LMHead.from_arrays(vocab, weight, np.array([4.0, 0.0, 0.0, 0.0]), source="toy")


def test_prior_correction_demotes_a_word_every_context_predicts():
    head = toy_head()
    states = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -0.5]])
    ids, scores = head.top_substitutes(states, 2)
    assert [head.vocab[i] for i in ids[:, 0]] == ["said", "said", "said"]
    assert np.allclose(scores, np.sort(scores, axis=1)[:, ::-1])  # best first
    log_prior = torch.log(head.log_probs(states).exp().mean(0))  # the mean prediction over these contexts
    ids, scores = head.top_substitutes(states, 2, log_prior=log_prior, prior_weight=1.0)
    assert [head.vocab[i] for i in ids[:, 0]] == ["river", "money", "shore"]
    expected = head.log_probs(states) - log_prior
    assert np.allclose(scores[:, 0], expected.max(1).values.numpy(), atol=1e-5)
    ids, _ = head.top_substitutes(states, 2, log_prior=log_prior, prior_weight=1.0, chunk=1)  # chunked: the same
    assert [head.vocab[i] for i in ids[:, 0]] == ["river", "money", "shore"]


def test_inducer_prior_is_the_mean_prediction_over_every_reading(bilm, head):
    settings = InductionSettings(min_occurrences=3, prior_weight=1.0, pattern=None, n_representatives=5)
    inducer = Inducer(bilm, head, settings)
    assert inducer.log_prior() is None
    sentences, positions = [], []
    for i, text in enumerate(SENTENCES):
        tokens = text.split()
        position = next(j for j, t in enumerate(tokens) if t.startswith("bank"))
        sentences.append(tokens)
        positions.append(position)
        inducer.add("bank", tokens, position, Occurrence(text, 0, 4, f"s{i}"))
    inducer.flush()
    states = lm_states(bilm, sentences, positions)
    probs = torch.cat([head.log_probs(states.forward).exp(), head.log_probs(states.backward).exp()]).double().mean(0)
    prior = inducer.log_prior()
    assert prior is not None and prior.shape == (len(head),)
    assert torch.allclose(prior, torch.log(probs).float(), atol=1e-3)
    # what every one of these contexts predicts ranks lower once the prior is divided out
    store = inducer.stores["bank"]
    plain = Inducer(bilm, head, InductionSettings(min_occurrences=3, prior_weight=0.0, pattern=None))
    plain.stores = inducer.stores
    top_plain = {head.vocab[i] for ids, _ in plain._substitutes(store) for i in ids[:, :3].ravel()}
    top_corrected = {head.vocab[i] for ids, _ in inducer._substitutes(store) for i in ids[:, :3].ravel()}
    common = max(range(len(head)), key=lambda w: float(probs[w]) if not head.vocab[w].startswith("<") and head.vocab[w].isalpha() else -1.0)
    assert head.vocab[common] in top_plain and head.vocab[common] not in top_corrected
    (bank,) = inducer.senses(["bank"])
    assert bank.weights.shape[0] == len(SENTENCES) and np.allclose(bank.weights.sum(1), 1.0, atol=1e-5)


def test_pattern_sentence_repeats_the_target_around_the_pattern_word():
    assert pattern_sentence(["the", "bank", "paid"], 1) == ["the", "bank", "and", "bank", "paid"]
    assert pattern_sentence(["bank"], 0, "or") == ["bank", "or", "bank"]
    with pytest.raises(ValueError, match="position 3 is outside a sentence of 3 tokens"):
        pattern_sentence(["a", "b", "c"], 3)


def test_pattern_states_are_the_two_pattern_readings_and_leave_the_plain_ones(bilm):
    sentences = [text.split() for text in SENTENCES[:3]]
    positions = [5, 7, 1]
    plain = lm_states(bilm, sentences, positions)
    both = lm_states(bilm, sentences, positions, pattern="and")
    assert plain.pattern_forward is None and len(plain.readings()) == 2
    assert len(both.readings()) == 4
    assert torch.allclose(plain.forward, both.forward, atol=1e-5) and torch.allclose(plain.backward, both.backward, atol=1e-5)
    assert np.allclose(plain.vectors, both.vectors, atol=1e-5)
    for tokens, position, j in zip(sentences, positions, range(3)):
        x = tokens[position]
        # forward: "... w X and" predicts the next word; read as the plain state before a slot after "and"
        forward = lm_states(bilm, [[*tokens[: position + 1], "and", x]], [position + 2])
        assert torch.allclose(both.pattern_forward[j], forward.forward[0], atol=1e-5)
        # backward: "and X w ..." read from the right predicts the word before "and"
        backward = lm_states(bilm, [[x, "and", *tokens[position:]]], [0])
        assert torch.allclose(both.pattern_backward[j], backward.backward[0], atol=1e-5)
        assert not torch.allclose(both.pattern_forward[j], both.forward[j], atol=1e-3)


def test_induce_with_the_pattern_uses_four_readings(bilm, head):
    settings = InductionSettings(min_occurrences=3, pattern="and", n_representatives=5)
    (bank,) = induce(SENTENCES, ["bank"], bilm=bilm, head=head, settings=settings, progress=False)
    assert len(bank.occurrences) == len(SENTENCES) and np.allclose(bank.weights.sum(1), 1.0, atol=1e-5)
    inducer = Inducer(bilm, head, settings)
    inducer.add("bank", SENTENCES[1].split(), 7, Occurrence(SENTENCES[1], 0, 4, "s"))
    inducer.flush()
    (row,) = inducer.stores["bank"].rows
    assert len(row) == 5 and row[1].shape == (bilm.config.projection_dim,)  # the vector, then four LM states


@pytest.mark.parametrize(
    "options, message",
    [
        ({"prior_weight": -0.5}, r"prior_weight is the exponent alpha of the prior correction, in \[0, 2\], got -0.5"),
        ({"prior_weight": 3.0}, r"in \[0, 2\], got 3.0"),
        ({"pattern": "and or"}, "pattern must be one word"),
        ({"pattern": ""}, "pattern must be one word"),
    ],
)
def test_bad_option_values_are_one_line(options, message):
    with pytest.raises(ValueError, match=message):
        InductionSettings(**options)


def test_bad_option_values_on_the_command_line(tmp_path, capsys):
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(SENTENCES), encoding="utf-8")
    out = str(tmp_path / "out")
    assert main(["induce", str(corpus), "--words", "bank", "--out", out, "--prior-weight", "5"]) == 2
    err = capsys.readouterr().err
    assert "prior_weight is the exponent alpha of the prior correction, in [0, 2], got 5.0" in err and "Traceback" not in err
    assert main(["wsi-eval", "--data", str(tmp_path), "--pattern", "and then"]) == 2
    err = capsys.readouterr().err
    assert "pattern must be one word (e.g. 'and') or None, got 'and then'" in err and "Traceback" not in err
