"""What the corpus commands (induce, explore, change) make of hostile or broken input: a corrupt or
truncated ``.gz`` corpus is one line and exit 2 in each; corpus text reaches the terminal without
its control characters; an empty corpus is named as empty and nothing is written."""

from __future__ import annotations

import gzip

import pytest
import torch

from spacy_elmo.cli._util import msg, printable
from spacy_elmo.cli.main import main

SENTENCES = [
    "He sat down on the bank of the river and watched the water.",
    "She put all her money in the bank.",
    "The bank refused to lend him money.",
    "Flowers grew along the bank of the stream.",
] * 5
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"  # retitle the window, clear the screen, a C1 CSI, a bidi override


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def gz_corpus(tmp_path, damage: str):
    """A .txt.gz corpus, damaged: ``truncated`` (its end cut off) or ``corrupt`` (bytes flipped inside its stream)."""
    data = bytearray(gzip.compress(("\n".join(SENTENCES * 20) + "\n").encode("utf-8")))
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    else:
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
    path = tmp_path / f"{damage}.txt.gz"
    path.write_bytes(bytes(data))
    return path


def one_line_error(capsys, code, name):
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith(("✘", "Error", "Traceback"))]  # not progress lines
    assert code == 2, captured
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
@pytest.mark.parametrize("command", ["induce", "explore", "change"])
def test_a_damaged_gz_corpus_is_one_line_and_exit_2(tmp_path, capsys, command, damage):
    bad = gz_corpus(tmp_path, damage)
    good = tmp_path / "good.txt"
    good.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = {
        "induce": ["induce", str(bad), "--words", "bank", "--out", str(out)],
        "explore": ["explore", str(bad), "--word", "bank", str(tmp_path / "bank.html")],
        "change": ["change", str(good), str(bad), "--words", "bank", "--out", str(out), "--no-pages"],
    }[command]
    line = one_line_error(capsys, main(argv), bad.name)
    assert "gzip" in line and "damaged" in line
    assert not out.exists() and not (tmp_path / "bank.html").exists()


def test_printable_strips_what_a_terminal_acts_on():
    assert printable(f"the bank{ESCAPES} of\tthe\nriver\x00\x7f") == "the bank]0;pwned[2J31m of\tthe\nriver"
    assert printable("café – naïve “bank” 银行") == "café – naïve “bank” 银行"  # text outside the controls stays


def test_every_message_is_printable(capsys):
    msg.text(f"a{ESCAPES}b")
    msg.info(f"c{ESCAPES}d")
    msg.warn(f"e{ESCAPES}f")
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), repr(text)


def hostile_corpus(tmp_path, name="hostile.txt"):
    path = tmp_path / name
    lines = [f"{sentence[:-1]} {ESCAPES}." for sentence in SENTENCES]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_induce_prints_corpus_text_without_its_control_characters(tmp_path, capsys):
    corpus = hostile_corpus(tmp_path)
    args = ["induce", str(corpus), "--words", "bank", "--out", str(tmp_path / "out"), "--min-occurrences", "4", "--n-senses", "2"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "bank" in captured.out and "]0;pwned" in captured.out  # the sentence is printed ...
    for text in (captured.out, captured.err):
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), repr(text)  # ... without what the terminal would act on


def test_change_prints_corpus_text_without_its_control_characters(tmp_path, capsys):
    a = hostile_corpus(tmp_path, "a.txt")
    b = hostile_corpus(tmp_path, "b.txt")
    args = ["change", str(a), str(b), "--words", "bank", "--out", str(tmp_path / "out"), "--no-pages", "--min-occurrences", "5"]
    assert main(args + ["--resamples", "5", "--max-senses", "2"]) == 0
    captured = capsys.readouterr()
    assert "]0;pwned" in captured.out  # the example sentences are printed ...
    for text in (captured.out, captured.err):
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), repr(text)  # ... as text


@pytest.mark.parametrize("empty", ["A", "B"])
def test_change_names_an_empty_corpus_and_writes_nothing(tmp_path, capsys, empty):
    full = tmp_path / "full.txt"
    full.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    a, b = (blank, full) if empty == "A" else (full, blank)
    out = tmp_path / "out"
    line = one_line_error(capsys, main(["change", str(a), str(b), "--words", "bank", "--out", str(out)]), "blank.txt")
    assert f"corpus {empty} (" in line and "is empty" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["blank.txt", "full.txt"]


def test_change_refuses_a_file_as_its_out_folder(tmp_path, capsys):
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    out.write_text("mine\n", encoding="utf-8")
    line = one_line_error(capsys, main(["change", str(corpus), str(corpus), "--words", "bank", "--out", str(out)]), "out.txt")
    assert "is a file" in line and out.read_text(encoding="utf-8") == "mine\n"
