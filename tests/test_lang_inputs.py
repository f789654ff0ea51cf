"""Language inputs: ``--lang`` normalised to the language class's own code (``eng`` is ``en``, so
English forms such as "mice" are matched); every failed lookup is one line; a zero-width
(non-)joiner inside a word is part of it (Persian کتاب‌ها); a target word of several characters in
a language written without spaces (Chinese: one token per character) is matched on its run of tokens."""
from __future__ import annotations

import pytest
import torch

from spacy_elmo.induction.corpus import read_sentences
from spacy_elmo.induction.forms import target_forms
from spacy_elmo.induction.induce import InductionSettings, induce
from spacy_elmo.lang import LanguageError, check_language, language

from .test_languages import run


def test_an_iso_639_3_code_is_the_language_class_own_code():
    # before: --lang eng read English text as a language "eng" that was not English: no "mice" for "mouse"
    assert check_language("eng") == "en" and language("eng").code == "en" and language("eng").english
    assert target_forms({"mouse": []}, "eng")["mice"] == "mouse"


@pytest.mark.parametrize("code", ["en.stop_words", "en/../de", "qq"])
def test_every_failed_lookup_is_one_line(capsys, tmp_path, code):
    with pytest.raises(LanguageError, match="unknown language code"):
        language(code)
    text = tmp_path / "a.txt"
    text.write_text("A line.\n", encoding="utf-8")
    status, out, err = run(capsys, "prepare", text, "--out-dir", tmp_path / "prep", "--lang", code)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "unknown language code" in lines[0] and "Traceback" not in out + err


def test_a_zero_width_non_joiner_inside_a_word_is_part_of_it():
    # before: کتاب‌ها (book + plural, joined by U+200C) was cut into کتاب and ها
    persian = language("fa")
    assert persian.words("این کتاب\u200cها خوب است") == ["این", "کتاب\u200cها", "خوب", "است"]
    assert persian.is_word("کتاب\u200cها") and not persian.is_word("\u200cها") and not persian.is_word("کتاب\u200c")
    assert language("hi").words("क्\u200dष") == ["क्\u200dष"]  # a joiner between a virama and a letter


def test_a_chinese_target_of_two_characters_matches_its_run_of_tokens():
    from spacy_elmo.induction.forms import join_runs

    (sentence,) = read_sentences(["我去银行取钱"], lang="zh")
    assert sentence.tokens == ["我", "去", "银", "行", "取", "钱"]
    joined = join_runs(sentence, target_forms({"银行": []}, "zh"), "zh")
    assert joined.tokens == ["我", "去", "银行", "取", "钱"] and joined.spans[2] == (2, 4)
    assert join_runs(sentence, target_forms({"银行": []}, "de"), "de") is sentence  # written with spaces: as it was


def test_induce_finds_a_chinese_word_of_two_characters():
    # before: "'银行': no occurrences in the corpus", the tokens being single characters
    torch.set_num_threads(1)
    corpus = ["我去银行取钱。", "银行在河边。", "他在银行工作。", "河边有一家银行。"]
    settings = InductionSettings(representation="vectors", lang="zh", max_senses=2, min_occurrences=2)
    (result,) = induce(corpus, ["银行"], settings=settings, progress=False)  # the embedded model and its head
    assert len(result.occurrences) == 4
    assert {o.text[o.start : o.end] for o in result.occurrences} == {"银行"}


def test_change_samples_a_chinese_word_of_two_characters():
    from spacy_elmo.change.detect import sample_corpora

    corpus = ["我去银行取钱。", "银行在河边。", "他在银行工作。"]
    samples = sample_corpora([corpus, corpus[:1]], {"银行": []}, limit=10, seed=0, progress=False, lang="zh")
    assert len(samples.items(0, "银行")) == 3 and len(samples.items(1, "银行")) == 1
