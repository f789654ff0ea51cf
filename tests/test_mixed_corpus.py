"""The default model's mixed corpus: books cleaned of what a language model should not learn."""

import gzip

import pytest
from mixed_corpus import clean_paragraph, write_mixed

from spacy_elmo.training import prepare_corpus

BOOK = """                              CONTENTS

     CHAPTER I.     The River
     CHAPTER II.    The Bank

[Illustration: The old mill]

CHAPTER I.

THE RIVER

It was a fine morning when the miller walked down to the bank of the
river, and he thought of his debts--all of them--as he went.

"Did he teach you nothing?"

II

She read it as _follows:--_ the bank would lend no more money to the
mill[1], and the miller must sell his horse.

VOL. II.

The end of the story is a happy one, for the river rose and the mill turned.
"""


def write_sources(root):
    books = root / "books"
    (books / "b").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        with gzip.open(books / "b" / f"{split}.txt.gz", "wt", encoding="utf-8") as fh:
            fh.write(BOOK)
    (books / "manifest.tsv").write_text("file\tsplit\nb/train.txt.gz\ttrain\nb/valid.txt.gz\tdev\nb/test.txt.gz\ttest\n")
    modern = root / "modern"
    modern.mkdir()
    for split in ("train", "valid", "test"):
        with gzip.open(modern / f"news.{split}.txt.gz", "wt", encoding="utf-8") as fh:
            fh.write("The central bank raised interest rates on Tuesday, the third rise this year.\n" * 3)
    (modern / "README.md").write_text("not a corpus file")
    return modern, books


def test_books_lose_headings_contents_and_markup_but_keep_prose_and_dialogue(tmp_path):
    modern, books = write_sources(tmp_path)
    out = tmp_path / "mixed"
    stats = write_mixed(modern, books, out)
    with gzip.open(out / "books.train.txt.gz", "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert lines == [
        "It was a fine morning when the miller walked down to the bank of the river, and he thought of his debts -- all of them -- as he went.",
        '"Did he teach you nothing?"',
        "She read it as follows: -- the bank would lend no more money to the mill, and the miller must sell his horse.",
        "The end of the story is a happy one, for the river rose and the mill turned.",
    ]
    counts = stats["books/train"]
    assert counts["kept"] == 4 and counts["heading"] == 4 and counts["bracketed"] == 1 and counts["centred"] == 1
    assert counts["capitals"] == 1 and counts["words"] == sum(len(x.split()) for x in lines)
    assert stats["modern/train"]["words"] == 3 * 13
    manifest = (out / "manifest.tsv").read_text().splitlines()
    assert manifest[0] == "file\tsplit" and "news.train.txt.gz\ttrain" in manifest and "books.valid.txt.gz\tvalid" in manifest
    corpus = prepare_corpus([out], tmp_path / "corpus", min_count=1)
    vocab = (tmp_path / "corpus" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    tokens = {line.split("\t")[0] for line in vocab if line}
    assert not tokens & {"follows:--", "II", "CHAPTER", "VOL", "_follows", "[1]", "Illustration"}
    assert corpus is not None


@pytest.mark.parametrize(
    "raw,reason",
    [
        ("CHAPTER XVII", "heading"),
        ("Chapter 3.", "heading"),
        ("XIV.", "heading"),
        ("BOOK EIGHT: 1811 - 12", "capitals"),
        ("*****", "no_letters"),
        ("[Illustration]", "bracketed"),
        ("See the table below for", "short"),
    ],
)
def test_non_prose_paragraphs_are_dropped_with_their_reason(raw, reason):
    assert clean_paragraph([raw]) == (None, reason)


def test_an_existing_output_folder_is_refused(tmp_path):
    modern, books = write_sources(tmp_path)
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "keep.txt").write_text("user data")
    with pytest.raises(SystemExit, match="not empty"):
        write_mixed(modern, books, tmp_path / "mixed")
    assert (tmp_path / "mixed" / "keep.txt").read_text() == "user data"
