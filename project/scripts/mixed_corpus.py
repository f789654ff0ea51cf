"""The default model's mixed training text: modern English plus cleaned books, as one input folder.

``prepare`` reads the folder this script writes (files + ``manifest.tsv``), so the biLM's corpus
and vocabulary come from one command. Two sources:

- **modern English** (``modern``): paragraph-per-line files ``NAME.{train,valid,test}.txt[.gz]``
  (Wikipedia, Wikinews, ...); copied as they are, the split taken from the file name;
- **books** (``books``): Project Gutenberg plain texts in the layout of the project's assets
  (``manifest.tsv`` with ``file`` and ``split``), *cleaned* of what a language model should not
  learn: ``[Illustration]`` and footnote blocks, chapter / book / volume / part headings, Roman
  numerals and page markers on their own, title pages and tables of contents (paragraphs that are
  mostly capitals, centred or too short to be prose), ``_italics_`` markers; hard-wrapped lines
  rejoined into one paragraph per line, and ``--`` dashes spaced out so that ``follows:--`` does
  not become a word.

Run from the project folder::

    python scripts/mixed_corpus.py write OUT_DIR --modern MODERN_DIR --books BOOKS_DIR [--extra EXTRA_DIR]
    python scripts/mixed_corpus.py test-only MODERN_DIR OUT_DIR     # the modern test split alone

``stats.json`` in ``OUT_DIR`` counts, per source and split, the paragraphs kept and dropped (by
reason) and the words kept, so nothing is dropped silently.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import srsly

SPLITS = ("train", "valid", "test")
MIN_WORDS = 6  # the modern text's own rule: shorter paragraphs are headings and list stubs, unless a sentence

_ROMAN = r"[IVXLCDM]+"
_HEADING = re.compile(
    rf"^(?:(?:chapter|book|volume|vol|part|section|canto|act|scene|letter|stave|appendix|preface|introduction|contents|epilogue|prologue)\b[\s.:]*(?:{_ROMAN}|\d+|[a-z]+)?\b[\s.:]*|{_ROMAN}\.?|\d+\.?|page \d+)$",
    re.IGNORECASE,
)
_BRACKETED = re.compile(r"\[(?:Illustration|Footnote|Sidenote|Transcriber|Note|Pg|Page)[^\]]*\]", re.IGNORECASE)
_FOOTNOTE_MARK = re.compile(r"\[(?:\d+|[A-Z]|\*)\]")
_ITALICS = re.compile(r"(?<!\w)_(?=\S)|(?<=\S)_(?!\w)")
_DASHES = re.compile(r"-{2,}")
_SPACES = re.compile(r"\s+")
_ENDS_SENTENCE = re.compile(r"[a-z][.!?]['\"’”)]*$")  # short dialogue ("It is Jane Eyre, sir.") is prose


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def book_paragraphs(path: Path) -> Iterator[List[str]]:
    """A book's raw paragraphs (blank-line separated), as lists of their lines."""
    block: List[str] = []
    with _open_text(path) as fh:
        for line in fh:
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                block.append(line)
            elif block:
                yield block
                block = []
    if block:
        yield block


def clean_paragraph(lines: List[str]) -> Tuple[Optional[str], str]:
    """One book paragraph as a single cleaned line, or ``(None, reason)`` when it is not prose."""
    raw = " ".join(line.strip() for line in lines)
    if raw.lstrip().startswith("[") and raw.rstrip().endswith("]"):
        return None, "bracketed"
    if _HEADING.match(raw.strip()):
        return None, "heading"
    indented = sum(1 for line in lines if len(line) - len(line.lstrip()) >= 4)
    if indented * 2 > len(lines) and len(lines) > 1:
        return None, "centred"
    text = _BRACKETED.sub(" ", raw)
    text = _FOOTNOTE_MARK.sub("", text)
    text = _ITALICS.sub("", text)
    text = _DASHES.sub(" -- ", text)
    text = _SPACES.sub(" ", text).strip()
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None, "no_letters"
    if sum(c.isupper() for c in letters) > 0.5 * len(letters):
        return None, "capitals"
    if len(text.split()) < MIN_WORDS and not _ENDS_SENTENCE.search(text):
        return None, "short"
    return text, "kept"


def _book_files(books: Path) -> List[Tuple[str, str]]:
    with (books / "manifest.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or "file" not in rows[0] or "split" not in rows[0]:
        raise SystemExit(f"{books / 'manifest.tsv'} needs 'file' and 'split' columns")
    return [(row["file"], "valid" if row["split"] == "dev" else row["split"]) for row in rows]


def write_books(books: Path, out: Path, stats: Dict[str, Dict[str, int]]) -> List[Tuple[str, str]]:
    """Cleaned books, one ``books.SPLIT.txt.gz`` per split; returns the manifest rows."""
    handles = {split: gzip.open(out / f"books.{split}.txt.gz", "wt", encoding="utf-8", compresslevel=3) for split in SPLITS}
    try:
        for name, split in _book_files(books):
            if split not in SPLITS:
                raise SystemExit(f"{books / 'manifest.tsv'}: unknown split {split!r} for {name}")
            counts = stats.setdefault(f"books/{split}", Counter())  # type: ignore[arg-type]
            for lines in book_paragraphs(books / name):
                text, reason = clean_paragraph(lines)
                counts[reason] += 1
                if text is not None:
                    counts["words"] += len(text.split())
                    handles[split].write(text + "\n")
    finally:
        for fh in handles.values():
            fh.close()
    return [(f"books.{split}.txt.gz", split) for split in SPLITS]


def copy_modern(modern: Path, out: Path, stats: Dict[str, Dict[str, int]]) -> List[Tuple[str, str]]:
    """The modern text's files, split taken from ``NAME.SPLIT.txt[.gz]``."""
    rows = []
    for path in sorted(modern.iterdir()):
        parts = path.name.split(".")
        if len(parts) < 3 or parts[1] not in SPLITS or parts[2] != "txt":
            continue
        shutil.copyfile(path, out / path.name)
        with _open_text(path) as fh:
            words = sum(len(line.split()) for line in fh)
        stats.setdefault(f"modern/{parts[1]}", Counter())["words"] += words  # type: ignore[arg-type]
        rows.append((path.name, parts[1]))
    if not rows:
        raise SystemExit(f"{modern}: no NAME.train.txt(.gz) / NAME.valid.txt(.gz) / NAME.test.txt(.gz) files")
    return rows


def copy_extra(extra: Path, out: Path) -> List[Tuple[str, str]]:
    """An extra input folder with its own ``manifest.tsv`` (e.g. ``extra_text.py write``'s)."""
    rows = []
    for name, split in _book_files(extra):
        target = f"extra-{Path(name).name}"
        shutil.copyfile(extra / name, out / target)
        rows.append((target, split))
    return rows


def write_mixed(modern: Path, books: Path, out: Path, extra: Optional[Path] = None) -> Dict[str, Dict[str, int]]:
    """Writes the mixed input folder and its ``stats.json``; returns the stats."""
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty: remove it or choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    stats: Dict[str, Dict[str, int]] = {}
    rows = copy_modern(modern, out, stats) + write_books(books, out, stats)
    if extra is not None:
        rows += copy_extra(extra, out)
    with (out / "manifest.tsv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["file", "split"])
        writer.writerows(rows)
    result = {key: dict(value) for key, value in stats.items()}
    srsly.write_json(out / "stats.json", result)
    return result


def write_test_only(modern: Path, out: Path) -> List[Tuple[str, str]]:
    """The modern text's test files alone, as an input folder for ``prepare`` (perplexity on them).

    ``prepare`` needs training text to build a vocabulary; the valid files stand in as that (the
    vocabulary is unused: ``evaluate`` scores with the model's own)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in sorted(modern.iterdir()):
        parts = path.name.split(".")
        if len(parts) >= 3 and parts[2] == "txt" and parts[1] in ("test", "valid"):
            shutil.copyfile(path, out / path.name)
            rows.append((path.name, "test" if parts[1] == "test" else "train"))
    if not any(split == "test" for _, split in rows):
        raise SystemExit(f"{modern}: no NAME.test.txt(.gz) files")
    with (out / "manifest.tsv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["file", "split"])
        writer.writerows(rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write the mixed input folder")
    write.add_argument("out", type=Path)
    write.add_argument("--modern", type=Path, required=True, help="folder of NAME.SPLIT.txt(.gz) files")
    write.add_argument("--books", type=Path, required=True, help="books folder with manifest.tsv")
    write.add_argument("--extra", type=Path, default=None, help="extra folder with manifest.tsv")
    test_only = sub.add_parser("test-only", help="the modern text's test files alone (for their perplexity)")
    test_only.add_argument("modern", type=Path)
    test_only.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "test-only":
        print(f"{len(write_test_only(args.modern, args.out))} files in {args.out}")
        return
    stats = write_mixed(args.modern, args.books, args.out, args.extra)
    for key, counts in sorted(stats.items()):
        print(key, " ".join(f"{k}={v:,}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
