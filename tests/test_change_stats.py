"""The statistics and sampling of ``change``: bootstrap intervals that cover and hold their own
estimates, MAHAL's minimum sample, NaN vectors refused by name, the binary call's counts, samples
that do not depend on the other targets, and the biLM's bounded window around each occurrence."""

from __future__ import annotations

import numpy as np
import pytest

from spacy_elmo.change.detect import ChangeReport, ChangeSettings, compare_samples, compare_word, detect_change, rank_words, sample_corpora
from spacy_elmo.change.measures import (
    MEASURES,
    apd_c,
    bootstrap,
    draw_counts,
    estimates_and_intervals,
    mahal,
    mean_distance,
    measure_all,
    replicates,
    unit,
)
from spacy_elmo.change.report import report_tsv
from spacy_elmo.induction.induce import MAX_WINDOW
from spacy_elmo.induction.induced import Occurrence, Sense, WordSenses

# ---------------------------------------------------------------------------------------------- intervals


def one_distribution(rng: np.random.Generator, n: int, dim: int = 6) -> np.ndarray:
    """A word with two senses (two directions, mixed 70/30) and noise around each."""
    centres = np.eye(dim)[:2] * 2.0
    which = rng.random(n) < 0.7
    return np.where(which[:, None], centres[0], centres[1]) + rng.normal(size=(n, dim))


@pytest.mark.parametrize("n", [10, 50, 200])
def test_intervals_cover_no_change_and_hold_their_own_estimates(n):
    """Two samples of one distribution: the true APD-c and MAHAL are 0. Their 95% intervals hold 0
    in at least 90% of 200 draws (before: every replicate paired a twice-drawn occurrence with its
    copy at distance 0, and MAHAL's replicates kept the sampling floor the estimate takes out, so
    the intervals sat above 0 and above their own estimates), and every interval of every measure
    holds its own estimate."""
    rng = np.random.default_rng(n)
    hold_zero = {"apd_c": 0, "mahal": 0}
    for draw in range(200):
        a, b = one_distribution(rng, n), one_distribution(rng, n)
        wa, wb = rng.dirichlet(np.ones(3), size=n), rng.dirichlet(np.ones(3), size=n)
        estimate, intervals = estimates_and_intervals(a, b, wa, wb, n_resamples=60, seed=draw)
        assert intervals == bootstrap(a, b, wa, wb, n_resamples=60, seed=draw)
        for name in MEASURES:
            low, high = intervals[name]
            assert low <= estimate[name] <= high, (name, draw, low, estimate[name], high)
        for name in hold_zero:
            hold_zero[name] += intervals[name][0] <= 0.0 <= intervals[name][1]
    assert min(hold_zero.values()) >= 180, hold_zero


def test_a_resample_leaves_out_pairs_of_one_occurrence_drawn_twice():
    """APD-c's within-corpus terms in a replicate: the mean over pairs of draws of distinct
    occurrences, as the sample's own term is over its distinct pairs."""
    rng = np.random.default_rng(3)
    a, b = unit(rng.normal(size=(5, 4))), unit(rng.normal(size=(6, 4)))
    counts_a, counts_b = draw_counts(rng, 5, 3), draw_counts(rng, 6, 3)
    assert (counts_a.sum(1) == 5).all() and (counts_a.max(1) >= 2).any()  # someone is drawn twice

    def brute(x, counts):
        drawn = np.repeat(np.arange(len(x)), counts.astype(int))
        within = [x[i] @ x[j] for p, i in enumerate(drawn) for q, j in enumerate(drawn) if i != j]
        return np.mean(within), x[drawn].mean(0)

    for r in range(3):
        (wa, ma), (wb, mb) = brute(a, counts_a[r]), brute(b, counts_b[r])
        assert mean_distance(a, b, counts_a[r : r + 1], counts_b[r : r + 1])[0] == pytest.approx(wa + wb - 2 * ma @ mb)
    assert 0.5 * mean_distance(a, b)[0] == pytest.approx(apd_c(a, b))  # the sample: each drawn once


def test_replicates_are_centred_on_the_estimate_with_zero_rows():
    """A zero row (an occurrence with no known context word) counts the same in the estimate and in
    every replicate: the replicates of the unbiased measures average to the estimate."""
    rng = np.random.default_rng(4)
    a, b = one_distribution(rng, 30), one_distribution(rng, 40)
    a[:6] = 0.0
    b[:3] = 0.0
    wa, wb = rng.dirichlet(np.ones(2), size=30), rng.dirichlet(np.ones(2), size=40)
    estimate, values = replicates(a, b, wa, wb, n_resamples=4000, seed=1)
    assert estimate == measure_all(a, b, wa, wb)
    for name in ("apd", "apd_c", "mahal"):
        spread = values[name].std() / np.sqrt(len(values[name]))
        assert abs(values[name].mean() - estimate[name]) < 4 * spread + 1e-12, name


def test_bootstrap_is_seeded_and_checks_its_arguments():
    rng = np.random.default_rng(5)
    a, b = one_distribution(rng, 20), one_distribution(rng, 25)
    wa, wb = rng.dirichlet(np.ones(2), size=20), rng.dirichlet(np.ones(2), size=25)
    assert bootstrap(a, b, wa, wb, 50, seed=2) == bootstrap(a, b, wa, wb, 50, seed=2) != bootstrap(a, b, wa, wb, 50, seed=3)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap(a, b, wa, wb, n_resamples=0)
    with pytest.raises(ValueError, match="one row of sense weights per occurrence"):
        bootstrap(a, b, wa[:3], wb)


# ---------------------------------------------------------------------------------------------- MAHAL's minimum


def test_mahal_is_not_computed_below_its_axes_plus_two():
    """At 3 + 3 occurrences in 16 dimensions the 6 whitened points form a regular simplex: two
    disjoint clusters and one cloud both gave 0.667. Now neither is computed; from 12 occurrences
    (10 axes + 2) MAHAL is, and tells them apart; with 3 dimensions 3 + 3 is enough."""
    rng = np.random.default_rng(6)
    centres = np.eye(16)[:2] * 5

    def disjoint(n):
        return centres[0] + 0.05 * rng.normal(size=(n, 16)), centres[1] + 0.05 * rng.normal(size=(n, 16))

    def cloud(n):
        return rng.normal(size=(n, 16)), rng.normal(size=(n, 16))

    assert np.isnan(mahal(*disjoint(3))) and np.isnan(mahal(*cloud(3)))
    assert np.isnan(mahal(*cloud(5)[:1], cloud(6)[1]))  # 11 occurrences: still a simplex
    assert mahal(*disjoint(6)) > mahal(*cloud(6)) + 1.0
    low = rng.normal(size=(3, 3)), rng.normal(size=(3, 3)) + 3.0
    assert np.isfinite(mahal(*low))
    wa = wb = np.ones((3, 1))
    intervals = bootstrap(*disjoint(3), wa, wb, 20)
    assert np.isnan(intervals["mahal"]).all() and np.isfinite(intervals["apd_c"]).all()


def word_senses(word: str, a: np.ndarray, b: np.ndarray, senses_a: list, senses_b: list, n_senses: int = 2) -> WordSenses:
    """A word's occurrences in A then B, with their ELMo vectors and one-hot sense weights."""
    vectors = np.vstack([a, b]).astype(np.float32)
    labels = list(senses_a) + list(senses_b)
    weights = np.eye(n_senses, dtype=np.float32)[labels]
    occurrences = [Occurrence(f"the {word} number {i}", 4, 4 + len(word), f"s{i}") for i in range(len(labels))]
    senses = [Sense(k, f"{word}: {k}", [], int(sum(label == k for label in labels)), []) for k in range(n_senses)]
    return WordSenses(word, [word], occurrences, senses, weights, vectors, extra={"elmo_vectors": vectors.astype(np.float16)})


def test_a_word_below_mahals_minimum_keeps_its_other_measures_says_why_and_ranks_last():
    rng = np.random.default_rng(7)
    settings = ChangeSettings(min_occurrences=2, max_occurrences=10, vectors="elmo", n_resamples=20)
    few = compare_word(word_senses("few", rng.normal(size=(3, 16)), rng.normal(size=(3, 16)), [0] * 3, [1] * 3), 3, settings, (3, 3), ("A", "B"))
    assert set(few.measures) == set(few.intervals) == {"apd", "apd_c", "prt", "jsd"}
    assert few.note is not None and "too few occurrences for MAHAL (3 + 3 < its 5 axes + 2)" in few.note and "ranked last" in few.note
    big = [
        compare_word(word_senses(w, rng.normal(size=(10, 16)), rng.normal(size=(10, 16)), [0] * 10, [0] * 10), 10, settings, (10, 10), ("A", "B"))
        for w in ("calm", "still")
    ]
    assert all("mahal" in c.measures and c.note is None for c in big)
    ranked = rank_words([few, *big], "mahal")
    assert [c.word for c in ranked][-1] == "few" and [c.rank for c in ranked] == [1, 2, 3]
    rows = {row.split("\t")[1]: row.split("\t") for row in report_tsv(ChangeReport(("A", "B"), "mahal", ranked, {})).splitlines()[1:]}
    assert rows["few"][-5:-2] == ["", "", ""] and rows["few"][4] != ""  # MAHAL blank, APD given
    by_apd = rank_words([few, *big], "apd")
    assert sorted(c.rank for c in by_apd) == [1, 2, 3]


# ---------------------------------------------------------------------------------------------- NaN and the binary call's counts


def test_nan_vectors_are_refused_naming_the_word():
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(12, 8)), rng.normal(size=(12, 8))
    b[4, 2] = np.nan
    ws = word_senses("gay", a, b, [0] * 12, [1] * 12)
    settings = ChangeSettings(min_occurrences=2, vectors="elmo", n_resamples=10)
    with pytest.raises(ValueError, match=r"the 'elmo' vectors of 'gay' hold NaN or infinite values in 1 of 24 occurrences; the first in new"):
        compare_word(ws, 12, settings, (12, 12), ("old", "new"))
    b[4, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite values"):
        measure_all(a, b, np.ones((12, 1)), np.ones((12, 1)))


def test_the_record_carries_the_counts_the_binary_call_used():
    """10 occurrences in A, 20 in B: B's counts are scaled to a sample of 10 before the rule reads them."""
    rng = np.random.default_rng(9)
    ws = word_senses("cell", rng.normal(size=(10, 8)), rng.normal(size=(20, 8)), [0] * 8 + [1] * 2, [0] * 15 + [1] * 5)
    change = compare_word(ws, 10, ChangeSettings(min_occurrences=2, vectors="elmo", n_resamples=10), (10, 20), ("A", "B"))
    assert [s.count_b for s in change.senses] == [15, 5]  # what each corpus holds
    assert change.binary_counts_a == [8, 2] and change.binary_counts_b == [8, 2]  # what the rule compared (7.5 and 2.5 rounded to even)
    assert not any(s.status in ("appeared", "vanished") for s in change.senses)
    assert change.changed == (change.p_value <= 0.05)  # alone, the test's own p-value (q = p for one word)


# ---------------------------------------------------------------------------------------------- sampling


def test_a_words_sample_does_not_depend_on_the_other_targets():
    lines = [f"The bank {i} lent the cell {i} money and the cell {i + 1} paid the bank." for i in range(60)]
    alone = sample_corpora([lines], {"bank": []}, limit=5, seed=2, progress=False)
    beside = sample_corpora([lines], {"bank": [], "cell": []}, limit=5, seed=2, progress=False)
    assert alone.seen(0, "bank") == beside.seen(0, "bank") == 120 and beside.seen(0, "cell") == 120
    assert [i.occurrence for i in alone.items(0, "bank")] == [i.occurrence for i in beside.items(0, "bank")]
    other_seed = sample_corpora([lines], {"bank": []}, limit=5, seed=3, progress=False)
    assert [i.occurrence for i in other_seed.items(0, "bank")] != [i.occurrence for i in alone.items(0, "bank")]


def test_change_reads_the_window_induce_reads_not_the_whole_line(bilm, head, monkeypatch):
    """One 20,000-token line with the word 400 times: each sampled occurrence gives the biLM at most
    MAX_WINDOW tokens either side (before: the whole line, 4M tokens), and the report's text is that window."""
    filler = "the river ran wide and slow past the old mill where children played in the long summer grass".split()
    tokens = []
    for i in range(400):
        tokens += [filler[(i + j) % len(filler)] for j in range(49)] + ["bank"]
    assert len(tokens) == 20_000
    short = ["She paid the money into the bank on Monday.", "The bank closed early."] * 3
    lengths = []
    encode = bilm.encode

    def spy(batch, *args, **kwargs):
        lengths.extend(int(n) for n in batch.lengths)
        assert max(lengths) <= 2 * MAX_WINDOW + 1 + 4, f"the biLM read {max(lengths)} tokens for one occurrence"
        return encode(batch, *args, **kwargs)

    monkeypatch.setattr(bilm, "encode", spy)
    settings = ChangeSettings(max_occurrences=8, min_occurrences=2, n_resamples=10)
    report = detect_change([" ".join(tokens)], short, ["bank"], bilm=bilm, head=head, settings=settings, progress=False)
    (bank,) = report.words
    assert (bank.n_a, bank.n_b, bank.seen_a) == (8, 6, 400) and bank.measured
    assert sum(lengths) <= 14 * (2 * MAX_WINDOW + 1 + 4)
    assert bank.word_senses is not None
    for o in bank.word_senses.occurrences:
        assert len(o.text.split()) <= 2 * MAX_WINDOW + 1 and o.text[o.start : o.end] == "bank"


def test_nan_from_the_bilm_is_refused_naming_the_word_before_the_induction(bilm, head, monkeypatch):
    encode = bilm.encode

    def broken(batch, *args, **kwargs):
        tokens, layers = encode(batch, *args, **kwargs)
        return tokens * float("nan"), [layer * float("nan") for layer in layers]

    monkeypatch.setattr(bilm, "encode", broken)
    lines = sample_corpora([["The bank was open."] * 3, ["The bank lent money."] * 3], {"bank": []}, limit=5, progress=False)
    with pytest.raises(ValueError, match=r"the ELMo vectors of 'bank' hold NaN or infinite values in 6 of 6 occurrences; the first in old"):
        compare_samples(
            {"bank": (lines.items(0, "bank"), lines.items(1, "bank"))},
            bilm,
            head,
            ChangeSettings(min_occurrences=2, n_resamples=10),
            names=("old", "new"),
        )


def test_the_benchmark_scores_a_measure_over_the_lemmas_it_was_computed_for():
    """A lemma without MAHAL (too few occurrences) drops out of MAHAL's Spearman and threshold, not out of the others'."""
    from spacy_elmo.change import synthetic
    from spacy_elmo.change.detect import WordChange
    from spacy_elmo.change.measures import BinaryRule

    pairs, changes = [], []
    for i, value in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]):
        pairs.append(synthetic.SyntheticPair(f"w{i}", "graded", ["s1", "s2"], [10, 10], [10 + i, 10 - i], [], [], "dev" if i % 2 else "test"))
        measures = {m: value for m in MEASURES}
        if i == 0:
            measures.pop("mahal")
        changes.append(WordChange(f"w{i}", 20, 20, 20, 20, measures))
    scores = synthetic.score(pairs, changes, BinaryRule())
    assert scores["all"]["lemmas"] == 6 and scores["all"]["spearman"]["mahal"] == pytest.approx(1.0)
    assert synthetic.threshold_call(pairs, changes, "mahal", BinaryRule())["measure"] == "mahal"


def test_permutation_test_holds_its_level_and_finds_a_shift():
    """One population split at random: p-values roughly uniform (few below 0.05); a real shift of
    the mean along one axis: p at its floor."""
    from spacy_elmo.change.measures import permutation_pvalue

    rng = np.random.default_rng(3)
    weights = np.ones((40, 1))
    nulls = []
    for draw in range(20):
        x = rng.standard_normal((80, 32)) + 3.0
        nulls.append(permutation_pvalue(x[:40], x[40:], weights, weights, "mahal", 199, seed=draw))
    assert sum(p <= 0.05 for p in nulls) <= 3 and min(nulls) >= 1 / 200
    a = rng.standard_normal((40, 32)) + 3.0
    b = rng.standard_normal((40, 32)) + 3.0
    b[:, 0] += 1.5
    assert permutation_pvalue(a, b, weights, weights, "mahal", 199) == pytest.approx(1 / 200)


def test_energy_test_holds_its_level_and_finds_a_sense_that_moved():
    """The binary call's test: random halves of one two-sense population give roughly uniform
    p-values; the same senses with their shares flipped (14/4 against 4/14, the labelled flips'
    design) give p at most 0.01, in any order of the occurrences within
    each corpus; the same seed gives the same p-value."""
    from spacy_elmo.change.measures import energy_pvalue

    rng = np.random.default_rng(11)
    centres = np.eye(32)[:2] * 4.0 + 1.0

    def draw(n_first: int, n_second: int) -> np.ndarray:
        return np.vstack([centres[0] + rng.standard_normal((n_first, 32)), centres[1] + rng.standard_normal((n_second, 32))])

    nulls = []
    for seed in range(20):
        x = draw(36, 36)[rng.permutation(72)]
        nulls.append(energy_pvalue(x, 36, 199, seed=seed))
    assert sum(p <= 0.05 for p in nulls) <= 3 and min(nulls) >= 1 / 200
    flipped = np.vstack([draw(14, 4), draw(4, 14)])
    assert energy_pvalue(flipped, 18, 199) <= 0.01
    assert energy_pvalue(flipped, 18, 199, seed=5) == energy_pvalue(flipped, 18, 199, seed=5)
    reordered = np.vstack([flipped[:18][::-1], flipped[18:][rng.permutation(18)]])
    assert energy_pvalue(reordered, 18, 999, seed=1) <= 0.01  # other shuffles are drawn, the same conclusion
    with pytest.raises(ValueError, match="2 or more occurrences in each corpus"):
        energy_pvalue(flipped, 1, 99)
    bad = flipped.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        energy_pvalue(bad, 18, 99)


def test_the_binary_call_tests_what_the_senses_were_induced_from():
    """``test="energy"`` reads the word's sense representation (``WordSenses.vectors``), not the
    vectors the measures rank by: a flip there is called though the ranking vectors carry no
    change; ``test="measure"`` is the permutation test of the ranking measure as before."""
    rng = np.random.default_rng(12)
    elmo = rng.normal(size=(36, 16))  # the ranking vectors: one population
    ws = word_senses("port", elmo[:18], elmo[18:], [0] * 14 + [1] * 4, [0] * 4 + [1] * 14)
    centres = np.eye(16)[:2] * 2.5 + 1.0
    labels = np.array([0] * 14 + [1] * 4 + [0] * 4 + [1] * 14)
    ws.vectors = (centres[labels] + rng.normal(size=(36, 16))).astype(np.float32)
    settings = ChangeSettings(min_occurrences=2, vectors="elmo", n_resamples=10, n_permutations=199)
    energy = compare_word(ws, 18, settings, (18, 18), ("A", "B"))
    assert energy.test == "energy" and energy.p_value == pytest.approx(1 / 200) and energy.changed
    measured = compare_word(ws, 18, ChangeSettings(min_occurrences=2, vectors="elmo", n_resamples=10, n_permutations=199, test="measure"), (18, 18), ("A", "B"))
    assert measured.test == "mahal" and measured.p_value > 0.05
    with pytest.raises(ValueError, match="test must be one of energy, measure"):
        ChangeSettings(test="t")


def test_benjamini_hochberg_matches_its_definition():
    from spacy_elmo.change.measures import benjamini_hochberg

    q = benjamini_hochberg([0.01, 0.04, 0.03, float("nan"), 0.5])
    # sorted p 0.01, 0.03, 0.04, 0.5 over m = 4: 0.04, 0.06, 0.0533 -> running minimum from the top
    assert q[0] == pytest.approx(0.04) and q[2] == pytest.approx(0.0533333) and q[1] == pytest.approx(0.0533333)
    assert np.isnan(q[3]) and q[4] == pytest.approx(0.5)


def test_the_binary_call_is_the_adjusted_test():
    from spacy_elmo.change.detect import WordChange, call_changes

    changes = [WordChange(f"w{i}", 20, 20, 20, 20, {"mahal": 1.0}, p_value=p) for i, p in enumerate([0.001, 0.02, 0.3])]
    changes.append(WordChange("unmeasured", 3, 3, 3, 3))
    call_changes(changes, 0.05)
    assert [c.changed for c in changes] == [True, True, False, None]
    assert changes[1].q_value == pytest.approx(0.03)


def test_share_change_within_noise():
    from spacy_elmo.change.measures import share_change_pvalue

    assert share_change_pvalue(11, 22, 12, 22) > 0.5  # 50% -> 55% of 22: noise
    assert share_change_pvalue(18, 22, 4, 22) < 0.001  # the flip the report must not call stable


def test_prt_and_jsd_say_no_change_when_there_is_none():
    """Two random halves of one distribution in 256 dimensions (the default's vector size): PRT with
    its prototypes' lengths taken without their sampling floor, and JSD less its bootstrap bias,
    hold 0 in their 95% intervals in >= 90% of 30 draws (before: 0 of 30 for PRT)."""
    rng = np.random.default_rng(11)
    holds = {"prt": 0, "jsd": 0}
    for draw in range(30):
        pooled = rng.normal(size=(120, 256)) + 0.3
        weights = rng.dirichlet(np.ones(3), size=120)
        half = rng.permutation(120)
        a, b, wa, wb = pooled[half[:60]], pooled[half[60:]], weights[half[:60]], weights[half[60:]]
        raw = measure_all(a, b, wa, wb)
        corrected, intervals = estimates_and_intervals(a, b, wa, wb, n_resamples=200, seed=draw)
        assert corrected["jsd"] < raw["jsd"]  # the sampling floor taken out
        assert abs(raw["prt"]) < 0.05  # about 0: the plain cosine distance of the two means is 0.17 here
        for name in holds:
            holds[name] += intervals[name][0] <= 0.0 <= intervals[name][1]
    assert min(holds.values()) >= 27, holds
