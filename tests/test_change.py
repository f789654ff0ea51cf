"""Semantic change between two corpora (spacy_elmo.change): the measures on vectors with known
answers, the bootstrap, the binary rule, bounded sampling, the synthetic benchmark's designs, and
the ``change`` command end to end with the default model."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_elmo.change import synthetic
from spacy_elmo.change.detect import ChangeSettings, _examples, occurrence_vectors, rank_words, sample_corpora, sense_status
from spacy_elmo.change.measures import (
    BinaryRule,
    apd,
    apd_c,
    bootstrap,
    jsd,
    mahal,
    measure_all,
    prt,
    sense_counts,
    whitened,
    within_apd,
)
from spacy_elmo.change.sample import Reservoir
from spacy_elmo.cli import app

runner = CliRunner()


def clusters(rng, centres, counts, noise=0.05):
    """Rows around the given centres: ``counts[k]`` rows near ``centres[k]``."""
    return np.vstack([c + noise * rng.normal(size=(n, len(c))) for c, n in zip(centres, counts) if n])


# ---------------------------------------------------------------------------------------------- measures


def test_identical_corpora_measure_about_zero():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 16))
    weights = rng.dirichlet(np.ones(3), size=40)
    m = measure_all(a, a.copy(), weights, weights.copy())
    assert abs(m["apd_c"]) < 0.03 and m["prt"] < 1e-9 and m["jsd"] < 1e-12
    # no distance at all, less what sampling would give: each corpus's spread (1 on each of 10 axes) over its n - 1
    assert m["mahal"] == pytest.approx(-2 * 10 / 39)
    assert m["apd"] == pytest.approx(within_apd(a), abs=0.03)  # APD keeps the word's own spread


def test_two_samples_of_one_distribution_measure_about_zero():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(2, 32))
    a = clusters(rng, centres, (300, 300), noise=0.5)
    b = clusters(rng, centres, (300, 300), noise=0.5)
    assert abs(apd_c(a, b)) < 0.01 and prt(a, b) < 0.01
    assert abs(mahal(a, b)) < 0.05  # sampling's share taken out: about 0


def test_disjoint_senses_measure_high():
    rng = np.random.default_rng(2)
    centres = np.eye(8)[:2] * 5
    a = clusters(rng, centres, (50, 0))
    b = clusters(rng, centres, (0, 50))
    wa, wb = np.tile([1.0, 0.0], (50, 1)), np.tile([0.0, 1.0], (50, 1))
    m = measure_all(a, b, wa, wb)
    assert m["apd"] > 0.95 and m["prt"] > 0.95 and m["apd_c"] > 0.9 and m["jsd"] == pytest.approx(1.0)
    # two groups a whole spread apart (means at -1 and +1 of that axis), less sampling's share over the 8 axes
    assert m["mahal"] == pytest.approx(4.0 - 8 * (1 / 50 + 1 / 50), abs=0.05)


def test_mahal_is_about_zero_without_change_whatever_the_sizes():
    """Its expectation under no change is taken out, so a word seen 10 times in A is not ranked up for
    its noise: samples of one distribution average about 0 at every size, a real shift stays above."""
    rng = np.random.default_rng(11)
    for n in (10, 40, 200):
        values = [mahal(rng.normal(size=(n, 16)), rng.normal(size=(200, 16))) for _ in range(40)]
        assert abs(np.mean(values)) < 0.15, n
    shifted = [mahal(rng.normal(size=(10, 16)) + 1.0, rng.normal(size=(200, 16))) for _ in range(10)]
    assert np.mean(shifted) > 1.0


def test_apd_is_the_mean_over_all_pairs():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(9, 5))
    ua = a / np.linalg.norm(a, axis=1, keepdims=True)
    ub = b / np.linalg.norm(b, axis=1, keepdims=True)
    assert apd(a, b) == pytest.approx(float(np.mean(1 - ua @ ub.T)))
    pairs = [1 - ua[i] @ ua[j] for i in range(7) for j in range(7) if i != j]
    assert within_apd(a) == pytest.approx(float(np.mean(pairs)))


def test_measures_grow_with_the_change():
    rng = np.random.default_rng(4)
    centres = np.eye(6)[:2] * 3
    a = clusters(rng, centres, (80, 20), noise=0.3)
    values = []
    for moved in (20, 50, 80):
        b = clusters(rng, centres, (80 - moved, 20 + moved), noise=0.3)
        values.append((apd_c(a, b), prt(a, b)))
    assert values[0][0] < values[1][0] < values[2][0] and values[0][1] < values[1][1] < values[2][1]


def test_mahal_weighs_each_axis_by_its_spread():
    """A shift of half a spread along a quiet axis counts as much as one along a loud axis; APD-c
    sees only the loud one. Both words' occurrences sit far along axis 0, so unit length barely bends them."""
    rng = np.random.default_rng(9)
    scale = np.array([0.0, 1.0, 0.01])

    def sample(shift: np.ndarray) -> np.ndarray:
        return np.array([10.0, 0.0, 0.0]) + rng.normal(size=(400, 3)) * scale + shift

    loud = (sample(np.zeros(3)), sample(np.array([0.0, 0.5, 0.0])))
    quiet = (sample(np.zeros(3)), sample(np.array([0.0, 0.0, 0.005])))
    assert mahal(*quiet) == pytest.approx(mahal(*loud), rel=0.5) and mahal(*loud) > 0.15
    assert apd_c(*loud) > 10 * abs(apd_c(*quiet))
    za, zb = whitened(*loud, dims=2)  # the two widest axes, each of unit spread
    assert za.shape == (400, 2) and np.vstack([za, zb]).std(0) == pytest.approx([1.0, 1.0])
    assert mahal(np.ones((3, 4)), np.ones((5, 4))) == 0.0  # no spread at all: no axis, no distance, no floor
    with pytest.raises(ValueError, match="dims must be 1 or more"):
        whitened(*loud, dims=0)


def test_jsd_known_values_and_errors():
    assert jsd(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(1.0)
    assert jsd(np.array([2.0, 2.0]), np.array([0.5, 0.5])) == pytest.approx(0.0)
    assert jsd(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(0.311278, abs=1e-6)
    with pytest.raises(ValueError, match="same senses"):
        jsd(np.array([1.0]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="at least one occurrence"):
        apd(np.zeros((0, 3)), np.ones((2, 3)))


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(5)
    centres = np.eye(6)[:2] * 3
    a, b = clusters(rng, centres, (30, 10), 0.5), clusters(rng, centres, (15, 25), 0.5)
    wa = np.eye(2)[[0] * 30 + [1] * 10] * 0.8 + 0.1
    wb = np.eye(2)[[0] * 15 + [1] * 25] * 0.8 + 0.1
    first = bootstrap(a, b, wa, wb, n_resamples=100, seed=7)
    assert first == bootstrap(a, b, wa, wb, n_resamples=100, seed=7)
    assert first != bootstrap(a, b, wa, wb, n_resamples=100, seed=8)
    estimate = measure_all(a, b, wa, wb)
    for name, (low, high) in first.items():
        assert low <= estimate[name] + 0.02 and estimate[name] - 0.02 <= high and low < high, name
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap(a, b, wa, wb, n_resamples=0)


def test_binary_rule():
    rule = BinaryRule(at_least=5, at_most=2)
    assert rule.changes(np.array([10, 2]), np.array([8, 5])) == ([1], [])  # sense 1: 2 in A, 5 in B: gained
    assert rule.changes(np.array([10, 6]), np.array([8, 0])) == ([], [1])  # lost
    assert not rule.changed(np.array([10, 3]), np.array([8, 9]))  # 3 in A is more than at_most
    assert not rule.changed(np.array([10, 0]), np.array([8, 4]))  # 4 in B is fewer than at_least
    assert BinaryRule(1, 0).changed(np.array([3, 0]), np.array([3, 1]))
    with pytest.raises(ValueError, match="at_most < at_least"):
        BinaryRule(at_least=2, at_most=2)
    assert sense_counts(np.array([[0.6, 0.4], [0.2, 0.8], [0.9, 0.1]])).tolist() == [2, 1]
    assert [sense_status(False, False, a, b) for a, b in ((0.5, 0.7), (0.5, 0.3), (0.5, 0.55))] == ["grew", "shrank", "stable"]
    assert sense_status(True, False, 0.0, 0.4) == "appeared" and sense_status(False, True, 0.4, 0.0) == "vanished"


def test_settings_errors():
    with pytest.raises(ValueError, match="measure must be one of"):
        ChangeSettings(measure="cosine")
    with pytest.raises(ValueError, match="above max_occurrences"):
        ChangeSettings(max_occurrences=5, min_occurrences=10)
    with pytest.raises(ValueError, match="vectors must be one of elmo, context, both"):
        ChangeSettings(vectors="words")


def test_both_vectors_join_context_and_what_sets_an_occurrence_apart():
    from spacy_elmo.induction.induced import WordSenses

    rng = np.random.default_rng(3)
    elmo, context = rng.normal(size=(6, 4)) + 5.0, rng.normal(size=(6, 3))
    ws = WordSenses("bank", ["bank"], [], [], np.ones((6, 1)), elmo, extra={"elmo_vectors": elmo.astype(np.float16)})
    with pytest.raises(ValueError, match="carry no context_vectors"):
        occurrence_vectors(ws, "both")
    ws.extra["context_vectors"] = context.astype(np.float16)
    both = occurrence_vectors(ws, "both")
    assert both.shape == (6, 7) and both.dtype == np.float32
    assert np.linalg.norm(both[:, :3], axis=1) == pytest.approx(np.ones(6), abs=1e-3)  # each half of unit length
    centred = elmo.astype(np.float16).astype(np.float32) - elmo.astype(np.float16).astype(np.float32).mean(0)
    assert both[:, 3:] == pytest.approx(centred / np.linalg.norm(centred, axis=1, keepdims=True), abs=1e-4)  # the word's mean removed
    assert occurrence_vectors(ws, "elmo") == pytest.approx(elmo, abs=0.01)
    with pytest.raises(ValueError, match="vectors must be one of"):
        occurrence_vectors(ws, "words")


# ---------------------------------------------------------------------------------------------- sampling


def test_reservoir_is_bounded_uniform_and_seeded():
    hits: Counter = Counter()
    for seed in range(2000):
        reservoir: Reservoir[int] = Reservoir(5, random.Random(seed))
        for item in range(50):
            reservoir.offer(item)
        assert len(reservoir.items) == 5 and reservoir.seen == 50 and len(set(reservoir.items)) == 5
        hits.update(reservoir.items)
    expected = 2000 * 5 / 50
    assert all(abs(hits[i] - expected) < 0.35 * expected for i in range(50))  # early and late items alike
    runs = []
    for _ in range(2):
        reservoir = Reservoir(5, random.Random(3))
        for item in range(50):
            reservoir.offer(item)
        runs.append(reservoir.items)
    assert runs[0] == runs[1]


def test_sampling_a_corpus_keeps_at_most_the_limit(tmp_path):
    lines = [f"The bank number {i} was open and the banks were full." for i in range(30)] + ["No target here."]
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(lines) + "\n")
    samples = sample_corpora([corpus, [lines[0]]], {"bank": []}, limit=7, seed=1, progress=False)
    kept = samples.items(0, "bank")
    assert len(kept) == 7 and samples.seen(0, "bank") == 60 and samples.seen(1, "bank") == 2
    for item in kept:
        o = item.occurrence
        assert o.text[o.start : o.end].lower() in ("bank", "banks") and item.tokens[item.position].lower() == o.text[o.start : o.end].lower()
    again = sample_corpora([corpus], {"bank": []}, limit=7, seed=1, progress=False)
    assert [i.occurrence for i in again.items(0, "bank")] == [i.occurrence for i in kept]


def test_ranking_puts_the_unmeasured_last():
    from spacy_elmo.change.detect import WordChange

    words = [WordChange("x", 3, 3, 3, 3), WordChange("y", 9, 9, 9, 9, {"apd_c": 0.1}), WordChange("z", 9, 9, 9, 9, {"apd_c": 0.3})]
    ranked = rank_words(words, "apd_c")
    assert [w.word for w in ranked] == ["z", "y", "x"] and [w.rank for w in ranked] == [1, 2, None]


# ---------------------------------------------------------------------------------------------- the synthetic benchmark


def test_synthetic_designs():
    base = np.array([0.6, 0.3, 0.1])
    rng = np.random.default_rng(0)
    pa, pb = synthetic.design_shares("none", base, rng)
    assert np.allclose(pa, pb)
    for _ in range(20):
        pa, pb = synthetic.design_shares("gain", base, rng)
        gone = int(np.flatnonzero(pa == 0)[0])
        assert 0.2 <= pb[gone] <= 0.6 and np.isclose(pa.sum(), 1) and np.isclose(pb.sum(), 1)
        pa, pb = synthetic.design_shares("loss", base, rng)
        assert (pb == 0).sum() == 1 and (pa > 0).all()
    counts = synthetic.exact_counts(np.array([0.55, 0.3, 0.15]), 30)
    assert counts.tolist() == [17, 9, 4]  # 16.5, 9, 4.5: the first of the two equal remainders gets the extra one
    assert synthetic.split_of("bank|NOUN") == synthetic.split_of("bank|NOUN") and {synthetic.split_of(f"w{i}") for i in range(20)} == {"dev", "test"}
    with pytest.raises(ValueError, match="design must be one of"):
        synthetic.design_shares("drift", base, rng)


def test_synthetic_pairs_from_annotated_sentences():
    from spacy_elmo.evaluation.wsd_data import WsdSentence

    sentences, gold = [], {}
    for i in range(80):
        sense = "bank%1:14:00::" if i % 2 else "bank%1:17:01::"
        sentences.append(WsdSentence(f"s{i}", ["the", "bank", "is", "here"], ["the", "bank", "be", "here"], ["DET", "NOUN", "VERB", "ADV"], [(1, f"s{i}.t1")]))
        gold[f"s{i}.t1"] = [sense]
    pairs = synthetic.build_pairs(sentences, gold, size=20, min_per_sense=10, seed=3)
    (pair,) = pairs
    assert pair.lemma == "bank|NOUN" and len(pair.a) == len(pair.b) == 20 and sum(pair.counts_a) == sum(pair.counts_b) == 20
    ids_a = {item.occurrence.source for item in pair.a}
    assert not ids_a & {item.occurrence.source for item in pair.b}  # the two corpora share no occurrence
    assert all(gold[item.occurrence.source][0] for item in pair.a)
    observed = Counter(gold[item.occurrence.source][0] for item in pair.a)
    assert [observed[s] for s in pair.senses] == pair.counts_a
    assert pair.truth_jsd() == pytest.approx(jsd(np.array(pair.counts_a, float), np.array(pair.counts_b, float)))
    item = pair.a[0]
    assert item.occurrence.text[item.occurrence.start : item.occurrence.end] == "bank"


# ---------------------------------------------------------------------------------------------- the command


RIVER = [
    "We walked along the bank of the river and watched the water.",
    "The boat drifted to the muddy bank where the reeds grew.",
    "Fish swam near the grassy bank of the stream.",
    "He sat on the bank and threw stones into the river.",
    "The river overflowed its bank after the storm.",
    "Children played on the sandy bank by the lake.",
]
MONEY = [
    "She deposited the money at the bank on Monday.",
    "The bank raised its interest rates again.",
    "He took out a loan from the bank to buy a house.",
    "The bank closed his account after the fraud.",
    "Customers queued outside the bank to withdraw their savings.",
    "The central bank printed more money last year.",
]
PLAY = ["The children play in the garden every afternoon.", "They play football after school.", "We play cards on Sundays."]


@pytest.fixture(scope="module")
def change_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("change")
    a, b = folder / "old.txt", folder / "new.txt"
    a.write_text("\n".join(RIVER * 2 + PLAY * 3) + "\n")
    b.write_text("\n".join(MONEY * 2 + PLAY * 3) + "\n")
    out = folder / "out"
    args = ["change", str(a), str(b), "--words", "bank,play", "--out", str(out), "--names", "old,new", "--max-occurrences", "10"]
    result = runner.invoke(app, args + ["--min-occurrences", "5", "--resamples", "30", "--max-senses", "3", "--threads", "1"])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_change_command_end_to_end(change_run):
    out, output = change_run
    report = json.loads((out / "report.json").read_text())
    assert report["corpora"] == {"a": "old", "b": "new"} and report["measure"] == "mahal"
    words = {w["word"]: w for w in report["words"]}
    bank, play = words["bank"], words["play"]
    assert bank["occurrences"] == {"a": 10, "b": 10} and bank["seen"] == {"a": 12, "b": 12}  # sampled down to --max-occurrences
    for name in ("apd", "apd_c", "prt", "jsd", "mahal"):
        low, high = bank["intervals"][name]
        assert low <= high
    assert bank["measures"]["apd_c"] > play["measures"]["apd_c"] and bank["measures"]["prt"] > play["measures"]["prt"]
    assert bank["measures"]["mahal"] > 2 * play["measures"]["mahal"]
    assert bank["rank"] == 1 and play["rank"] == 2  # ranked by mahal
    assert abs(sum(s["share_a"] for s in bank["senses"]) - 1) < 1e-3 and abs(sum(s["share_b"] for s in bank["senses"]) - 1) < 1e-3
    examples = [e["text"] for s in bank["senses"] for e in s["examples_a"]]
    assert examples and all(text in RIVER for text in examples)
    assert all(e["text"] in MONEY for s in bank["senses"] for e in s["examples_b"])
    rows = (out / "report.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:5] == ["rank", "word", "n_a", "n_b", "apd"] and rows[1].split("\t")[1] == "bank"
    assert "1. bank: APD" in output and "of old ->" in output
    assert (out / "pages" / "bank.html").is_file() and (out / "pages" / "play.html").is_file()
    assert (out / "pages" / "plotly.min.js").is_file()  # one Plotly for all the pages, not 4.5 MB in each
    assert 'src="plotly.min.js"' in (out / "pages" / "bank.html").read_text(encoding="utf-8")


def test_context_vectors_measure_the_change_of_the_words_around(tmp_path):
    """With --vectors context the distances compare the words around each occurrence: river words in
    one corpus and money words in the other set bank apart from play, whose contexts stay the same."""
    a, b = tmp_path / "old.txt", tmp_path / "new.txt"
    a.write_text("\n".join(RIVER * 2 + PLAY * 3) + "\n")
    b.write_text("\n".join(MONEY * 2 + PLAY * 3) + "\n")
    out = tmp_path / "out"
    args = ["change", str(a), str(b), "--words", "bank,play", "--out", str(out), "--vectors", "context", "-r", "substitutes+context"]
    result = runner.invoke(app, args + ["--min-occurrences", "5", "--resamples", "10", "--max-senses", "3", "--no-pages", "--threads", "1"])
    assert result.exit_code == 0, result.output
    words = {w["word"]: w for w in json.loads((out / "report.json").read_text())["words"]}
    assert words["bank"]["measures"]["apd_c"] > words["play"]["measures"]["apd_c"] + 0.05
    assert words["play"]["measures"]["prt"] < 0.05  # the same three sentences in both: the same contexts


def test_saved_senses_carry_the_corpora_and_explore_reads_them(change_run, tmp_path):
    from spacy_elmo.induction.induced import load_word_senses

    out, _ = change_run
    ws = load_word_senses(out / "senses" / "bank.json")
    assert ws.extra["corpus"].tolist() == [0] * 10 + [1] * 10 and ws.extra["corpus_names"] == ["old", "new"]
    assert all(ws.occurrences[i].text in RIVER for i in range(10)) and all(ws.occurrences[i].text in MONEY for i in range(10, 20))
    result = runner.invoke(app, ["explore", str(out / "senses"), "--word", "bank", str(tmp_path / "bank.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "bank.html").read_text(encoding="utf-8")
    assert 'id="shares"' in page and "share of old" in page and "share of new" in page


@pytest.mark.parametrize(
    "args, message",
    [
        (["change", "missing-a.txt", "missing-b.txt", "--out", "x"], "corpus file not found: missing-a.txt"),
        (["change", "{a}", "{a}", "--out", "x", "--measure", "cosine"], "measure must be one of"),
        (["change", "{a}", "{a}", "--out", "x", "--names", "only-one"], "--names 'only-one': give two names"),
        (["change", "{a}", "{a}", "--out", "x", "--at-least", "2", "--at-most", "3"], "at_most < at_least"),
        (["change", "{a}", "{a}", "--out", "x", "--vectors", "words"], "vectors must be one of elmo, context"),
        (["change", "{a}", "{a}", "--out", "x", "-r", "context+words"], "--representation 'context+words': use one of"),
        (["change-eval", "--data", "{dir}"], "SemCor not found"),
    ],
)
def test_change_user_errors(tmp_path, args, message):
    text = tmp_path / "a.txt"
    text.write_text("The bank was open.\n")
    args = [a.format(a=text, dir=tmp_path) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_threshold_call_is_chosen_on_dev_and_scored_on_test():
    from spacy_elmo.change.detect import WordChange

    pairs, changes = [], []
    for i, (split, value, changed) in enumerate([("dev", 0.1, False), ("dev", 0.3, True), ("dev", 0.5, True), ("test", 0.2, True), ("test", 0.05, False)]):
        counts_b = [10, 10] if not changed else [20, 0]
        pairs.append(synthetic.SyntheticPair(f"w{i}", "none", ["s1", "s2"], [10, 10], counts_b, [], [], split))
        changes.append(WordChange(f"w{i}", 20, 20, 20, 20, {"apd_c": value}))
    call = synthetic.threshold_call(pairs, changes, "apd_c", BinaryRule())
    assert call == {"measure": "apd_c", "threshold": 0.3, "dev": 1.0, "test": 0.5}


def test_binary_rule_counts_in_samples_of_equal_size():
    from spacy_elmo.change.detect import equal_size_counts

    a, b = equal_size_counts(np.array([8, 2]), np.array([150, 50]))  # 2 of 10 in A, 50 of 200 in B
    assert a.tolist() == [8, 2] and b.tolist() == [8, 2]  # as in a sample of 10: 25% of 10 is 2 (rounded), not a gain
    assert not BinaryRule().changed(a, b) and BinaryRule().changed(np.array([8, 2]), np.array([150, 50]))
    a, b = equal_size_counts(np.array([30, 0]), np.array([20, 10]))
    assert a.tolist() == [30, 0] and b.tolist() == [20, 10]  # equal sizes: unchanged


def test_explain_shows_the_senses_that_matter():
    from spacy_elmo.change.detect import SenseChange, WordChange
    from spacy_elmo.change.report import explain

    change = WordChange("party", 20, 20, 20, 20, {"apd": 0.4, "apd_c": 0.07, "prt": 0.1, "jsd": 0.5, "mahal": 1.2}, rank=1, changed=True)
    change.intervals = {k: (v - 0.01, v + 0.01) for k, v in change.measures.items()}
    change.senses = [
        SenseChange(0, "party: group", [], 0.7, 0.1, 19, 2, "shrank", [], []),
        SenseChange(1, "party: politics", [], 0.01, 0.87, 1, 17, "appeared", [], []),
        SenseChange(2, "party: tiny", [], 0.02, 0.03, 0, 1, "stable", [], []),
    ]
    lines = explain(change, ("old", "new"))
    assert lines[0].startswith("1. party: APD 0.400 [0.390, 0.410], APD-c 0.070") and "binary: changed (20 in old, 20 in new)" in lines[0]
    assert "MAHAL 1.200 [1.190, 1.210]" in lines[0]
    # each status with the counts the binary call compared (here both samples hold 20: as counted)
    assert lines[1] == "   party: group: 70% of old -> 10% of new (shrank: 19 -> 2 in samples of 20)"
    assert lines[2] == "   party: politics: 1% of old -> 87% of new (appeared: 1 -> 17 in samples of 20)"
    assert lines[3] == "   (1 smaller sense, under 5% of either corpus: see report.json)" and len(lines) == 4
    change.measures.pop("mahal")  # a report saved before MAHAL existed still explains
    assert "MAHAL" not in explain(change, ("old", "new"))[0]


def test_a_senses_examples_in_each_corpus_are_its_most_central_occurrences_not_the_first_in_the_file():
    """Issue 47: a sense's examples are nearest its medoid (over both corpora), so an occurrence the
    cut placed in the sense but far from the rest of it (listed first in A) is shown last, if at all."""
    # six occurrences, all of sense 0 with weight 1: A = 0, 1, 2 (0 an outlier), B = 3, 4, 5
    points = np.array([[0.0, 1.0], [1.0, 0.1], [1.0, 0.0], [1.0, 0.05], [0.9, 0.1], [1.0, -0.1]])
    rows = points / np.linalg.norm(points, axis=1, keepdims=True)
    similarity = rows @ rows.T
    weights = np.zeros((6, 2))
    weights[:, 0] = 1.0
    a, b = np.arange(3), np.arange(3, 6)
    assert sorted(_examples(weights, a, 0, 2, similarity)) == [1, 2]  # the outlier, first in file order, is not shown
    assert _examples(weights, a, 0, 3, similarity)[-1] == 0
    assert set(_examples(weights, b, 0, 3, similarity)) == {3, 4, 5}
    assert _examples(weights, a, 1, 3, similarity) == []  # no occurrence of sense 1
    assert _examples(weights, a, 0, 2, None) == [0, 1]  # without the representation: by weight, then file order
