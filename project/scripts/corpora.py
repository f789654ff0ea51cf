#!/usr/bin/env python3
"""The `full` workflow's corpora from their downloads: the layout ``python -m spacy_elmo prepare`` reads.

    python scripts/corpora.py gutenberg assets/downloads/gutenberg assets/data/gutenberg_en_books
    python scripts/corpora.py craft assets/downloads/craft assets/data/craft_biomed_fulltext

Each writes ``OUT/<books|articles>/<name>.txt.gz`` (gzip, mtime 0) and ``OUT/manifest.tsv`` (``file``
and ``split`` columns, from ``assets/manifests/``), and compares every text with the SHA-256 of the
one the README's figures were measured on. A CRAFT article that differs is an error (the source is
pinned); a Gutenberg book that differs is reported by number (Project Gutenberg revises its files in
place, so a fresh download may not be the text we used), and the conversion goes on.

Gutenberg: the text strictly between the line that opens ``*** START OF`` and the first line that
opens ``*** END OF`` or ``End of (the) Project Gutenberg``; a BOM dropped, CRLF made LF; when the
first non-blank line opens "Produced by", that line and the blank lines after it are dropped;
trailing newlines become one. Otherwise the text is untouched.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

MANIFESTS = Path(__file__).resolve().parent.parent / "assets" / "manifests"
FETCH = "run `spacy project assets project/` first, or point --vars.data_root at a local copy"
_START = re.compile(r"^\*\*\* ?START OF", re.IGNORECASE)
_END = re.compile(r"^(\*\*\* ?END OF|End of (the )?Project Gutenberg)", re.IGNORECASE)


class CorpusError(ValueError):
    """A download that is missing or cannot be converted; the message is one line."""


def strip_gutenberg(raw: bytes, name: str = "book") -> str:
    """The body of a Project Gutenberg plain-text file (see the module docstring for the rule)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{name} is not UTF-8 text (byte {exc.start}); download the UTF-8 plain-text file") from None
    lines = text.replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if _START.match(line)), None)
    if start is None:
        raise CorpusError(f"{name} has no '*** START OF' line: not a Project Gutenberg plain-text file")
    end = next((i for i in range(start + 1, len(lines)) if _END.match(lines[i])), None)
    if end is None:
        raise CorpusError(f"{name} has no '*** END OF' line after its start: the download is cut short")
    body = lines[start + 1 : end]
    first = next((i for i, line in enumerate(body) if line.strip()), None)
    if first is not None and body[first].startswith("Produced by"):
        rest = first + 1
        while rest < len(body) and not body[rest].strip():
            rest += 1
        body = body[rest:]
    return "\n".join(body).rstrip("\n") + "\n"


def _manifest(path: Path) -> Tuple[List[str], List[Dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        return list(reader.fieldnames or []), list(reader)


def _write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out:
        out.write(data)
    tmp.replace(path)


def _write_manifest(out: Path, fields: List[str], rows: List[Dict[str, str]]) -> None:
    with open(out / "manifest.tsv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise CorpusError(f"{path} is missing; {FETCH}")
    return path.read_bytes()


def gutenberg(downloads: Path, out: Path, manifest: Path = MANIFESTS / "gutenberg_en_books.tsv") -> List[str]:
    """Convert every book of the manifest; return the eBook numbers whose text differs from ours."""
    fields, rows = _manifest(manifest)
    differ = []
    for row in rows:
        number = row["pg_ebook"]
        data = strip_gutenberg(_read(downloads / f"pg{number}.txt"), f"pg{number}.txt").encode("utf-8")
        if hashlib.sha256(data).hexdigest() != row["sha256"]:
            differ.append(number)
        _write_gz(out / row["file"], data)
    _write_manifest(out, fields, rows)
    return differ


def craft(downloads: Path, out: Path, manifest: Path = MANIFESTS / "craft_biomed_fulltext.tsv") -> None:
    """Copy every article (gzipped) and its copyright notice; a text that differs is an error."""
    fields, rows = _manifest(manifest)
    for row in rows:
        pmid = row["pmid"]
        text, notice = _read(downloads / f"{pmid}.txt"), _read(downloads / f"{pmid}.copyright")
        for what, data, expected in (("text", text, row["sha256"]), ("copyright notice", notice, row["copyright_sha256"])):
            if hashlib.sha256(data).hexdigest() != expected:
                raise CorpusError(f"CRAFT {pmid}: the {what} differs from the pinned commit (SHA-256); delete it and fetch again")
        _write_gz(out / row["file"], text)
        (out / row["copyright_file"]).write_bytes(notice)
    (out / "LICENSE.txt").write_bytes(_read(downloads / "LICENSE.txt"))
    _write_manifest(out, fields, rows)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=["gutenberg", "craft"])
    parser.add_argument("downloads", type=Path, help="the folder `spacy project assets` downloaded into")
    parser.add_argument("out", type=Path, help="the corpus folder to write")
    parser.add_argument("--manifest", type=Path, help="the books or articles to convert (default: assets/manifests/)")
    args = parser.parse_args(argv)
    names = {"gutenberg": "gutenberg_en_books.tsv", "craft": "craft_biomed_fulltext.tsv"}
    manifest = args.manifest or MANIFESTS / names[args.corpus]
    try:
        if args.corpus == "craft":
            craft(args.downloads, args.out, manifest)
            print(f"craft: {args.out} written; every article identical to the pinned commit")
            return 0
        differ = gutenberg(args.downloads, args.out, manifest)
    except CorpusError as exc:
        print(f"{args.corpus}: {exc}", file=sys.stderr)
        return 1
    total = len(_manifest(manifest)[1])
    print(f"gutenberg: {args.out} written; {total - len(differ)} of {total} books identical to the text our figures used")
    if differ:
        print(f"gutenberg: Project Gutenberg has revised {len(differ)} since (eBooks {' '.join(differ)}); figures on them may move slightly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
