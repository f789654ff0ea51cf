"""Does sense induction work on this text with this model? A check with pseudowords (Schuetze 1998).

Two unrelated frequent words of the corpus (``river``, ``money``) are merged into one made-up
token (``river+money``) wherever either occurs; the inducer, which sees only the merged token,
should split its occurrences back into the two words. The adjusted Rand index (ARI) of its
senses against the known split, averaged over a few pairs, says how far to trust the senses it
finds for real words of the same corpus with the same model: near 0, they are not evidence of
anything; from about 0.6, the contexts it reads separate meanings.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..bilm import BiLM
from .clustering import adjusted_rand
from .corpus import Corpus, _is_paths, read_sentences
from .induce import Inducer, InductionSettings, _window, frequent_words, match_target, target_forms
from .induced import Occurrence
from .substitutes import LMHead


@dataclass
class PairScore:
    first: str
    second: str
    occurrences: int  # per word (the two are balanced)
    senses: int
    ari: float


@dataclass
class CheckReport:
    """The pseudoword check: one :class:`PairScore` per pair and their mean ARI."""

    pairs: List[PairScore] = field(default_factory=list)

    @property
    def mean_ari(self) -> float:
        return float(np.mean([p.ari for p in self.pairs])) if self.pairs else float("nan")

    def as_dict(self) -> Dict[str, object]:
        return {"mean_ari": round(self.mean_ari, 4), "pairs": [asdict(p) for p in self.pairs]}

    def line(self) -> str:
        """One line for a person: the mean and each pair."""
        if not self.pairs:
            return "pseudoword check: no pair of frequent words to test (the corpus is too small)"
        each = ", ".join(f"{p.first}+{p.second} {p.ari:.2f} ({p.senses} sense{'s' if p.senses != 1 else ''})" for p in self.pairs)
        return f"pseudoword check: mean ARI {self.mean_ari:.2f} over {len(self.pairs)} pairs ({each})"


def choose_pairs(frequent: Sequence[str], n_pairs: int, seed: int = 0) -> List[Tuple[str, str]]:
    """``n_pairs`` disjoint pairs of the frequent words, each word paired with one about ``n_pairs`` ranks
    away (similar frequency, not neighbours in the list), in a seeded random order."""
    words = list(frequent[: 2 * n_pairs])
    if len(words) < 2:
        return []
    half = len(words) // 2
    pairs = [(words[i], words[i + half]) for i in range(half)]
    random.Random(seed).shuffle(pairs)
    return pairs[:n_pairs]


Kept = Tuple[List[str], int, Occurrence]  # Inducer.add's tokens, position and occurrence


def word_occurrences(corpus: Corpus, words: Sequence[str], per_word: int) -> Dict[str, List[Kept]]:
    """The first ``per_word`` occurrences of each of ``words`` (lower case; regular inflections count) in ``corpus``."""
    forms = target_forms({w: [] for w in words})
    kept: Dict[str, List[Kept]] = {w: [] for w in words}
    for sentence in read_sentences(corpus):
        for position, token in enumerate(sentence.tokens):
            word = match_target(token, forms)  # the word or a regular inflection of it
            if word is not None and len(kept[word]) < per_word:
                kept[word].append(_window(sentence.text, sentence.tokens, sentence.spans, position, sentence.source))
        if all(len(k) >= per_word for k in kept.values()):
            break
    return kept


def add_pseudoword(inducer: Inducer, merged: str, groups: Sequence[Sequence[Kept]]) -> List[int]:
    """Add each group's occurrences to ``inducer`` with the word replaced by ``merged``; the group of each, in order."""
    sides: List[int] = []
    for side, group in enumerate(groups):
        for tokens, position, occurrence in group:
            inducer.add(merged, [*tokens[:position], merged, *tokens[position + 1 :]], position, occurrence)
            sides.append(side)
    return sides


def pseudoword_check(
    corpus: Corpus,
    bilm: BiLM,
    head: Optional[LMHead],
    settings: Optional[InductionSettings] = None,
    *,
    n_pairs: int = 5,
    per_word: int = 100,
    min_count: int = 20,
    pairs: Optional[Sequence[Tuple[str, str]]] = None,
) -> CheckReport:
    """Induce the senses of ``n_pairs`` pseudowords of ``corpus`` and score them against the known split.

    The pairs are frequent content words of the corpus (:func:`.induce.frequent_words`, each seen at
    least ``min_count`` times; or ``pairs``); each word contributes its first ``per_word``
    occurrences (at most as many as the rarer word of its pair has), so a pair is balanced.
    ``settings`` are the induction's (its own number of senses: the check tests that choice too).
    """
    if not _is_paths(corpus) and not isinstance(corpus, (list, tuple)):
        raise ValueError("the pseudoword check reads the corpus again: pass a path or a list")
    settings = settings or InductionSettings()
    if pairs is None:
        frequent = list(frequent_words(corpus, 4 * n_pairs, min_count=min_count))
        pairs = choose_pairs(frequent, n_pairs, settings.seed)
    pairs = [(a.lower(), b.lower()) for a, b in pairs]
    kept = word_occurrences(corpus, [w for pair in pairs for w in pair], per_word)
    report = CheckReport()
    inducer = Inducer(bilm, head, settings)
    truth: Dict[str, List[int]] = {}
    for pair in pairs:
        n = min(*(len(kept[w]) for w in pair), settings.max_occurrences // 2)
        if n < max(settings.min_occurrences, 5):
            continue
        merged = "+".join(pair)
        truth[merged] = add_pseudoword(inducer, merged, [kept[w][:n] for w in pair])
    inducer.flush()
    for merged, sides in truth.items():
        a, b = merged.split("+", 1)
        result = inducer.word_senses(merged)
        labels = result.labels
        # the inducer keeps occurrences in the order added (no reservoir below max_occurrences)
        report.pairs.append(PairScore(a, b, len(sides) // 2, len(result.senses), round(adjusted_rand(np.array(sides), labels), 4)))
    return report
