"""A bounded, seeded sample of each word's occurrences in each corpus, taken while streaming.

Reservoir sampling (Vitter's algorithm R): after any number of occurrences, each one streamed
so far is in the sample with the same probability, and the sample never holds more than
``limit`` occurrences, so memory does not grow with the corpus.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, Generic, List, Tuple, TypeVar

from ..induction.induced import Occurrence

T = TypeVar("T")


@dataclass
class Reservoir(Generic[T]):
    """A uniform sample of at most ``limit`` items of a stream; ``seen`` counts every item offered."""

    limit: int
    rng: random.Random
    seen: int = 0
    items: List[T] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"a sample holds at least one occurrence, got limit {self.limit}")

    def offer(self, item: T) -> None:
        self.seen += 1
        if len(self.items) < self.limit:
            self.items.append(item)
            return
        j = self.rng.randrange(self.seen)
        if j < self.limit:
            self.items[j] = item


@dataclass(frozen=True)
class Sampled:
    """One sampled occurrence: the tokens around it (its sentence, cut to a window), the word's
    position among them, and where it sits in that text."""

    tokens: Tuple[str, ...]
    position: int
    occurrence: Occurrence


class CorpusSamples:
    """Per corpus and word, a :class:`Reservoir` of its occurrences, each with its own generator seeded
    by ``(seed, corpus, word)``: a word's sample depends neither on the other corpus nor on which
    other words are sampled beside it."""

    def __init__(self, corpora: int, limit: int, seed: int = 0) -> None:
        self.limit = limit
        self.seed = seed
        self.samples: List[Dict[str, Reservoir[Sampled]]] = [{} for _ in range(corpora)]

    def offer(self, corpus: int, word: str, item: Sampled) -> None:
        table = self.samples[corpus]
        if word not in table:
            table[word] = Reservoir(self.limit, random.Random(f"{self.seed}:{corpus}:{word}"))
        table[word].offer(item)

    def items(self, corpus: int, word: str) -> List[Sampled]:
        reservoir = self.samples[corpus].get(word)
        return list(reservoir.items) if reservoir else []

    def seen(self, corpus: int, word: str) -> int:
        reservoir = self.samples[corpus].get(word)
        return reservoir.seen if reservoir else 0
