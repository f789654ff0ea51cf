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
from ..induction.clustering import adjusted_rand
from ..induction.corpus import Corpus, _is_paths, read_sentences
from ..induction.induce import Inducer, InductionSettings, _window, frequent_words, match_target, target_forms
from ..induction.induced import Occurrence
from ..induction.naming import plural
from ..induction.substitutes import LMHead


@dataclass
class PairScore:
    first: str
    second: str
    occurrences: int  # per word (the two are balanced)
    senses: int
    ari: float


@dataclass
class CheckReport:
    """The pseudoword check: one :class:`PairScore` per pair and their mean ARI (``None`` without
    pairs); ``asked``: how many pairs were asked for; ``notes``: why fewer were made, one reason each."""

    pairs: List[PairScore] = field(default_factory=list)
    asked: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def mean_ari(self) -> Optional[float]:
        return float(np.mean([p.ari for p in self.pairs])) if self.pairs else None

    def as_dict(self) -> Dict[str, object]:
        """JSON values (no NaN: a check without pairs has ``mean_ari`` null)."""
        mean = self.mean_ari
        return {
            "mean_ari": None if mean is None else round(mean, 4),
            "pairs": [asdict(p) for p in self.pairs],
            "asked": self.asked,
            "notes": list(self.notes),
        }

    def line(self) -> str:
        """One line for a person: how many pairs of how many asked (and why fewer), the mean and each pair."""
        why = f": {'; '.join(self.notes)}" if self.notes else ""
        made = len(self.pairs)
        if not made:
            return f"pseudoword check: no pair tested of the {self.asked} asked{why}"
        fewer = f" ({made} of the {self.asked} asked{why})" if made < self.asked else ""
        each = ", ".join(f"{p.first}+{p.second} {p.ari:.2f} ({plural(p.senses, 'sense')})" for p in self.pairs)
        return f"pseudoword check: mean ARI {self.mean_ari:.2f} over {plural(made, 'pair')} ({each}){fewer}"


def candidate_pairs(
    corpus: Corpus, n_pairs: int, min_count: int = 20, seed: int = 0, exclude: Sequence[str] = (), lang: str = "en"
) -> Tuple[List[Tuple[str, str]], List[str]]:
    """Up to ``n_pairs`` pairs of the corpus's frequent content words (:func:`choose_pairs`), none of
    them one of ``exclude`` or a form of one (the target words: ambiguous by choice, so no test of
    the split), and why there are fewer than asked (one note)."""
    excluded = {w.lower() for w in exclude}
    frequent = frequent_words(corpus, 4 * n_pairs + len(excluded), min_count=min_count, lang=lang)
    words = [w for w, forms in frequent.items() if w not in excluded and not excluded.intersection(forms)][: 4 * n_pairs]
    pairs = choose_pairs(words, n_pairs, seed)
    notes = []
    if len(pairs) < n_pairs:
        other = " other than the target words" if excluded else ""
        notes.append(f"only {plural(len(words), 'content word')}{other} occur {min_count} times or more, for {plural(len(pairs), 'pair')}")
    return pairs, notes


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


def word_occurrences(corpus: Corpus, words: Sequence[str], per_word: int, lang: str = "en") -> Dict[str, List[Kept]]:
    """The first ``per_word`` occurrences of each of ``words`` (lower case; inflections count) in ``corpus`` (language ``lang``)."""
    forms = target_forms({w: [] for w in words}, lang)
    kept: Dict[str, List[Kept]] = {w: [] for w in words}
    for sentence in read_sentences(corpus, lang=lang):
        for position, token in enumerate(sentence.tokens):
            word = match_target(token, forms, lang)  # the word or an inflection of it
            if word is not None and len(kept[word]) < per_word:
                kept[word].append(_window(sentence.text, sentence.tokens, sentence.spans, position, sentence.source))
        if all(len(k) >= per_word for k in kept.values()):
            break
    return kept


def add_pseudoword(inducer: Inducer, merged: str, groups: Sequence[Sequence[Kept]]) -> List[int]:
    """Add each group's occurrences to ``inducer`` with the word replaced by ``merged``; the group of each, in order.

    The word is replaced in the occurrence's text as well as in the tokens the biLM reads: the
    induction takes a word's forms from its occurrences' spans, and removes what a form alone
    contributes (its mean vector; itself among the context words). Left as ``said`` and
    ``hand``, those forms would be the known split itself, and removing them would remove it."""
    sides: List[int] = []
    for side, group in enumerate(groups):
        for tokens, position, o in group:
            hidden = Occurrence(o.text[: o.start] + merged + o.text[o.end :], o.start, o.start + len(merged), o.source)
            inducer.add(merged, [*tokens[:position], merged, *tokens[position + 1 :]], position, hidden)
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
    exclude: Sequence[str] = (),
) -> CheckReport:
    """Induce the senses of ``n_pairs`` pseudowords of ``corpus`` and score them against the known split.

    The pairs are frequent content words of the corpus (:func:`candidate_pairs`: each seen at least
    ``min_count`` times, none of ``exclude``, the target words; or ``pairs``); each word contributes
    its first ``per_word`` occurrences (at most as many as the rarer word of its pair has), so a
    pair is balanced. ``settings`` are the induction's (its own number of senses: the check tests
    that choice too). The report says how many pairs were asked for and why fewer were tested.
    """
    if not _is_paths(corpus) and not isinstance(corpus, (list, tuple)):
        raise ValueError("the pseudoword check reads the corpus again: pass a path or a list")
    settings = settings or InductionSettings()
    report = CheckReport(asked=n_pairs if pairs is None else len(pairs))
    if pairs is None:
        pairs, report.notes = candidate_pairs(corpus, n_pairs, min_count, settings.seed, exclude, settings.lang)
    pairs = [(a.lower(), b.lower()) for a, b in pairs]
    kept = word_occurrences(corpus, [w for pair in pairs for w in pair], per_word, settings.lang)
    inducer = Inducer(bilm, head, settings)
    truth: Dict[str, List[int]] = {}
    needed = max(settings.min_occurrences, 5)
    for pair in pairs:
        n = min(*(len(kept[w]) for w in pair), settings.max_occurrences // 2)
        if n < needed:
            report.notes.append(f"{'+'.join(pair)} left out ({n} occurrences of the rarer word, fewer than {needed})")
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
