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


BASE = report()


def test_better_on_either_gate_and_no_worse_ships():
    assert ship_rule(report(modern=102.7), BASE)[0]
    assert ship_rule(report(context=0.64), BASE)[0]


def test_modern_perplexity_over_different_common_words_is_not_compared():
    """Perplexity over the words both vocabularies hold means nothing across two different word sets
    (a candidate scored with --common-with its own vocabulary against a baseline scored with stage 4's)."""
    candidate, baseline = copy.deepcopy(report(modern=60.0)), copy.deepcopy(BASE)
    candidate["modern_test"]["common"]["common_types"] = 49997
    baseline["modern_test"]["common"]["common_types"] = 24141
    ships, failing, passing = ship_rule(candidate, baseline)
    assert not ships and any("better on modern perplexity" in row for row in failing)
    assert any("not compared" in row and "49997" in row for row in passing)
    candidate["modern_test"]["common"]["common_types"] = 24141
    assert ship_rule(candidate, baseline)[0]


def test_no_better_gate_fails():
    ships, failing, _ = ship_rule(report(), BASE)
    assert not ships and any("better on modern perplexity" in row for row in failing)


@pytest.mark.parametrize(
    "change, name",
    [
        ({"wic": 0.536 - 0.0131}, "WiC"),
        ({"wsd": 61.7 - 0.51}, "WSD"),
        ({"probe": 0.799 - 0.001}, "sense probe"),
        ({"pos": 84.34 - 0.2}, "1% POS"),
        ({"speed": 0.949}, "tokens/s"),
        ({"mb": 60.5}, "model files"),
    ],
)
def test_each_row_beyond_its_noise_fails(change, name):
    ships, failing, _ = ship_rule(report(modern=100.0, **change), BASE)
    assert not ships
    assert len(failing) == 1 and name in failing[0]


def test_rows_within_their_noise_pass():
    edge = report(modern=100.0, wic=0.536 - 0.012, wsd=61.2, probe=0.799, pos=84.34 - 0.19, speed=0.951, mb=59.9)
    assert ship_rule(edge, BASE) == (True, [], ship_rule(edge, BASE)[2])


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
    for figures, code, word in ((report(modern=100.0), 0, "SHIP"), (report(modern=100.0, wsd=60.0), 1, "NOT SHIP")):
        candidate.write_text(json.dumps(figures))
        cmd = [sys.executable, str(SCRIPT), "x", "--ud", "u", "--modern", "m", "--books", "b", "--data-root", "d"]
        result = subprocess.run(cmd + ["--output", str(candidate), "--baseline", str(baseline), "--rule-only"], capture_output=True, text=True)
        assert result.returncode == code, result.stderr
        assert result.stdout.strip().splitlines()[-1].startswith(word)
