"""One vocabulary reader: every part of the package reads a vocabulary file the same way."""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch

from spacy_elmo.bilm.errors import WeightsError
from spacy_elmo.hub.lm_head import read_native_head
from spacy_elmo.induction.substitutes import HeadError, native_head
from spacy_elmo.training.corpus import read_vocab
from spacy_elmo.vocabulary import VocabularyError, read_vocabulary

SPECIALS = ["<S>", "</S>", "<UNK>"]


def head_folder(tmp_path: Path, text: str, rows: int) -> Path:
    """A native head (softmax.pt with ``rows`` rows) whose vocab.txt holds ``text``."""
    folder = tmp_path / "head"
    folder.mkdir()
    torch.save({"weight": torch.zeros(rows, 4), "bias": torch.zeros(rows)}, folder / "softmax.pt")
    (folder / "vocab.txt").write_bytes(text.encode("utf-8"))
    return folder


def every_reader(folder: Path) -> List[List[str]]:
    return [read_native_head(folder).vocab, native_head(folder).vocab, read_vocab(folder / "vocab.txt")[0]]


@pytest.mark.parametrize("odd", ["\u2028", "\x85", "\x0b", "\x1c", "\r"], ids=["U+2028", "NEL", "VT", "FS", "CR"])
def test_a_token_holding_a_line_breaking_character_reads_the_same_everywhere(tmp_path, odd):
    """Before: splitlines() in the senses' reader (and universal newlines in training's) cut such a
    token in two, so a head the LM-head loader accepted was refused there (rows do not match)."""
    tokens = SPECIALS + ["bank", f"a{odd}b", "river"]
    folder = head_folder(tmp_path, "".join(f"{t}\t{i}\n" for i, t in enumerate(tokens)), len(tokens))
    assert every_reader(folder) == [tokens, tokens, tokens]
    assert read_vocabulary(folder / "vocab.txt").counts == list(range(len(tokens)))


def test_an_empty_line_is_refused_everywhere_with_the_same_message(tmp_path):
    """Before: the LM-head loader counted an empty line as a token and the others skipped it."""
    folder = head_folder(tmp_path, "<S>\n</S>\n<UNK>\n\nriver\n", 5)
    errors = []
    for read, kind in ((read_native_head, WeightsError), (native_head, HeadError), (lambda f: read_vocab(f / "vocab.txt"), ValueError)):
        with pytest.raises(kind, match=r"vocab\.txt, line 4: no token \(an empty line\)") as info:
            read(folder)
        errors.append(str(info.value))
    assert len(set(errors)) == 1


def test_the_format(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("<S>\n</S>\t7\n<UNK>".encode("utf-8"))  # no final newline; a count is optional per line
    assert read_vocabulary(path) == (SPECIALS, [0, 7, 0])
    cases = {
        b"<S>\n</S>\n<S>\n": r"line 3: '<S>' is duplicated \(first on line 1\)",
        b"<S>\n</S>\tmany\n": r"line 2: the count 'many' of '</S>' is not a whole number",
        b"<S>\n</S>\t\n": r"line 2: the count '' of '</S>' is not a whole number",
        b"<S>\n</S>\n\xff\xfe\n": r"line 3: not UTF-8 text",
        b"\n": r"line 1: no token",
    }
    for data, message in cases.items():
        path.write_bytes(data)
        with pytest.raises(VocabularyError, match=message):
            read_vocabulary(path)
    path.write_bytes(b"")
    assert read_vocabulary(path) == ([], [])
