"""Senses checked against people: the hand-labelled sense set (tests/data/senses/labelled) and pseudowords.

The set's ambiguous words (``load_labelled()``) carry every figure; its one-sense controls
(``load_labelled(kind="controls")``) are read only by the number-of-senses rule's promise rates.

The targets (agreement, senses per word, names a person accepts, pseudowords) are what a shipped
default must reach; the embedded default of today does not (bench/results/sense-set.json), so
those tests are strict expected failures: they fail the suite the day the default passes them,
so that the mark is removed rather than forgotten.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from labelled_senses import load_labelled, promise_rates, score_word, summary  # project/scripts

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


@pytest.fixture(scope="module")
def controls():
    return load_labelled(kind="controls")


def _written_as_the_set_says(item, per_sense: int = 20):
    counts = {s: item.senses.count(s) for s in set(item.senses)}
    assert min(counts.values()) >= per_sense, item.word
    assert set(counts) == set(item.accepted) and all(item.accepted.values())
    forms = target_forms({item.word: item.forms})
    for sentence in item.sentences:  # one occurrence per sentence, so that occurrence i is sentence i
        assert sum(match_target(t, forms) is not None for t in re.findall(r"[A-Za-z]+", sentence)) == 1, sentence
    assert len(set(item.sentences)) == len(item.sentences)


def test_the_labelled_set_is_what_it_says(labelled):
    assert len(labelled) == 8 and {i.n_senses for i in labelled} == {2, 3} and not any(i.is_control for i in labelled)
    for item in labelled:
        _written_as_the_set_says(item)


def test_the_controls_are_what_they_say(labelled, controls):
    """Five one-sense control nouns, 42 sentences each (as many as a two-sense word), named as long as the ambiguous words."""
    assert [i.word for i in controls] == ["afternoon", "bicycle", "butter", "kitchen", "window"]
    for item in controls:
        assert item.is_control and item.n_senses == 1 and len(item.sentences) == 42, item.word
        _written_as_the_set_says(item)
        (names,) = item.accepted.values()
        assert len(names) >= 25 and len(set(names)) == len(names), item.word
    every = load_labelled(kind="all")
    assert [i.word for i in every] == sorted(i.word for i in [*labelled, *controls])
    sentences = [s for i in every for s in i.sentences]
    assert len(set(sentences)) == len(sentences)  # no sentence is written for two words
    with pytest.raises(ValueError, match="kind"):
        load_labelled(kind="one-sense")


SETS = Path(__file__).parent / "data" / "senses"


@pytest.mark.parametrize("name, per_sense, words", [("natural", 18, 9), ("registers", 20, 6)])
def test_the_other_sets_are_what_they_say(name, per_sense, words):
    """The two other hand-written sets: two senses a word, controls of as many sentences, each word in one set only."""
    items = load_labelled(SETS / name, kind="all")
    assert len(items) == words
    for item in items:
        _written_as_the_set_says(item, per_sense)
        assert item.n_senses == (1 if item.is_control else 2), item.word
        assert len(item.sentences) == 2 * per_sense, item.word
    others = {i.word for other in ("labelled", "natural", "registers") if other != name for i in load_labelled(SETS / other, kind="all")}
    assert not others & {i.word for i in items}


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


def test_induced_senses_agree_with_people(induced):
    """With its defaults (its own number of senses) on the set's ambiguous words: 0.60 measured with
    the number-of-senses rule on two axes at z < -0.6 and v2 + leg 8 (0.24 with the earlier rule on all 16), 0.4 the floor."""
    scores = [score_word(item, ws) for item, ws in induced]
    result = summary(scores)
    assert result["mean_ari"] >= 0.4, result
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


def _fabricated(item, labels, shown="zzz"):
    """WordSenses for ``item`` whose occurrence i is in sense ``labels[i]``, each sense showing ``shown``."""
    from spacy_elmo.senses.induced import Occurrence, Sense, WordSenses

    labels = np.asarray(labels)
    k = int(labels.max()) + 1
    senses = [Sense(c, f"{item.word}: {shown}", [shown], int((labels == c).sum()), []) for c in range(k)]
    occurrences = [Occurrence(s, 0, 1, f"text {i}") for i, s in enumerate(item.sentences)]
    return WordSenses(
        item.word, [item.word], occurrences, senses, np.eye(k, dtype=np.float32)[labels], np.zeros((len(labels), 2), np.float32)
    )


def test_promise_rates_count_what_they_should(labelled, controls):
    """The rule's promises: the share of controls given exactly one sense, of ambiguous words given two or more;
    the controls change none of the ambiguous words' figures."""
    n = len(controls[0].sentences)
    split = np.arange(n) % 2
    control_scores = [
        score_word(controls[0], _fabricated(controls[0], np.zeros(n, int), controls[0].accepted["time"][0])),  # one sense: kept
        score_word(controls[1], _fabricated(controls[1], split)),  # two senses: broken
        score_word(controls[2], _fabricated(controls[2], np.zeros(n, int))),  # one sense: kept
        score_word(controls[3], _fabricated(controls[3], np.arange(n) % 3)),  # three senses: broken
    ]
    assert [s.ari for s in control_scores] == [None] * 4 and all(s.is_control for s in control_scores)
    assert (control_scores[0].named, control_scores[0].large) == (1, 1)
    ambiguous_scores = [
        score_word(labelled[0], _fabricated(labelled[0], labelled[0].gold)),  # gold: two senses
        score_word(labelled[1], _fabricated(labelled[1], np.zeros(len(labelled[1].sentences), int))),  # one sense: missed
        score_word(labelled[6], _fabricated(labelled[6], np.arange(len(labelled[6].sentences)) % 4)),  # four senses
    ]
    assert promise_rates([*ambiguous_scores, *control_scores]) == {"controls_one_sense": 0.5, "ambiguous_two_or_more": 2 / 3}
    assert promise_rates(control_scores[:1]) == {"controls_one_sense": 1.0, "ambiguous_two_or_more": None}
    assert promise_rates(ambiguous_scores[1:2]) == {"controls_one_sense": None, "ambiguous_two_or_more": 0.0}
    alone, mixed = summary(ambiguous_scores), summary([*control_scores, *ambiguous_scores])
    for key in ("mean_ari", "senses_per_word", "named_share", "large_senses", "ambiguous_words"):
        assert mixed[key] == alone[key], key
    assert alone["mean_ari"] == pytest.approx(np.mean([s.ari for s in ambiguous_scores])) and alone["senses_per_word"] == 7 / 3
    assert (alone["controls"], mixed["controls"], mixed["controls_one_sense"], mixed["ambiguous_two_or_more"]) == (0, 4, 0.5, 2 / 3)
    assert summary(control_scores)["mean_ari"] is None and summary(control_scores)["controls_one_sense"] == 0.5
