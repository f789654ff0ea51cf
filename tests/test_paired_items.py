"""Per-item outcomes and the paired comparison of two models on the same test items."""

from __future__ import annotations

import numpy as np
import pytest

from spacy_elmo.evaluation.items import item_string, paired_difference


def test_item_string_keeps_order():
    assert item_string([True, False, np.bool_(True)]) == "101"


def test_identical_outcomes_differ_by_exactly_zero():
    out = paired_difference("1100101", "1100101")
    assert out["difference"] == out["low"] == out["high"] == 0.0 and out["disagreements"] == 0


def test_paired_interval_is_narrower_than_unpaired_when_models_agree():
    """Shared successes and failures are not noise: two models agreeing on all but 20 of 1,000 items
    (15 won, 5 lost) give an interval around +1 point far narrower than two independent samples'."""
    rng = np.random.default_rng(1)
    base = rng.random(1000) < 0.55
    cand = base.copy()
    flip = rng.choice(1000, 20, replace=False)
    cand[flip[:15]] = True
    base[flip[:15]] = False
    cand[flip[15:]] = False
    base[flip[15:]] = True
    out = paired_difference(item_string(cand), item_string(base))
    assert out["difference"] == pytest.approx(100 * (cand.mean() - base.mean()))
    assert out["disagreements"] == 20
    assert out["low"] > 0 and out["high"] - out["low"] < 2.5  # unpaired, the 95% interval would be ~8.7 points wide


def test_other_items_or_bad_strings_are_refused():
    with pytest.raises(ValueError, match="different items"):
        paired_difference("101", "10")
    with pytest.raises(ValueError, match="0/1"):
        paired_difference("10x", "101")


def test_per_item_scores_are_paired_the_same_way():
    from spacy_elmo.evaluation.items import paired_mean_difference

    out = paired_mean_difference([0.5, 0.7, 0.9, 0.4], [0.4, 0.7, 0.8, 0.3])
    assert out["difference"] == pytest.approx(0.075) and out["items"] == 4 and out["disagreements"] == 3
    assert 0.0 <= out["low"] <= 0.075 <= out["high"] <= 0.1 + 1e-12  # at most every word at +0.1
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_mean_difference([0.5], [0.5, 0.6])
