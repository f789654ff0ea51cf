"""The edges of sense induction: a failed induce writes nothing, an empty corpus says so, long unpunctuated
text is cut into bounded windows, "1 sense", sense names reach the page's legend as plain text, the pseudoword check."""

import numpy as np
import torch

from spacy_elmo.cli.main import main
from spacy_elmo.evaluation.wsi_check import choose_pairs, pseudoword_check, word_occurrences
from spacy_elmo.induction.induce import MAX_WINDOW, InductionSettings, induce

RIVER = [
    "He sat down on the bank of the river and watched the water.",
    "The boat drifted toward the muddy bank.",
    "Flowers grew along the bank of the stream.",
    "They fished from the grassy banks all afternoon.",
    "The river overflowed its bank after the storm.",
]
MONEY = [
    "She put all her money in the bank.",
    "The bank refused to lend him money.",
    "The bank paid interest on every deposit.",
    "He opened an account at the bank.",
    "Thieves robbed the bank on Friday.",
]


def test_a_failed_induce_leaves_nothing_in_out(tmp_path, capsys):
    torch.set_num_threads(1)
    (tmp_path / "a.txt").write_text("\n".join(RIVER + MONEY), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["induce", str(tmp_path / "a.txt"), "--words", "zebra", "--out", str(out)]) == 2
    assert "none of the target words occurs in the corpus" in capsys.readouterr().err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["a.txt"]  # no scratch folder left either


def test_an_empty_corpus_says_so(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n\n  \n", encoding="utf-8")
    assert main(["induce", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "the corpus is empty" in err and "0 frequent words" not in err
    assert not (tmp_path / "out").exists()


def test_one_sense_is_one_sense(tmp_path, capsys):
    torch.set_num_threads(1)
    (tmp_path / "a.txt").write_text("\n".join(RIVER + MONEY), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["induce", str(tmp_path / "a.txt"), "--words", "bank", "--out", str(out), "--min-occurrences", "4", "--n-senses", "1"])
    assert code == 0
    assert "(1 sense of 1 word)" in capsys.readouterr().out
    from spacy_elmo.explore.page import explore_page
    from spacy_elmo.induction.induce import load_senses

    page = explore_page(load_senses(out)[0])
    assert "1 sense " in page or "1 sense<" in page or "· 1 sense" in page
    assert "1 senses" not in page


def test_unpunctuated_text_is_cut_into_bounded_windows(bilm, head):
    rng = np.random.default_rng(0)
    filler = ["water", "stone", "light", "green", "road", "house", "tree", "money", "field", "wind"]
    tokens = [filler[i] for i in rng.integers(0, len(filler), 3000)]
    for i in range(100, 3000, 150):
        tokens[i] = "bank"
    text = " ".join(tokens)  # one "sentence" of 3,000 words
    settings = InductionSettings(min_occurrences=4, n_senses=1, n_representatives=2, pattern=None)
    (ws,) = induce([text], ["bank"], bilm=bilm, head=head, settings=settings, progress=False)
    assert len(ws.occurrences) == 20
    for o in ws.occurrences:
        assert o.text[o.start : o.end] == "bank"
        assert len(o.text.split()) <= 2 * MAX_WINDOW + 1  # the window, not the whole text


def test_sense_names_reach_the_legend_as_plain_text():
    from spacy_elmo.explore.page import explore_figure

    from .explore_data import synthetic

    ws = synthetic(sizes=(6, 6))
    ws.senses[0].name = 'bank: <b>river</b> / <a href="x">shore</a> / <span style="color:red">edge</span>'
    fig = explore_figure(ws, np.zeros((12, 2)), [0.5, 0.3], ["#111111", "#222222"])
    name = fig.data[0].name
    assert "<b>" not in name and "<a " not in name and "<span" not in name
    assert "&lt;b&gt;river&lt;/b&gt;" in name  # shown as typed


def test_word_occurrences_keeps_the_first_of_each_word_and_its_inflections():
    corpus = ["The river was wide.", "Rivers flow fast.", "Money talks.", "The river again."]
    kept = word_occurrences(corpus, ["river", "money"], per_word=2)
    assert [len(kept["river"]), len(kept["money"])] == [2, 1]
    tokens, position, occurrence = kept["river"][1]
    assert tokens[position] == "Rivers" and occurrence.text[occurrence.start : occurrence.end] == "Rivers"


def test_pseudoword_pairs_and_check(bilm, head):
    assert choose_pairs(["a", "b", "c", "d", "e", "f"], 3, seed=0) and all(
        abs("abcdef".index(x) - "abcdef".index(y)) == 3 for x, y in choose_pairs(list("abcdef"), 3)
    )
    assert choose_pairs(["a"], 2) == []
    corpus = RIVER * 3 + [s.replace("bank", "account") for s in MONEY] * 3
    settings = InductionSettings(min_occurrences=4, n_representatives=2)
    report = pseudoword_check(corpus, bilm, head, settings, pairs=[("river", "account")], per_word=10)
    (pair,) = report.pairs
    assert (pair.first, pair.second) == ("river", "account") and pair.occurrences >= 5
    assert -1.0 <= pair.ari <= 1.0 and pair.senses >= 1
    assert "pseudoword check: mean ARI" in report.line() and report.as_dict()["pairs"][0]["first"] == "river"


def test_a_pseudoword_hides_its_words_from_the_induction(bilm, head):
    """The made-up token replaces the word in the text the induction reads too: left as "river" and
    "account", the forms would be the known split, and removing each form's mean vector would remove it."""
    from spacy_elmo.evaluation.wsi_check import add_pseudoword
    from spacy_elmo.induction.induce import Inducer

    corpus = RIVER * 2 + [s.replace("bank", "account") for s in MONEY] * 2
    kept = word_occurrences(corpus, ["river", "account"], per_word=6)
    inducer = Inducer(bilm, head, InductionSettings(min_occurrences=4, n_representatives=2, representation="vectors"))
    sides = add_pseudoword(inducer, "river+account", [kept["river"], kept["account"]])
    inducer.flush()
    ws = inducer.word_senses("river+account")
    assert ws.forms == ["river+account"]
    assert [o.text[o.start : o.end] for o in ws.occurrences] == ["river+account"] * len(sides)
    first = ws.occurrences[0].text
    assert "river+account" in first and first.replace("river+account", "river") == kept["river"][0][2].text


def test_induce_check_is_printed_saved_and_shown(tmp_path, capsys):
    torch.set_num_threads(1)
    (tmp_path / "a.txt").write_text("\n".join((RIVER + MONEY) * 10), encoding="utf-8")  # bank 100 times, river and money 20
    out = tmp_path / "out"
    args = ["induce", str(tmp_path / "a.txt"), "--words", "bank", "--out", str(out), "--min-occurrences", "4", "--check", "1"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "pseudoword check: mean ARI" in printed.out + printed.err
    import json

    from spacy_elmo.explore.page import explore_page
    from spacy_elmo.induction.induce import load_senses

    saved = json.loads((out / "pseudoword-check.json").read_text(encoding="utf-8"))
    assert len(saved["pairs"]) == 1 and {saved["pairs"][0]["first"], saved["pairs"][0]["second"]} <= {"bank", "river", "money"}
    (ws,) = load_senses(out)  # the check's file is not a word's senses
    assert ws.extra["check"] == saved
    assert "Pseudoword check on this corpus: mean ARI" in explore_page(ws)


def test_regular_inflections_respect_consonant_doubling():
    """"staring" is a form of "stare", not of "star" (whose -ing form doubles the r: "starring")."""
    from spacy_elmo.induction.induce import match_target
    from spacy_elmo.induction.substitutes import inflection_bases

    assert match_target("staring", {"star": "star"}) is None
    assert match_target("starring", {"star": "star"}) == "star" and match_target("stars", {"star": "star"}) == "star"
    assert match_target("hoped", {"hop": "hop"}) is None and match_target("hopped", {"hop": "hop"}) == "hop"
    assert match_target("staring", {"stare": "stare"}) == "stare"
    for word, base in (("opening", "open"), ("visited", "visit"), ("rained", "rain"), ("fixed", "fix"), ("played", "play")):
        assert base in inflection_bases(word), word  # two syllables, two vowels, or w/x/y: no doubling, the bare stem stands


def strict_json(path):
    """The file's JSON, refusing NaN and Infinity (which JSON does not have)."""
    import json

    def refuse(name):
        raise ValueError(f"{path.name} holds {name}, which is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_check_pairs_never_hold_the_target_words():
    from spacy_elmo.evaluation.wsi_check import candidate_pairs

    # the targets (bank, cell) are the most frequent words: without them, the rest pair up
    corpus = ["bank cell banks cells river money stone water house field"] * 25
    pairs, notes = candidate_pairs(corpus, 3, min_count=20, exclude=["bank", "cell"])
    assert len(pairs) == 3 and not {"bank", "cell", "banks", "cells"} & {w for pair in pairs for w in pair}
    assert notes == []
    pairs, notes = candidate_pairs(corpus, 5, min_count=20, exclude=["bank", "cell"])
    assert len(pairs) == 3 and notes == ["only 6 content words other than the target words occur 20 times or more, for 3 pairs"]


def test_induce_check_says_how_many_pairs_and_why_fewer(tmp_path, capsys):
    torch.set_num_threads(1)
    (tmp_path / "a.txt").write_text("\n".join((RIVER + MONEY) * 10), encoding="utf-8")  # bank 100 times, river and money 20 or more
    out = tmp_path / "out"
    args = ["induce", str(tmp_path / "a.txt"), "--words", "bank", "--out", str(out), "--min-occurrences", "4", "--check", "5"]
    assert main(args) == 0
    printed = capsys.readouterr()
    line = next(line for line in (printed.out + printed.err).splitlines() if "pseudoword check" in line)
    saved = strict_json(out / "pseudoword-check.json")
    made = len(saved["pairs"])
    assert 1 <= made < 5 and saved["asked"] == 5 and saved["notes"]
    assert f"({made} of the 5 asked: only " in line and "other than the target words occur 20 times or more" in line, line
    assert all("bank" not in (pair["first"], pair["second"]) for pair in saved["pairs"])  # the target is never half a pseudoword


def test_induce_check_without_pairs_writes_valid_json(tmp_path, capsys):
    torch.set_num_threads(1)
    (tmp_path / "a.txt").write_text("\n".join(RIVER + MONEY), encoding="utf-8")  # no word 20 times
    out = tmp_path / "out"
    args = ["induce", str(tmp_path / "a.txt"), "--words", "bank", "--out", str(out), "--min-occurrences", "4", "--check", "2"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "pseudoword check: no pair tested of the 2 asked: only 0 content words other than the target words" in printed.err
    saved = strict_json(out / "pseudoword-check.json")
    assert saved["mean_ari"] is None and saved["pairs"] == [] and saved["asked"] == 2
    assert strict_json(out / "bank.json")["extra"]["check"] == saved  # the word's saved senses carry it as valid JSON too


def test_examples_are_the_most_central_occurrences_first():
    """A sense's examples start at its medoid and follow by similarity to it, not file order."""
    import pytest

    from spacy_elmo.induction.induce import central_first

    points = np.array([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6], [0.6, 0.8], [0.71, 0.71]])
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    similarity = unit @ unit.T
    order, typical = central_first(np.arange(5), similarity, np.ones(5))
    assert order[0] == 4 and typical[0] == pytest.approx(1.0)  # the diagonal point is nearest all others
    assert list(order[:3]) in ([4, 2, 3], [4, 3, 2]) and list(order[3:]) in ([0, 1], [1, 0])
    assert np.all(np.diff(typical) <= 1e-12)
    members = np.array([0, 2])
    order, typical = central_first(members, None, np.array([0.2, 0.0, 0.9, 0.0, 0.0]))
    assert list(order) == [2, 0] and np.isnan(typical).all()
