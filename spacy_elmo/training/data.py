"""Training batches: sentences from shards, bucketed by length under a token budget.

The order is a pure function of (seed, epoch, shard), so a run resumes at an exact
(epoch, shard, batch) position, and every distributed rank agrees on it: rank ``r`` of ``w``
takes batches ``r, r + w, ...`` of each shard (each shard's batch list is cut to a multiple of
``w`` so that all ranks take the same number of steps).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

import torch

from ..bilm.batching import pack_by_token_budget
from ..bilm.characters import TokenBatch
from .corpus import read_vocab


class Vocabulary:
    """Softmax vocabulary: ids 0, 1, 2 are ``<S>``, ``</S>``, ``<UNK>``; the rest by frequency."""

    BOS, EOS, UNK = 0, 1, 2

    def __init__(self, tokens: Sequence[str], counts: Sequence[int] = ()) -> None:
        self.tokens = list(tokens)
        self.counts = list(counts) if counts else [0] * len(self.tokens)
        self.index: Dict[str, int] = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def load(cls, path: Path) -> "Vocabulary":
        return cls(*read_vocab(path))

    def save(self, path: Path) -> None:
        with Path(path).open("w", encoding="utf-8") as fh:
            for token, count in zip(self.tokens, self.counts):
                fh.write(f"{token}\t{count}\n")

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, tokens: Sequence[str]) -> List[int]:
        get, unk = self.index.get, self.UNK
        return [get(t, unk) for t in tokens]


@dataclass
class LMBatch:
    """Inputs (distinct-token char ids) and word-id targets for one training batch.

    word_ids: ``[B, T]`` with ``<S>`` at 0 and ``</S>`` at ``length - 1`` of each row.
    n_targets: the number of predictions per direction (tokens + one boundary per row).
    """

    tokens: TokenBatch
    word_ids: torch.Tensor
    n_targets: int

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sequence[str]], vocab: Vocabulary) -> "LMBatch":
        tokens = TokenBatch.from_sentences(sentences)
        word_ids = torch.full(tokens.token_index.shape, -1, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            n = len(sentence)
            word_ids[row, 0] = vocab.BOS
            if n:
                word_ids[row, 1 : n + 1] = torch.tensor(vocab.ids(sentence))
            word_ids[row, n + 1] = vocab.EOS
        return cls(tokens, word_ids, int(sum(len(s) + 1 for s in sentences)))


def read_shard(path: Path, max_length: int) -> List[List[str]]:
    """Sentences of one shard, longer ones cut into pieces of at most ``max_length`` tokens."""
    sentences: List[List[str]] = []
    with Path(path).open(encoding="utf-8") as fh:
        try:
            for line in fh:
                tokens = line.split(" ")
                tokens[-1] = tokens[-1].rstrip("\n")
                tokens = [t for t in tokens if t]
                for start in range(0, len(tokens), max_length):
                    sentences.append(tokens[start : start + max_length])
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{path}: not UTF-8 text after {len(sentences)} sentences ({err.reason}); the shard is corrupt: "
                "rerun `prepare` to rewrite it"
            ) from err
    return sentences


def bucket_batches(lengths: Sequence[int], max_tokens: int, rng: random.Random) -> List[List[int]]:
    """Indices grouped into batches of similar length with ``rows * (longest + 2) <= max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches = pack_by_token_budget(order, lengths, max_tokens)
    rng.shuffle(batches)
    return batches


def shard_files(data_dir: Path, split: str) -> List[Path]:
    files = sorted((Path(data_dir) / split).glob("shard-*.txt"))
    if not files:
        raise FileNotFoundError(f"no shards in {Path(data_dir) / split} (run `python -m spacy_elmo prepare` first)")
    return files


@dataclass
class Position:
    """Where a run is in its data: epoch, shard (index into that epoch's order), batch within it."""

    epoch: int = 0
    shard: int = 0
    batch: int = 0


def training_batches(
    data_dir: Path,
    vocab: Vocabulary,
    max_tokens: int,
    max_length: int,
    seed: int,
    start: Position,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[Tuple[Position, LMBatch]]:
    """Endless stream of (position after this batch, batch) from ``start`` on."""
    files = shard_files(data_dir, "train")
    epoch, shard_pos, batch_pos = start.epoch, start.shard, start.batch
    while True:
        order = list(range(len(files)))
        random.Random(f"{seed}-{epoch}").shuffle(order)
        for s in range(shard_pos, len(order)):
            sentences = read_shard(files[order[s]], max_length)
            batches = bucket_batches([len(x) for x in sentences], max_tokens, random.Random(f"{seed}-{epoch}-{order[s]}"))
            usable = len(batches) - len(batches) % world_size
            for b in range(batch_pos, usable, world_size):
                chosen = batches[b + rank]
                yield Position(epoch, s, b + world_size), LMBatch.from_sentences([sentences[i] for i in chosen], vocab)
            batch_pos = 0
        shard_pos = 0
        epoch += 1


def evaluation_shards(data_dir: Path, split: str, max_length: int, limit: int = 0) -> Iterator[List[List[str]]]:
    """The sentences (cut at ``max_length`` tokens) that perplexity scores, shard by shard.

    ``limit``: only the first ``limit`` pieces. The biLM and the unigram baseline both read
    this, so they score exactly the same predictions.
    """
    seen = 0
    for path in shard_files(data_dir, split):
        sentences = read_shard(path, max_length)
        if limit:
            sentences = sentences[: max(0, limit - seen)]
        seen += len(sentences)
        yield sentences
        if limit and seen >= limit:
            return


def evaluation_batches(
    data_dir: Path, split: str, vocab: Vocabulary, max_tokens: int, max_length: int, limit: int = 0
) -> Iterator[LMBatch]:
    """Every sentence of a split once (or the first ``limit`` sentences), in a fixed order."""
    for sentences in evaluation_shards(data_dir, split, max_length, limit):
        for chosen in bucket_batches([len(x) for x in sentences], max_tokens, random.Random(0)):
            yield LMBatch.from_sentences([sentences[i] for i in chosen], vocab)
