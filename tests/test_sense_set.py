"""Senses checked against people: the hand-labelled sense set (tests/data/senses/labelled) and pseudowords.

The targets (agreement, senses per word, names a person accepts, pseudowords) are what a shipped
default must reach; the embedded default of today does not (bench/results/sense-set.json), so
those tests are strict expected failures: they fail the suite the day the default passes them,
so that the mark is removed rather than forgotten.
"""

import re

import numpy as np
import pytest
from labelled_senses import load_labelled, score_word, summary  # project/scripts

from spacy_elmo.evaluation.wsi_check import pseudoword_check
from spacy_elmo.induction.induce import InductionSettings, induce, match_target, target_forms
from spacy_elmo.induction.naming import readable

WEAK_DEFAULT = pytest.mark.xfail(
    strict=True, reason="the embedded default's contexts do not separate these senses (bench/results/sense-set.json); a new default must"
)


@pytest.fixture(scope="module")
def labelled():
    return load_labelled()


@pytest.fixture(scope="module")
def induced(labelled, bilm, head):
    """Each word of the set induced with the default settings (its own number of senses)."""
    out = []
    for item in labelled:
        (ws,) = induce(item.sentences, {item.word: item.forms}, bilm=bilm, head=head, progress=False)
        out.append((item, ws))
    return out


def test_the_labelled_set_is_what_it_says(labelled):
    assert len(labelled) >= 8 and {i.n_senses for i in labelled} == {2, 3}
    for item in labelled:
        counts = {s: item.senses.count(s) for s in set(item.senses)}
        assert min(counts.values()) >= 20, item.word
        assert set(counts) == set(item.accepted) and all(item.accepted.values())
        forms = target_forms({item.word: item.forms})
        for sentence in item.sentences:  # one occurrence per sentence, so that occurrence i is sentence i
            assert sum(match_target(t, forms) is not None for t in re.findall(r"[A-Za-z]+", sentence)) == 1, sentence
        assert len(set(item.sentences)) == len(item.sentences)


def test_every_name_is_readable_and_names_one_sense(labelled, bilm, head):
    """With the number of senses fixed at gold, each sense shows context words and substitutes, all readable, none shared."""
    for item in labelled:
        settings = InductionSettings(n_senses=item.n_senses)
        (ws,) = induce(item.sentences, {item.word: item.forms}, bilm=bilm, head=head, settings=settings, progress=False)
        exclude = {f.lower() for f in ws.forms}
        seen = {}
        for sense in ws.senses:
            shown = [*sense.context, *sense.substitutes]
            assert shown and sense.name.startswith(f"{item.word}: ")
            for word in shown:
                assert readable(word, exclude), (item.word, sense.name, word)
                assert seen.setdefault(word, sense.id) == sense.id, (item.word, word)  # no word names two senses
            assert all(w in shown for w in sense.name.split(": ", 1)[1].split(" / "))


@WEAK_DEFAULT
def test_induced_senses_agree_with_people(induced):
    scores = [score_word(item, ws) for item, ws in induced]
    result = summary(scores)
    assert result["mean_ari"] >= 0.5, result
    assert result["senses_per_word"] <= 4, result
    assert result["named_share"] >= 0.75, result


@WEAK_DEFAULT
def test_pseudowords_of_the_set_are_split_back(labelled, bilm, head):
    """Two of the set's words merged into one token: induction should split them back (mean ARI >= 0.6)."""
    corpus = [s for item in labelled for s in item.sentences]
    pairs = [("bass", "seal"), ("mouse", "spring"), ("crane", "cell"), ("plant", "bank")]
    report = pseudoword_check(corpus, bilm, head, pairs=pairs, per_word=42)
    assert len(report.pairs) == 4 and report.mean_ari >= 0.6, report.line()


def test_scoring_counts_what_it_should(labelled):
    """The scorer itself: perfect labels score ARI 1 and, named by accepted words, a named share of 1."""
    from spacy_elmo.induction.induced import Occurrence, Sense, WordSenses

    item = labelled[0]
    gold = item.gold
    k = item.n_senses
    names = sorted(set(item.senses))
    senses = [Sense(c, f"{item.word}: x", [item.accepted[names[c]][0]], int((gold == c).sum()), []) for c in range(k)]
    occurrences = [Occurrence(s, 0, 1, f"text {i}") for i, s in enumerate(item.sentences)]
    weights = np.eye(k, dtype=np.float32)[gold]
    ws = WordSenses(item.word, [item.word], occurrences, senses, weights, np.zeros((len(gold), 2), np.float32))
    score = score_word(item, ws)
    assert score.ari == 1.0 and score.named == score.large == k
    wrong = WordSenses(
        item.word, [item.word], occurrences, [Sense(0, "x", ["zzz"], len(gold), [])], np.ones((len(gold), 1), np.float32), ws.vectors
    )
    assert score_word(item, wrong).named == 0 and score_word(item, wrong).ari == 0.0
