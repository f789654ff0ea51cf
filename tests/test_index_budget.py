"""``index --max-tokens N`` indexes exactly N token occurrences (the last paragraph is cut)."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.search.index import TokenIndex

runner = CliRunner()
TEXT = "The actors rehearsed the play for weeks.\n\nThe boys went out to play football.\n\nWe saw a new play at the theatre.\n"  # 9 + 8 + 8 tokens


@pytest.mark.parametrize("budget, expected", [(1, 1), (10, 10), (17, 17), (25, 25), (1000, 25)])
def test_max_tokens_is_exact(tmp_path, budget, expected):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    result = runner.invoke(app, ["index", str(text), "--out", str(tmp_path / "idx"), "--max-tokens", str(budget)])
    assert result.exit_code == 0, result.output
    index = TokenIndex.load(tmp_path / "idx")
    assert len(index) == expected
    assert f"indexed {expected:,} token occurrences" in result.output


def test_a_negative_budget_is_refused(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    result = runner.invoke(app, ["index", str(text), "--out", str(tmp_path / "idx"), "--max-tokens", "-1"])
    assert result.exit_code == 2 and "--max-tokens" in result.output
