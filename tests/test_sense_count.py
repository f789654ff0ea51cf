"""How many senses, decided against a null; senses that carry the context, not the word's form; readable names."""

import re

import numpy as np
import pytest

from spacy_elmo.induction.clustering import adjusted_rand, count_senses, cut_senses, remove_form, split_score
from spacy_elmo.induction.induce import InductionSettings, induce
from spacy_elmo.induction.naming import distinctive_words, exclusive, readable, sense_name


def blob(rng, n, dims=32, centre=None):
    """n points from one Gaussian with a decaying spectrum (like principal coordinates)."""
    x = rng.standard_normal((n, dims)) * np.sqrt(0.9 ** np.arange(dims))
    return x if centre is None else x + centre


def two_groups(rng, sizes=(60, 40), gap=6.0, dims=32):
    centre = np.zeros(dims)
    centre[0] = gap
    return np.vstack([blob(rng, sizes[0], dims), blob(rng, sizes[1], dims, centre)]), np.repeat([0, 1], sizes)


def kept_whole(draw, count: int) -> float:
    """The share of ``count`` seeded draws of one distribution (``draw(rng)``) that stay one sense."""
    return float(np.mean([len(set(count_senses(draw(np.random.default_rng(seed))))) == 1 for seed in range(count)]))


def sphere(rng, n):
    """Unit vectors around one direction (cosine geometry)."""
    x = rng.standard_normal((n, 64)) + 1.5
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("n", [30, 200, 1500])
def test_one_distribution_is_one_sense(n):
    """The rule's first promise, as a rate: the test keeps a split at z < -0.6 on two axes, so a few
    draws of one distribution in a hundred may split (bench/null_rule.py measures 85-100% kept by
    kind and size); here 90% of 20 seeded draws staying whole is the floor."""
    count = 20 if n < 1000 else 5
    assert kept_whole(lambda rng: blob(rng, n), count) >= 0.9
    assert kept_whole(lambda rng: rng.standard_t(3, (n, 32)), count) >= 0.9  # heavy tails: outliers do not make senses
    assert kept_whole(lambda rng: sphere(rng, n), count) >= 0.9


@pytest.mark.parametrize("n", [40, 100, 300])
def test_one_heavy_tailed_cloud_is_one_sense(n):
    """A multivariate t (3 degrees of freedom): one centre, occasional far points, as real occurrence clouds."""
    assert kept_whole(lambda rng: blob(rng, n, dims=16) / np.sqrt(rng.chisquare(3, (n, 1)) / 3), 20) >= 0.9


@pytest.mark.parametrize("seed", range(3))
def test_an_80_20_split_is_two_senses(seed):
    x, truth = two_groups(np.random.default_rng(20 + seed), sizes=(160, 40), gap=6.0)
    labels = count_senses(x, seed=seed)
    assert len(set(labels)) == 2 and adjusted_rand(truth, labels) > 0.9
    assert np.bincount(labels)[1] < 50  # the minority sense is the minority


def test_the_split_test_can_be_replaced():
    x, truth = two_groups(np.random.default_rng(7), sizes=(60, 60), gap=5.0, dims=16)
    halves, z = split_score(x, np.random.default_rng(0))
    assert z < -3 and adjusted_rand(truth, halves) > 0.9

    def never(points, rng):
        return split_score(points, rng)[0], np.inf

    def always(points, rng):
        return split_score(points, rng)[0], -np.inf

    assert set(count_senses(x, test=never)) == {0}
    assert len(set(count_senses(blob(np.random.default_rng(8), 200), test=always, max_senses=4))) == 4


def test_two_separated_groups_are_two_senses():
    x, truth = two_groups(np.random.default_rng(1))
    labels = count_senses(x)
    assert len(set(labels)) == 2 and adjusted_rand(truth, labels) > 0.95
    assert np.bincount(labels)[0] > np.bincount(labels)[1]  # 0 = the largest


def test_three_groups_and_the_cap():
    rng = np.random.default_rng(2)
    centres = np.zeros((3, 32))
    centres[1, 0], centres[2, 1] = 5.0, 5.0
    x = np.vstack([blob(rng, n, centre=c) for n, c in zip((80, 60, 40), centres)])
    assert len(set(count_senses(x))) == 3
    assert len(set(count_senses(x, max_senses=2))) == 2
    assert len(set(count_senses(x, n_senses=5))) == 5  # fixed: made without the test


def test_a_small_group_is_not_a_sense():
    rng = np.random.default_rng(3)
    x, _ = two_groups(rng, sizes=(180, 12), gap=12.0)  # 6% of the occurrences, far away
    assert set(count_senses(x, min_share=0.1)) == {0}
    labels = count_senses(x, min_share=0.02)  # allowed: the far 12 are a sense of their own, and only they
    assert len(set(labels[-12:])) == 1 and labels[-1] not in set(labels[:-12])


def test_the_answer_is_stable_under_resampling():
    """Eight 80% subsamples: one cloud gives one sense in all eight, two groups two senses in at
    least seven and never fewer (at z < -0.6 one subsample of this two-group cloud finds a third
    sense, a split of one Gaussian group; at -0.8 none did: docs/senses.md, the rule re-chosen)."""
    rng = np.random.default_rng(4)
    one = blob(rng, 400)
    two, _ = two_groups(rng, sizes=(240, 160), gap=3.5)
    for x, k, agree in ((one, 1, 8), (two, 2, 7)):
        answers = []
        for seed in range(8):
            sample = x[np.random.default_rng(seed).choice(len(x), int(0.8 * len(x)), replace=False)]
            answers.append(len(set(count_senses(sample, seed=seed))))
        assert answers.count(k) >= agree and min(answers) == k, answers


def test_cut_senses_reads_cosine_distances():
    rng = np.random.default_rng(5)
    x, truth = two_groups(rng, sizes=(50, 50), gap=5.0, dims=16)
    x += 6.0 * np.eye(16)[3]  # away from the origin, as embeddings are
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    distances = np.clip(1 - unit @ unit.T, 0, 2)
    labels = cut_senses(distances)
    assert len(set(labels)) == 2 and adjusted_rand(truth, labels) > 0.9
    one = unit[truth == 0]
    assert set(cut_senses(np.clip(1 - one @ one.T, 0, 2))) == {0}


def test_remove_form_takes_out_what_the_form_adds():
    rng = np.random.default_rng(6)
    context = rng.standard_normal((20, 8))
    plural = np.r_[5.0, np.zeros(7)]
    vectors = np.vstack([context, context + plural])  # the same contexts, as "cell" and as "cells"
    out = remove_form(vectors, ["cell"] * 20 + ["cells"] * 20)
    assert np.allclose(out[:20], out[20:], atol=1e-5)


def test_readable_words_only():
    for junk in ("ii", "vol", "chapter", "have", "shall", "i", "x", "follows:--", "i.", "mr.", "xiv", "thou", "1850", "bank"):
        assert not readable(junk, exclude={"bank"}), junk
    for word in ("river", "money", "prison", "mix", "guitar"):
        assert readable(word)


def test_distinctive_words_and_no_word_for_two_senses():
    contexts = [["river", "water", "boat"]] * 5 + [["money", "loan", "water"]] * 5 + [["ii", "vol", "the"]] * 3
    labels = np.array([0] * 5 + [1] * 5 + [0] * 3)
    scored = distinctive_words(contexts, labels, background={"the": 100, "water": 20, "river": 2, "money": 2})
    assert list(scored[0])[:2] == ["river", "boat"] or list(scored[0])[:2] == ["boat", "river"]
    assert "money" in scored[1] and "ii" not in scored[0] and "vol" not in scored[0]
    owned = exclusive([{"water": 2.0, "river": 3.0}, {"water": 1.0, "money": 3.0}])
    assert owned == [["water", "river"], ["money"]]
    assert sense_name("bank", ["river", "water"], ["shore", "river"]) == "bank: river / shore / water"


def test_cell_and_cells_in_the_same_sentence_land_in_the_same_sense(bilm, head):
    sentences = [
        "The prisoner paced his narrow cell all night.",
        "Guards searched the cell for a hidden phone.",
        "He spent a night in a police cell after the arrest.",
        "Inmates stay in the cell for most of the day.",
        "The warden ordered the cell door opened.",
        "Red blood cell counts were low in the sample.",
        "The virus enters the cell through a receptor.",
        "Under the microscope each cell looked like a brick.",
        "The drug kills the tumour cell but spares the tissue.",
        "A stem cell can become many kinds of tissue.",
    ]
    both = sentences + [re.sub(r"\bcell\b", "cells", s) for s in sentences]
    for representation in ("vectors", "both", "substitutes"):
        settings = InductionSettings(representation=representation, n_senses=2, min_occurrences=4, n_representatives=5)
        (ws,) = induce(both, ["cell"], bilm=bilm, head=head, settings=settings, progress=False)
        labels = ws.labels
        assert (labels[:10] == labels[10:]).all(), representation  # the form does not decide the sense


def test_substitutes_name_a_sense_only_where_a_test_says_so():
    """A substitute names a sense when the LM predicts it there clearly more than elsewhere (Welch's t and a
    lift); one given a sliver of probability everywhere (a rare word the prior correction lifts) names nothing."""
    from scipy import sparse

    from spacy_elmo.induction.naming import distinctive_substitutes

    rng = np.random.default_rng(0)
    vocab = ["money", "river", "quo", "water", "the"]
    labels = np.repeat([0, 1], 20)
    mass = np.zeros((40, 5))
    mass[:20, 0] = rng.uniform(0.05, 0.2, 20)  # money: the first sense
    mass[20:, 1] = rng.uniform(0.05, 0.2, 20)  # river: the second
    mass[:, 2] = rng.uniform(1e-6, 1e-5, 40)  # quo: a sliver everywhere
    mass[:, 3] = 0.1 + rng.uniform(0, 0.01, 40)  # water: as likely in both
    mass[:3, 4] = 0.3  # a stop word never names
    scored = distinctive_substitutes(sparse.csr_matrix(mass), labels, vocab)
    assert list(scored[0]) == ["money"] and list(scored[1]) == ["river"]
    mass[20:, 0] = mass[:20, 0] * 0.9  # money in both: no longer distinctive
    assert "money" not in distinctive_substitutes(sparse.csr_matrix(mass), labels, vocab)[0]
    one = np.zeros(40, dtype=np.int64)  # one sense: against the corpus's mean prediction
    prior = np.array([0.001, 0.15, 1e-6, 0.1, 0.3])
    assert list(distinctive_substitutes(sparse.csr_matrix(mass), one, vocab, prior)[0]) == ["money"]
    assert distinctive_substitutes(sparse.csr_matrix(mass), one, vocab) == [{}]  # no prior, nothing to test against
