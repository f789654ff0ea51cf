"""Reading the corpus: which files, one pass to check and fingerprint them, then chunks of lines.

Lines are split on ``\\n`` only (bytes), decoded as UTF-8 and stripped, exactly the same way in
the checking pass and the embedding pass, so that line numbers always agree. A folder means every
``.txt`` and ``.txt.gz`` file under it, in sorted order of relative path; line numbers run on
across files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Container, Iterator, List, Sequence, Tuple

from ..gzipped import open_read

SUFFIXES = (".txt", ".txt.gz")


class CorpusError(ValueError):
    """A problem with the input or output of a corpus run, reported to the user in one line."""


def input_files(path: Path) -> List[Path]:
    """The text files of ``path``: itself if a file, else its ``.txt``/``.txt.gz`` files, sorted."""
    if not path.exists():
        raise CorpusError(
            f"input not found: {path}. Pass a text file or a folder of .txt/.txt.gz files, one sentence or document per line."
        )
    if path.is_file():
        return [path]
    files = sorted((p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES)), key=lambda p: p.relative_to(path).as_posix())
    if not files:
        raise CorpusError(f"input folder {path} has no .txt or .txt.gz files: put the text there, one sentence or document per line.")
    return files


def iter_raw_lines(files: List[Path]) -> Iterator[Tuple[Path, int, bytes]]:
    """``(file, line number within the file, raw bytes)`` for every line of every file."""
    for path in files:
        with open_read(path, "rb") as handle:
            for number, raw in enumerate(handle):
                yield path, number, raw


def decode(path: Path, number: int, raw: bytes) -> str:
    """A line's text: UTF-8, surrounding whitespace stripped (as ``allennlp elmo`` does)."""
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}, line {number + 1}: not UTF-8 ({err.reason} at byte {err.start}); convert the file to UTF-8.") from None


@dataclass
class Scan:
    """What the checking pass found: sizes, and a content fingerprint for resuming safely."""

    files: List[str]
    n_lines: int = 0
    n_empty: int = 0
    n_tokens: int = 0  # tokens as the run's tokenizer splits them
    longest: int = 0
    sha256: str = ""
    empty_examples: List[str] = field(default_factory=list)


def scan_input(files: List[Path], max_line_tokens: int, skip_empty: bool, tokenize: Callable[[str], Sequence[str]] = str.split) -> Scan:
    """Read every line once: count lines and tokens (with ``tokenize``, the tokenizer the run will
    use), hash the bytes, and reject empty lines (unless ``skip_empty``) and lines over
    ``max_line_tokens`` before any embedding starts and before anything is written."""
    scan = Scan(files=[str(p) for p in files])
    digest = hashlib.sha256()
    for path, number, raw in iter_raw_lines(files):
        digest.update(raw if raw.endswith(b"\n") else raw + b"\n")
        text = decode(path, number, raw)
        n = len(tokenize(text)) if text else 0
        if n == 0:
            if not skip_empty:
                raise CorpusError(
                    f"{path}, line {number + 1} (corpus line {scan.n_lines}) is empty: AllenNLP's format has one entry per "
                    f"line; remove blank lines, or pass --skip-empty to leave them out (line numbers still count them)."
                )
            scan.n_empty += 1
        if n > max_line_tokens:
            raise CorpusError(
                f"{path}, line {number + 1} (corpus line {scan.n_lines}) has {n:,} tokens, more than --max-line-tokens "
                f"{max_line_tokens:,}: split the line, or raise the limit (memory grows with the longest line)."
            )
        scan.n_lines += 1
        scan.n_tokens += n
        scan.longest = max(scan.longest, n)
    if scan.n_lines == scan.n_empty:
        what = "has no lines" if scan.n_lines == 0 else "has only empty lines"
        raise CorpusError(f"the input {what} ({', '.join(scan.files[:3])}{' ...' if len(files) > 3 else ''}): nothing to embed.")
    scan.sha256 = digest.hexdigest()
    return scan


@dataclass
class Chunk:
    """``texts[i]`` is corpus line ``first_line + i`` (stripped; may be empty)."""

    index: int
    first_line: int
    texts: List[str]


def iter_chunks(files: List[Path], chunk_lines: int, done: Container[int] = ()) -> Iterator[Chunk]:
    """The corpus in chunks of ``chunk_lines`` consecutive lines (the last may be shorter);
    chunks whose index is in ``done`` are read past without decoding or yielding them."""
    texts: List[str] = []
    index = first = 0
    for line, (path, number, raw) in enumerate(iter_raw_lines(files)):
        if line and line % chunk_lines == 0:
            if index not in done:
                yield Chunk(index, first, texts)
            texts, index, first = [], index + 1, line
        if index not in done:
            texts.append(decode(path, number, raw))
    if texts:  # the last chunk (its lines were collected only if it is not done)
        yield Chunk(index, first, texts)
