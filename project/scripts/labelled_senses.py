"""The hand-labelled sense set (tests/data/senses/labelled): reading it and scoring induced senses on it.

Each word has a file ``WORD.txt`` (``sense<TAB>sentence``, one occurrence of the word per
sentence) and ``names.json`` lists, per sense, the words a person accepts as its name. Used by
``bench/sense_set.py`` (the figures) and ``tests/test_sense_set.py`` (the assertions).

The set holds ambiguous words (two or three senses) and one-sense controls (``is_control``).
ARI, senses per word and the named share are figures of the ambiguous words only (the ARI of a
one-sense word against its single gold label is degenerate); the controls are measured by the
number-of-senses rule's first promise: one sense for a one-sense word (``promise_rates``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Literal, Optional, Sequence, Tuple

import numpy as np

from spacy_elmo.induction.clustering import adjusted_rand
from spacy_elmo.induction.induced import WordSenses
from spacy_elmo.induction.substitutes import inflection_bases

LABELLED = Path(__file__).resolve().parents[2] / "tests" / "data" / "senses" / "labelled"
IRREGULAR = {"mouse": ["mice"]}  # forms the regular inflections do not find
Kind = Literal["ambiguous", "controls", "all"]
KINDS = ("ambiguous", "controls", "all")


@dataclass
class LabelledWord:
    word: str
    sentences: List[str]
    senses: List[str]  # one gold sense per sentence
    accepted: Dict[str, List[str]]  # sense -> the words that name it
    forms: List[str] = field(default_factory=list)

    @property
    def gold(self) -> np.ndarray:
        names = sorted(set(self.senses))
        return np.array([names.index(s) for s in self.senses])

    @property
    def n_senses(self) -> int:
        return len(set(self.senses))

    @property
    def is_control(self) -> bool:
        """A one-sense control word (one gold sense), not an ambiguous one."""
        return self.n_senses == 1

    def tokens(self) -> Tuple[List[List[str]], List[int]]:
        """Each sentence's tokens (as induction reads them) and the position of the word in it."""
        from spacy_elmo.induction.corpus import read_sentences
        from spacy_elmo.induction.induce import match_target, target_forms

        forms = target_forms({self.word: self.forms})
        tokens, positions = [], []
        for line in self.sentences:  # one item a line, even where the tokenizer reads two sentences in it
            words = [t for sentence in read_sentences([line]) for t in sentence.tokens]
            tokens.append(words)
            positions.append(next(i for i, t in enumerate(words) if match_target(t, forms)))
        return tokens, positions


def load_labelled(folder: Path = LABELLED, words: Optional[Iterable[str]] = None, kind: Kind = "ambiguous") -> List[LabelledWord]:
    """The words of the set of one ``kind`` (or only those of ``words`` among them), in file-name order.

    ``kind``: "ambiguous" (the default: the words of two or more senses, which every figure averages
    over), "controls" (the one-sense control words) or "all".
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    names = json.loads((folder / "names.json").read_text(encoding="utf-8"))
    wanted = None if words is None else set(words)
    out = []
    for path in sorted(folder.glob("*.txt")):
        if wanted is not None and path.stem not in wanted:
            continue
        rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        bad = [i + 1 for i, row in enumerate(rows) if len(row) != 2 or row[0] not in names[path.stem]]
        if bad:
            raise ValueError(f"{path}: lines {bad[:5]} are not 'sense<TAB>sentence' with a sense listed in names.json")
        item = LabelledWord(path.stem, [r[1] for r in rows], [r[0] for r in rows], names[path.stem], IRREGULAR.get(path.stem, []))
        if kind == "all" or item.is_control == (kind == "controls"):
            out.append(item)
    return out


def occurrence_gold(item: LabelledWord, result: WordSenses) -> np.ndarray:
    """The gold sense index of each occurrence of ``result`` (its ``source`` is ``text I``, I the sentence)."""
    gold = item.gold
    return np.array([gold[int(o.source.split()[-1])] for o in result.occurrences])


def _normal(word: str) -> List[str]:
    lower = word.lower()
    return [lower, *inflection_bases(lower)]


def named(shown: Sequence[str], accepted: Sequence[str]) -> bool:
    """Whether one of the shown words (or its regular base form) is an accepted name."""
    ok = {a.lower() for a in accepted}
    return any(form in ok for word in shown for form in _normal(word))


@dataclass
class WordScore:
    word: str
    ari: Optional[float]  # None for a control: the ARI against a single gold label is degenerate
    n_senses: int
    gold_senses: int
    named: int  # large senses named by an accepted word of their majority gold sense
    large: int  # senses holding >= 15% of the occurrences
    names: List[str]
    name_hits: int = 0  # the words of the large senses' names that are accepted words of their majority gold sense
    name_words: int = 0  # the words of the large senses' names

    @property
    def is_control(self) -> bool:
        return self.gold_senses == 1


def score_word(item: LabelledWord, result: WordSenses, min_share: float = 0.15) -> WordScore:
    """ARI of the induced senses against gold (None for a control), and how many of the large senses carry an accepted name."""
    gold = occurrence_gold(item, result)
    labels = result.labels
    gold_names = sorted(set(item.senses))
    large = hit = name_hits = name_words = 0
    for sense in result.senses:
        members = labels == sense.id
        if members.sum() < min_share * len(labels):
            continue
        large += 1
        majority = gold_names[int(np.bincount(gold[members], minlength=len(gold_names)).argmax())]
        shown = [*sense.substitutes, *getattr(sense, "context", [])]
        hit += named(shown, item.accepted[majority])
        in_name = [w for w in sense.name.partition(": ")[2].split(" / ") if w]
        name_words += len(in_name)
        name_hits += sum(named([w], item.accepted[majority]) for w in in_name)
    ari = None if item.is_control else adjusted_rand(gold, labels)
    return WordScore(item.word, ari, len(result.senses), item.n_senses, hit, large, [s.name for s in result.senses], name_hits, name_words)


def _share(flags: Sequence[bool]) -> Optional[float]:
    return float(np.mean(flags)) if len(flags) else None


def promise_rates(scores: Sequence[WordScore]) -> Dict[str, Optional[float]]:
    """The number-of-senses rule's two promises: the share of the controls given exactly one sense, and
    the share of the ambiguous words given two or more (None where ``scores`` hold no word of that kind)."""
    return {
        "controls_one_sense": _share([s.n_senses == 1 for s in scores if s.is_control]),
        "ambiguous_two_or_more": _share([s.n_senses >= 2 for s in scores if not s.is_control]),
    }


def summary(scores: Sequence[WordScore]) -> Dict[str, Optional[float]]:
    """Over the ambiguous words of ``scores``: mean ARI, senses per word, the named share of the large
    senses and the share of their names' words that are accepted names (None without ambiguous
    words); with the counts of each kind and ``promise_rates``."""
    ambiguous = [s for s in scores if not s.is_control]
    large = sum(s.large for s in ambiguous)
    return {
        "mean_ari": float(np.mean([s.ari for s in ambiguous])) if ambiguous else None,
        "senses_per_word": float(np.mean([s.n_senses for s in ambiguous])) if ambiguous else None,
        "named_share": float(sum(s.named for s in ambiguous) / large) if large else 0.0,
        "name_words_accepted": float(sum(s.name_hits for s in ambiguous) / max(sum(s.name_words for s in ambiguous), 1)),
        "large_senses": large,
        "ambiguous_words": len(ambiguous),
        "controls": len(scores) - len(ambiguous),
        **promise_rates(scores),
    }
