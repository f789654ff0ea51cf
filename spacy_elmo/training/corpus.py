"""Corpus preparation: raw text files -> tokenized sentence shards + a frequency-sorted vocabulary.

Input: UTF-8 text files or folders of them (``.txt``/``.gz``), paragraphs separated by blank
lines. If a folder holds a ``manifest.tsv`` with ``file`` and ``split`` columns, its splits are
used (``dev`` counts as ``valid``); otherwise every file goes to ``train``. Lines that are not
valid UTF-8 are skipped and counted. Text is tokenized with a spaCy tokenizer and split into
sentences by spaCy's rule-based sentencizer, streaming: memory grows with the vocabulary, not
with the corpus.

Output folder::

    train/shard-00000.txt ...   one sentence per line, tokens joined by single spaces
    valid/..., test/...
    vocab.txt                   "<S>", "</S>", "<UNK>", then tokens by descending train count
    stats.json                  sentences, tokens and skipped lines per split
"""
from __future__ import annotations

import csv
import gzip
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import srsly
from tqdm import tqdm

SPLITS = ("train", "valid", "test")
SPECIALS = ("<S>", "</S>", "<UNK>")


@dataclass
class SplitStats:
    files: int = 0
    sentences: int = 0
    tokens: int = 0
    skipped_lines: int = 0
    shards: List[str] = field(default_factory=list)


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
                    split = {"dev": "valid"}.get(row.get("split", "train"), row.get("split", "train"))
                    if split not in result:
                        raise ValueError(f"{manifest}: unknown split {row.get('split')!r}")
                    path = item / row["file"]
                    if not path.is_file():
                        raise FileNotFoundError(f"{manifest} lists {row['file']}, which is not in {item}")
                    result[split].append(path)
            continue
        for path in sorted(item.rglob("*")):
            if path.is_file() and (path.suffix in (".txt", ".text") or path.name.endswith((".txt.gz", ".text.gz"))):
                result["train"].append(path)
    return result


def read_paragraphs(path: Path, stats: SplitStats) -> Iterator[str]:
    """Paragraphs (blank-line separated, line breaks joined) of one file; bad UTF-8 lines skipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        lines: List[str] = []
        for raw in io.BufferedReader(fh):  # type: ignore[arg-type]
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                stats.skipped_lines += 1
                continue
            if line:
                lines.append(line)
            elif lines:
                yield " ".join(lines)
                lines = []
        if lines:
            yield " ".join(lines)


def sentences_of(paragraphs: Iterable[str], lang: str, max_chars: int = 100_000) -> Iterator[List[str]]:
    """Tokenized sentences (whitespace tokens dropped) from paragraphs."""
    import spacy

    nlp = spacy.blank(lang)
    nlp.add_pipe("sentencizer")
    nlp.max_length = max(nlp.max_length, max_chars + 1)
    for doc in nlp.pipe((p[:max_chars] for p in paragraphs), batch_size=256):
        for sent in doc.sents:
            tokens = [t.text for t in sent if not t.is_space]
            if tokens:
                yield tokens


class ShardWriter:
    """Writes sentences to numbered shard files of at most ``shard_size`` sentences."""

    def __init__(self, folder: Path, shard_size: int) -> None:
        self.folder, self.shard_size = folder, shard_size
        folder.mkdir(parents=True, exist_ok=True)
        self.index, self.count, self.handle, self.names = 0, 0, None, []  # type: ignore[var-annotated]

    def write(self, tokens: List[str]) -> None:
        if self.handle is None or self.count >= self.shard_size:
            self.close()
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
) -> Dict[str, SplitStats]:
    """Tokenize, split into sentences, write shards and the vocabulary; returns per-split stats."""
    files = text_files(inputs)
    if not files["train"]:
        raise ValueError(f"no training text found in {', '.join(map(str, inputs))}")
    out_dir = Path(out_dir)
    counts: Counter = Counter()
    stats: Dict[str, SplitStats] = {}
    for split in SPLITS:
        chosen = files[split][:max_files] if max_files else files[split]
        split_stats = stats[split] = SplitStats(files=len(chosen))
        if not chosen:
            continue
        writer = ShardWriter(out_dir / split, shard_size)

        def paragraphs() -> Iterator[str]:
            for path in tqdm(chosen, desc=f"prepare {split}", unit="file", leave=False):
                yield from read_paragraphs(path, split_stats)

        for tokens in sentences_of(paragraphs(), lang):
            writer.write(tokens)
            split_stats.sentences += 1
            split_stats.tokens += len(tokens)
            if split == "train":
                counts.update(tokens)
        writer.close()
        split_stats.shards = writer.names
    vocab = build_vocab(counts, min_count=min_count, max_size=max_vocab)
    write_vocab(out_dir / "vocab.txt", vocab, counts)
    srsly.write_json(out_dir / "stats.json", {k: vars(v) for k, v in stats.items()} | {"vocab_size": len(vocab)})
    return stats


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
    """Tokens and their train counts from a vocab.txt (a count column is optional)."""
    tokens, counts = [], []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            token, _, count = line.partition("\t")
            tokens.append(token)
            counts.append(int(count) if count else 0)
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
