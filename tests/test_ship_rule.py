"""The default model's ship rule as ``project/scripts/candidate_report.py`` applies it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from candidate_report import CONTEXT_FEATURE, ship_rule

SCRIPT = Path(__file__).resolve().parent.parent / "project" / "scripts" / "candidate_report.py"


def report(modern: float = 147.6, context: float = 0.18, wic: float = 0.536, wsd: float = 61.7, probe: float = 0.799,
           pos: float = 84.34, sd: float = 0.19, speed: float = 1.0, mb: float = 20.1) -> Dict[str, Any]:  # fmt: skip
    return {
        "modern_test": {"ppl_avg": 151.2, "common": {"ppl_avg": modern}},
        "sense_set": {"features": {CONTEXT_FEATURE: {"ari_gold": context}}},
        "wic": {"test_accuracy": wic},
        "wsd": {"with_prior_all": wsd},
        "sense_probe": {"overall_accuracy": probe},
        "pos_1pct": {"mean": pos, "sd": sd},
        "component_speed": {"ratio": speed},
        "model_files": {"mb": mb},
        "books_test": {"ppl_avg": 106.5},
    }


BASE = report(wic=0.554, wsd=62.5, probe=230 / 288)
# just above every floor: WiC 53.5, WSD 61.2, 222 of the probe's 288 items, POS 84.0, speed 0.95, 60 MB
AT_FLOORS = dict(wic=0.535, wsd=61.2, probe=222 / 288, pos=84.0, speed=0.95, mb=60.0)


def test_better_by_the_margin_on_either_gate_ships():
    assert ship_rule(report(modern=147.6 * 0.98), BASE)[0]
    assert ship_rule(report(context=0.18 + 0.03), BASE)[0]


def test_better_by_less_than_the_margin_does_not_ship():
    for candidate in (report(modern=147.6 * 0.985), report(context=0.18 + 0.029)):
        ships, failing, passing = ship_rule(candidate, BASE)
        assert not ships and len(failing) == 1 and "by the margin" in failing[0]
        assert sum(row.endswith("short of it)") for row in passing) == 2  # each margin row says it was not met
    # a gain that rounds to the margin at one decimal is printed to two, and said to be short
    row = next(r for r in ship_rule(report(modern=147.6 * 0.9804), BASE)[2] if r.startswith("modern"))
    assert "1.96% lower; needs 2%, short of it" in row
    met = next(r for r in ship_rule(report(modern=147.6 * 0.98), BASE)[2] if r.startswith("modern"))
    assert "2.00% lower; needs 2%)" in met


def test_a_lucky_draw_of_the_shipped_default_is_no_bar():
    """The rule of floors: a candidate below the shipped default's own WiC, WSD and probe draw, but
    above the fixed floors and better on perplexity, ships (leg 2's figures against step 1,700's)."""
    leg2 = report(modern=69.9, context=0.423, wic=0.537, wsd=61.9, probe=229 / 288, pos=84.78, sd=0.27, speed=1.002, mb=25.6)
    step1700 = report(modern=78.8, context=0.338, wic=0.554, wsd=62.5, probe=230 / 288, pos=84.47, sd=0.17, speed=1.0, mb=25.6)
    ships, failing, passing = ship_rule(leg2, step1700)
    assert ships, failing
    assert any("shipped 55.4" in row and "floor 53.5" in row for row in passing)


def test_modern_perplexity_over_different_common_words_is_not_compared():
    """Perplexity over the words both vocabularies hold means nothing across two different word sets
    (a candidate scored with --common-with its own vocabulary against a baseline scored with stage 4's)."""
    candidate, baseline = copy.deepcopy(report(modern=60.0)), copy.deepcopy(BASE)
    candidate["modern_test"]["common"]["common_types"] = 49997
    baseline["modern_test"]["common"]["common_types"] = 24141
    ships, failing, passing = ship_rule(candidate, baseline)
    assert not ships and any("by the margin on modern perplexity" in row for row in failing)
    assert any("not compared" in row and "49997" in row for row in passing)
    candidate["modern_test"]["common"]["common_types"] = 24141
    assert ship_rule(candidate, baseline)[0]


def test_no_better_gate_fails():
    ships, failing, _ = ship_rule(report(), BASE)
    assert not ships and any("by the margin on modern perplexity" in row for row in failing)


@pytest.mark.parametrize(
    "change, name",
    [
        ({"wic": 0.5349}, "WiC"),
        ({"wsd": 61.19}, "WSD"),
        ({"probe": 221 / 288}, "sense probe"),
        ({"pos": 83.99}, "1% POS"),
        ({"speed": 0.949}, "tokens/s"),
        ({"mb": 60.5}, "model files"),
    ],
)
def test_each_row_below_its_floor_fails(change, name):
    ships, failing, _ = ship_rule(report(modern=100.0, **{**AT_FLOORS, **change}), BASE)
    assert not ships
    assert len(failing) == 1 and name in failing[0]


def test_rows_at_their_floors_pass():
    edge = report(modern=100.0, **AT_FLOORS)
    ships, failing, passing = ship_rule(edge, BASE)
    assert ships and failing == []
    assert any("222 of 288 right" in row for row in passing)


def test_paired_intervals_where_both_reports_score_the_same_items():
    candidate, baseline = copy.deepcopy(report(modern=100.0)), copy.deepcopy(BASE)
    candidate["wic"]["test_correct"] = "1" * 60 + "0" * 40
    baseline["wic"]["test_correct"] = "1" * 50 + "0" * 50
    _, _, passing = ship_rule(candidate, baseline)
    wic_row = next(row for row in passing if row.startswith("WiC"))
    assert "paired difference +10.00" in wic_row and "10 disagreements" in wic_row
    baseline["wic"]["test_correct"] = "1" * 99  # other items: no interval, and no error
    _, _, passing = ship_rule(candidate, baseline)
    assert "paired" not in next(row for row in passing if row.startswith("WiC"))


def test_the_context_ari_is_paired_over_the_words_both_reports_scored():
    candidate, baseline = copy.deepcopy(report(context=0.25)), copy.deepcopy(BASE)
    words = ["bank", "bass", "cell", "crane"]
    baseline["sense_set"]["features"][CONTEXT_FEATURE]["per_word"] = dict(zip(words, [0.1, 0.2, 0.2, 0.22]))
    candidate["sense_set"]["features"][CONTEXT_FEATURE]["per_word"] = dict(zip(words, [0.2, 0.3, 0.2, 0.3]))
    ships, _, passing = ship_rule(candidate, baseline)
    row = next(r for r in passing if r.startswith("labelled set"))
    assert ships and "+0.070; needs +0.03; paired over its 4 words [+0." in row
    low, high = (float(x) for x in row.split("words [", 1)[1].rstrip(")]").split(", "))
    assert 0.0 <= low <= 0.07 <= high <= 0.1  # every word moved up or stayed: the interval never crosses zero
    del baseline["sense_set"]["features"][CONTEXT_FEATURE]["per_word"]["crane"]  # other words: no interval
    assert "paired" not in next(r for r in ship_rule(candidate, baseline)[2] if r.startswith("labelled set"))


def test_a_missing_measure_fails_its_row():
    partial = copy.deepcopy(report(modern=100.0))
    del partial["pos_1pct"]
    ships, failing, _ = ship_rule(partial, BASE)
    assert not ships and failing == ["1% POS: not measured"]


def test_books_are_reported_not_gated():
    worse_books = report(modern=100.0)
    worse_books["books_test"]["ppl_avg"] = 500.0
    ships, _, passing = ship_rule(worse_books, BASE)
    assert ships and any(row.startswith("books perplexity") for row in passing)


def test_rule_only_prints_the_verdict(tmp_path):
    baseline, candidate = tmp_path / "base.json", tmp_path / "cand.json"
    baseline.write_text(json.dumps(BASE))
    for figures, code, word in ((report(modern=100.0), 0, "SHIP"), (report(modern=100.0, wsd=61.0), 1, "NOT SHIP")):
        candidate.write_text(json.dumps(figures))
        cmd = [sys.executable, str(SCRIPT), "x", "--ud", "u", "--modern", "m", "--books", "b", "--data-root", "d"]
        result = subprocess.run(
            cmd + ["--output", str(candidate), "--baseline", str(baseline), "--rule-only"], capture_output=True, text=True
        )
        assert result.returncode == code, result.stderr
        assert result.stdout.strip().splitlines()[-1].startswith(word)
