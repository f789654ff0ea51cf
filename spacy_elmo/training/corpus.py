"""Corpus preparation: raw text files -> tokenized sentence shards + a frequency-sorted vocabulary.

Input: UTF-8 text files or folders of them (``.txt``, ``.text``, ``.gz``), in one of two layouts:

- ``line``: one sentence or document per line (the 1B Word Benchmark layout); each line is
  split into sentences on its own, blank lines are ignored;
- ``paragraph``: paragraphs separated by blank lines, hard-wrapped lines within a paragraph
  joined (Project Gutenberg books).

``auto`` (the default) decides per file from its first lines: ``paragraph`` when blank lines
separate blocks of several lines, else ``line``. Nothing is dropped without being counted: a
paragraph or line longer than ``max_chars`` is split at a line break or a space (counted as
``split_units``), lines that are not valid UTF-8 are skipped and counted (``skipped_lines``),
and memory stays bounded by ``max_chars`` per text unit, whatever the file size.

Splits: a folder's ``manifest.tsv`` (``file`` and ``split`` columns; ``dev`` counts as
``valid``) assigns files to train/valid/test. When no valid or test text is given, a
``held_out`` fraction of the training text (whole blocks of 10 consecutive text units, chosen
by a hash, so the split is deterministic) goes to valid and test, half each; the second and
third blocks always do, so that a small corpus still gets both.

Output folder::

    train/shard-00000.txt ...   one sentence per line, tokens joined by single spaces
    valid/..., test/...
    vocab.txt                   "<S>", "</S>", "<UNK>", then tokens by descending train count
                                (the specials carry their real train counts: sentences, and
                                tokens left out of the vocabulary)
    stats.json                  per split: files, lines, sentences, tokens, skipped and split counts;
                                the language (``lang``: the spaCy tokenizer the text was split by)
"""

from __future__ import annotations

import csv
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple

import srsly
from tqdm import tqdm

from ..gzipped import GzipError, open_read
from ..vocabulary import read_vocabulary

SPLITS = ("train", "valid", "test")
SPECIALS = ("<S>", "</S>", "<UNK>")
LAYOUTS = ("auto", "line", "paragraph")
TEXT_SUFFIXES = (".txt", ".text", ".gz")
HELD_OUT_BLOCK = 10  # text units per held-out block: neighbouring sentences stay in one split
MAX_CHARS = 100_000


@dataclass
class SplitStats:
    files: int = 0
    lines: int = 0
    sentences: int = 0
    tokens: int = 0
    skipped_lines: int = 0
    split_units: int = 0
    layouts: Dict[str, int] = field(default_factory=dict)
    shards: List[str] = field(default_factory=list)


def is_text_file(path: Path) -> bool:
    return path.is_file() and path.name != "manifest.tsv" and path.name.lower().endswith(TEXT_SUFFIXES)


def text_files(inputs: Sequence[Path]) -> Dict[str, List[Path]]:
    """Files per split, from files and folders (honouring a folder's manifest.tsv)."""
    result: Dict[str, List[Path]] = {split: [] for split in SPLITS}
    for item in inputs:
        item = Path(item)
        if not item.exists():
            raise FileNotFoundError(f"corpus input not found: {item}")
        if item.is_file():
            result["train"].append(item)
            continue
        manifest = item / "manifest.tsv"
        if manifest.is_file():
            with manifest.open(encoding="utf-8") as fh:
                for row in csv.DictReader(fh, delimiter="\t"):
                    if not row.get("file"):
                        raise ValueError(f"{manifest}: every row needs a 'file' column (tab-separated header: file, split)")
                    split = {"dev": "valid"}.get(row.get("split") or "train", row.get("split") or "train")
                    if split not in result:
                        raise ValueError(f"{manifest}: unknown split {row.get('split')!r} (use train, valid/dev or test)")
                    path = item / row["file"]
                    if not path.is_file():
                        raise FileNotFoundError(f"{manifest} lists {row['file']}, which is not in {item}")
                    result[split].append(path)
            continue
        result["train"].extend(path for path in sorted(item.rglob("*")) if is_text_file(path))
    return result


def _lines(path: Path, stats: SplitStats) -> Iterator[str]:
    """Stripped lines of a (possibly gzipped) file; lines that are not UTF-8 are counted and skipped."""
    with open_read(path, "rb") as fh:
        try:
            for raw in fh:
                try:
                    yield raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    stats.skipped_lines += 1
        except GzipError as err:
            raise ValueError(f"{err}; the file is damaged (or not gzip): fix or remove it") from err
        except OSError as err:
            raise ValueError(f"{path}: cannot read it to the end ({err})") from err


def detect_layout(path: Path, sample_lines: int = 2000) -> str:
    """``paragraph`` if blank lines separate blocks of several lines in the file's start, else ``line``."""
    run, multi_line_blocks, blanks = 0, 0, 0
    for i, line in enumerate(_lines(path, SplitStats())):
        if i >= sample_lines:
            break
        if not line:
            blanks += 1
            multi_line_blocks += run >= 2
            run = 0
        else:
            run += 1
    return "paragraph" if blanks and multi_line_blocks else "line"


def _pieces(text: str, max_chars: int) -> Iterator[str]:
    """``text`` cut at spaces (or anywhere, for a longer unbroken run) into pieces of <= max_chars."""
    while len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars + 1)
        cut = cut if cut > 0 else max_chars
        yield text[:cut]
        text = text[cut:].lstrip(" ")
    if text:
        yield text


def read_units(path: Path, layout: str, stats: SplitStats, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """Text units (lines, or paragraphs) of one file, none longer than ``max_chars``; every cut counted."""
    if layout not in ("line", "paragraph"):
        raise ValueError(f"layout must be 'line' or 'paragraph', not {layout!r}")
    buffer: List[str] = []
    size = 0
    for line in _lines(path, stats):
        if line:
            stats.lines += 1
        pieces = list(_pieces(line, max_chars)) if len(line) > max_chars else [line]
        stats.split_units += len(pieces) - 1
        if layout == "line":
            yield from (p for p in pieces if p)
            continue
        for piece in pieces:
            if not piece:  # a blank line ends the paragraph
                if buffer:
                    yield " ".join(buffer)
                buffer, size = [], 0
                continue
            if buffer and size + 1 + len(piece) > max_chars:
                stats.split_units += 1
                yield " ".join(buffer)
                buffer, size = [], 0
            buffer.append(piece)
            size += len(piece) + (1 if size else 0)
    if buffer:
        yield " ".join(buffer)


def held_out_split(key: str, held_out: float) -> str:
    """Deterministic split of a block of training text: valid and test take ``held_out / 2`` each."""
    bucket = zlib.crc32(key.encode("utf-8")) / 2**32
    if bucket < held_out / 2:
        return "valid"
    if bucket < held_out:
        return "test"
    return "train"


def sentences_of(units: Iterable[Tuple[str, str]], lang: str, max_chars: int = MAX_CHARS) -> Iterator[Tuple[List[str], str]]:
    """(tokens, split) per sentence (whitespace tokens dropped) from (text, split) units."""
    import spacy

    nlp = spacy.blank(lang)
    nlp.add_pipe("sentencizer")
    nlp.max_length = max(nlp.max_length, max_chars + 1)
    for doc, split in nlp.pipe(units, batch_size=64, as_tuples=True):
        for sent in doc.sents:
            tokens = [t.text for t in sent if not t.is_space]
            if tokens:
                yield tokens, split


class ShardWriter:
    """Writes sentences to numbered shard files of at most ``shard_size`` sentences."""

    def __init__(self, folder: Path, shard_size: int) -> None:
        self.folder, self.shard_size = folder, max(1, shard_size)
        self.index, self.count = 0, 0
        self.handle: Optional[TextIO] = None
        self.names: List[str] = []

    def write(self, tokens: List[str]) -> None:
        if self.handle is None or self.count >= self.shard_size:
            self.close()
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"shard-{self.index:05d}.txt"
            self.names.append(name)
            self.handle = (self.folder / name).open("w", encoding="utf-8")
            self.index, self.count = self.index + 1, 0
        self.handle.write(" ".join(tokens) + "\n")
        self.count += 1

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def prepare_corpus(
    inputs: Sequence[Path],
    out_dir: Path,
    lang: str = "en",
    min_count: int = 1,
    max_vocab: Optional[int] = None,
    shard_size: int = 100_000,
    max_files: Optional[int] = None,
    layout: str = "auto",
    held_out: float = 0.02,
    max_chars: int = MAX_CHARS,
) -> Dict[str, SplitStats]:
    """Tokenize, split into sentences, write shards and the vocabulary; returns per-split stats.

    ``held_out``: the fraction of training text moved to valid + test when the inputs give
    neither (0 turns it off).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if not 0 <= held_out < 1:
        raise ValueError(f"held_out must be a fraction in [0, 1), not {held_out}")
    files = text_files(inputs)
    if max_files:
        files = {split: paths[:max_files] for split, paths in files.items()}
    if not files["train"]:
        raise ValueError(f"no training text found in {', '.join(map(str, inputs))} (files ending in {', '.join(TEXT_SUFFIXES)})")
    hold_out = held_out if not (files["valid"] or files["test"]) else 0.0
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: Counter = Counter()
    stats = {split: SplitStats(files=len(files[split])) for split in SPLITS}
    writers = {split: ShardWriter(out_dir / split, shard_size) for split in SPLITS}

    def units() -> Iterator[Tuple[str, str]]:
        blocks = 0
        for split in SPLITS:
            for number, path in enumerate(tqdm(files[split], desc=f"prepare {split}", unit="file", leave=False)):
                chosen = detect_layout(path) if layout == "auto" else layout
                stats[split].layouts[chosen] = stats[split].layouts.get(chosen, 0) + 1
                target = split
                for i, text in enumerate(read_units(path, chosen, stats[split], max_chars)):
                    if hold_out and i % HELD_OUT_BLOCK == 0:
                        blocks += 1  # blocks 2 and 3 are always held out, so that a small corpus gets both splits
                        fixed = {2: "valid", 3: "test"}.get(blocks)
                        target = fixed or held_out_split(f"{number}:{path.name}:{i // HELD_OUT_BLOCK}", hold_out)
                    yield text, target

    for tokens, split in sentences_of(units(), lang, max_chars):
        writers[split].write(tokens)
        stats[split].sentences += 1
        stats[split].tokens += len(tokens)
        if split == "train":
            counts.update(tokens)
    for split in SPLITS:
        writers[split].close()
        stats[split].shards = writers[split].names
    if sum(s.sentences for s in stats.values()) == 0:
        for split in SPLITS:  # nothing was written: leave no empty corpus behind
            if (out_dir / split).is_dir() and not any((out_dir / split).iterdir()):
                (out_dir / split).rmdir()
        if created and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise ValueError(
            f"no sentences in {', '.join(str(p) for p in files['train'][:3])}{' ...' if len(files['train']) > 3 else ''}: "
            f"the text is empty (or only blank or non-UTF-8 lines); nothing was written"
        )
    vocab = build_vocab(counts, min_count=min_count, max_size=max_vocab)
    specials = {"<S>": stats["train"].sentences, "</S>": stats["train"].sentences}
    specials["<UNK>"] = stats["train"].tokens - sum(counts[t] for t in vocab if t not in SPECIALS)
    write_vocab(out_dir / "vocab.txt", vocab, counts + Counter(specials))
    summary = {k: vars(v) for k, v in stats.items()}
    srsly.write_json(out_dir / "stats.json", summary | {"vocab_size": len(vocab), "held_out": hold_out, "layout": layout, "lang": lang})
    return stats


def prepared_lang(data_dir: Path) -> Optional[str]:
    """The language a prepared folder's text was tokenised in (``stats.json``); ``None`` when it records none."""
    path = Path(data_dir) / "stats.json"
    if not path.is_file():
        return None
    lang = srsly.read_json(path).get("lang")
    return str(lang) if lang else None


def build_vocab(counts: Counter, min_count: int = 1, max_size: Optional[int] = None) -> List[str]:
    """Specials first, then tokens by descending count (ties alphabetical), filtered."""
    ranked = sorted((t for t, c in counts.items() if c >= min_count and t not in SPECIALS), key=lambda t: (-counts[t], t))
    if max_size is not None:
        ranked = ranked[: max(0, max_size - len(SPECIALS))]
    return list(SPECIALS) + ranked


def write_vocab(path: Path, vocab: Sequence[str], counts: Optional[Counter] = None) -> None:
    with Path(path).open("w", encoding="utf-8") as fh:
        for token in vocab:
            fh.write(f"{token}\t{counts[token] if counts is not None else 0}\n")


def read_vocab(path: Path) -> Tuple[List[str], List[int]]:
    """Tokens and their train counts from a vocab.txt (the package's one vocabulary reader,
    :func:`~spacy_elmo.vocabulary.read_vocabulary`), which must start with the special tokens."""
    tokens, counts = read_vocabulary(path)
    if tuple(tokens[:3]) != SPECIALS:
        raise ValueError(f"{path}: a vocabulary must start with {', '.join(SPECIALS)}")
    return tokens, counts


def mix_train_shards(data_dir: Path, seed: int = 0, shard_size: int = 100_000) -> int:
    """Shuffle a prepared corpus's training sentences across its shards, in place.

    ``prepare`` writes shards in input order, so a small extra source (web text after books)
    ends up in one shard that a run shorter than an epoch may never reach, or meets all at once.
    Rewriting the train shards with the sentences in a seeded random order spreads every source
    evenly over the run. The vocabulary and stats are unchanged. Returns the sentence count.
    """
    import random

    folder = Path(data_dir) / "train"
    files = sorted(folder.glob("shard-*.txt"))
    lines: List[str] = []
    for path in files:
        with path.open(encoding="utf-8") as fh:
            lines.extend(fh)
    random.Random(seed).shuffle(lines)
    size = max(1, shard_size)
    tmp = folder.with_name("train.mixing")
    tmp.mkdir(parents=True, exist_ok=True)
    for old in tmp.glob("shard-*.txt"):
        old.unlink()
    for index, start in enumerate(range(0, len(lines), size)):
        with (tmp / f"shard-{index:05d}.txt").open("w", encoding="utf-8") as fh:
            fh.writelines(lines[start : start + size])
    for path in files:
        path.unlink()
    for path in sorted(tmp.glob("shard-*.txt")):
        path.rename(folder / path.name)
    tmp.rmdir()
    return len(lines)
