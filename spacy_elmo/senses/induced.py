"""Induced senses of one word, as sense induction produces them and the explore page reads them.

The data model shared by induction (:mod:`.induce`), the inventory built from it and the explore
page: each occurrence of the word in the corpus (its sentence and where the word sits in it), the
senses found (a name from their most distinctive substitutes, their size, their most
representative occurrences) and each occurrence's graded assignment to the senses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of the target word: ``text[start:end]`` is the word inside its sentence."""

    text: str
    start: int
    end: int
    source: str = ""  # where it came from: a file and line, a Doc index, an instance id

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end <= len(self.text):
            raise ValueError(f"occurrence span {self.start}:{self.end} is outside its text of {len(self.text)} characters")


@dataclass
class Sense:
    """One induced sense: ``name`` reads like "bank: river / shore / edge"."""

    id: int
    name: str
    substitutes: List[str]  # the most distinctive substitutes, best first
    count: int  # occurrences whose strongest sense this is
    examples: List[int]  # indices into WordSenses.occurrences, most representative first


@dataclass
class WordSenses:
    """The senses induced for one word and the occurrences they were induced from.

    ``weights[i, k]`` is occurrence i's weight for sense k (rows sum to 1); ``labels`` is each
    row's strongest sense; ``vectors`` is the representation each occurrence was clustered by
    (the map and the nearest-occurrence lists of the explore page use it).
    """

    word: str
    forms: List[str]
    occurrences: List[Occurrence]
    senses: List[Sense]
    weights: np.ndarray  # [n_occurrences, n_senses], float32, rows sum to 1
    vectors: np.ndarray  # [n_occurrences, dim], float32
    representation: str = "substitutes"
    note: Optional[str] = None  # e.g. "too few occurrences: one sense"
    extra: dict = field(default_factory=dict)

    @property
    def labels(self) -> np.ndarray:
        """Each occurrence's strongest sense (an index into ``senses``)."""
        return np.asarray(self.weights).argmax(axis=1) if len(self.occurrences) else np.zeros(0, dtype=np.int64)
