"""The forms of a target word: irregular ones found (mouse -> mice, go -> went, woman -> women), forms
that are words of their own named instead of matched (find -> found), and the commands saying which
forms they matched and how to add more."""

from __future__ import annotations

import json

import pytest
import torch

from spacy_elmo.cli.main import main
from spacy_elmo.induction.forms import TABLE, forms_hint, irregular_forms, shared_forms, target_forms
from spacy_elmo.induction.induce import match_target

MICE = [
    "A mouse ran across the kitchen floor.",
    "The cat caught a mouse in the barn.",
    "Two mice lived behind the old stove.",
    "The mice ate the cheese in the night.",
    "Click the mouse to open the file.",
    "Mice are small rodents with long tails.",
] * 2


def test_irregular_forms_are_matched():
    assert irregular_forms("mouse") == ["mice"] and "went" in irregular_forms("go") and "children" in irregular_forms("child")
    assert "women" in irregular_forms("woman")  # WordNet's -man -> -men rule
    forms = target_forms({"mouse": [], "go": [], "bank": []})
    assert match_target("mice", forms) == "mouse" and match_target("Mice", forms) == "mouse" and match_target("went", forms) == "go"
    assert match_target("banks", forms) == "bank" and match_target("mouses", forms) == "mouse"


def test_forms_that_are_words_of_their_own_are_named_not_matched():
    assert "found" in shared_forms("find") and "found" not in irregular_forms("find")
    assert match_target("found", target_forms({"find": []})) is None
    assert match_target("found", target_forms({"find": ["found"]})) == "find"  # listed: matched
    assert match_target("saw", target_forms({"see": [], "saw": []})) == "saw"  # a target keeps its own word
    hint = forms_hint(["find", "mouse"])
    assert "--words find=FORM/FORM" in hint and "find: found" in hint


def test_the_table_carries_its_source_and_licence():
    head = [line for line in TABLE.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any("WordNet 3.0 Copyright 2006 by Princeton University" in line for line in head)


def test_the_table_is_what_the_script_writes():
    pytest.importorskip("spacy_lookups_data", reason="regenerating the table needs spacy-lookups-data")
    import irregular_forms as script  # project/scripts

    assert script.render(script.irregular_forms()) == TABLE.read_text(encoding="utf-8")


def test_induce_finds_mice_for_mouse_and_says_which_forms(tmp_path, capsys):
    torch.set_num_threads(1)
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(MICE) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["induce", str(corpus), "--words", "mouse", "--out", str(out), "--min-occurrences", "4", "--n-senses", "1"]) == 0
    printed = capsys.readouterr().out
    assert "'mouse': forms matched: mice 6, mouse 6" in printed, printed
    assert "--words mouse=FORM/FORM" in printed
    saved = json.loads((out / "mouse.json").read_text(encoding="utf-8"))
    assert len(saved["occurrences"]) == 12 and "mice" in saved["forms"]


def test_change_finds_mice_for_mouse(tmp_path, capsys):
    torch.set_num_threads(1)
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(MICE) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["change", str(corpus), str(corpus), "--words", "mouse", "--out", str(out), "--no-pages", "--min-occurrences", "5"]
    assert main(args + ["--resamples", "5", "--max-senses", "2"]) == 0
    printed = capsys.readouterr().out
    assert "'mouse': forms matched: mice 12, mouse 12" in printed, printed  # both corpora's samples
    assert "(1 word measured," in printed
    (word,) = json.loads((out / "report.json").read_text(encoding="utf-8"))["words"]
    assert word["seen"] == {"a": 12, "b": 12}
