"""What the change and senses pages say agrees with what the commands do: the measure a table is
ranked by is named as the default only when it is, ``--pattern``'s help describes the pattern the
docs describe, and counts read "1 sense", never "1 senses"."""

from __future__ import annotations

import re
from pathlib import Path

from spacy_elmo.change.detect import DEFAULT_MEASURE
from spacy_elmo.change.report import MEASURE_NAMES
from spacy_elmo.induction.naming import plural

DOCS = Path(__file__).resolve().parent.parent / "docs"


def paragraphs(text: str):
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_a_table_ranked_by_another_measure_says_it_is_not_the_default():
    default = MEASURE_NAMES[DEFAULT_MEASURE]
    for paragraph in paragraphs((DOCS / "change.md").read_text(encoding="utf-8")):
        for measure in re.findall(r"[Rr]anked by ([A-Z][A-Za-z-]*)", paragraph):
            if measure != default:
                assert f"not by today's default, {default}" in " ".join(paragraph.split()), paragraph


def test_the_pattern_help_describes_the_pattern_the_docs_describe():
    from spacy_elmo.cli.induce import PATTERN_OPT

    help_text = PATTERN_OPT.help
    docs = " ".join((DOCS / "senses.md").read_text(encoding="utf-8").split())
    quoted = re.findall(r"'([^']*WORD[^']*)'", help_text)
    assert len(quoted) == 3, help_text  # what the biLM reads, and what each direction predicts
    for pattern in quoted:
        assert pattern.replace("WORD", "and") in docs, pattern
    assert "`--pattern WORD`" in docs and "none" in help_text


def test_counts_read_one_sense():
    assert plural(1, "sense") == "1 sense" and plural(2, "sense") == "2 senses" and plural(0, "pair") == "0 pairs"
    assert plural(1200, "occurrence") == "1,200 occurrences"


def test_explore_says_one_sense(tmp_path, capsys):
    """The explore command on saved senses of one sense (no model needed)."""
    from spacy_elmo.cli.main import main
    from spacy_elmo.induction.induced import save_word_senses

    from .explore_data import synthetic

    ws = synthetic((8,), dim=8)
    save_word_senses(ws, tmp_path / "bank")
    assert main(["explore", str(tmp_path / "bank.json"), str(tmp_path / "bank.html")]) == 0
    out = capsys.readouterr().out
    assert "8 occurrences of 'bank', 1 sense," in out and "1 senses" not in out
