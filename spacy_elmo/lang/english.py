"""English word forms: the regular inflection rules and WordNet's irregular forms.

:func:`inflection_bases` undoes a regular inflection (banks, played, carrying, starring). The
irregular forms are ``irregular_forms.tsv``, WordNet 3.0's exception lists for nouns and verbs as
spaCy's lookups data ships them (mice for mouse, went for go, children for child), plus WordNet's
``-men`` plural of a ``-man`` noun (women); a form that is also a word of its own (saw for see,
found for find) is listed apart, as shared. ``project/scripts/irregular_forms.py`` writes the table.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Dict, List, Tuple

TABLE = Path(__file__).with_name("irregular_forms.tsv")

# a word of running text, for the context words of an occurrence (ASCII letters, one inner apostrophe)
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")

# book apparatus and abbreviations that name no sense, and archaic function words spaCy's list lacks
APPARATUS = frozenset(
    "chapter chapters chap ch vol vols volume volumes page pages pp ibid op cit loc viz cf etc ed eds edn footnote footnotes "
    "sect fol fols ms mss appendix preface introduction contents index plate mr mrs messrs dr st esq sir madam "
    "thou thee thy thine ye hath doth shalt wilt art hast didst dost unto upon whilst hitherto thereof whereof "
    "shall nt ll ve re".split()
)

_VOWELS = frozenset("aeiou")


def _doubles_its_consonant(stem: str) -> bool:
    """Whether a base spelled ``stem`` doubles its last letter before -ing/-ed: one syllable ending in
    one vowel and one consonant other than w, x, y (star -> starring, hop -> hopped), so that
    "staring" and "hoped" cannot come from "star" and "hop"."""
    groups = sum(1 for i, c in enumerate(stem) if c in _VOWELS and (i == 0 or stem[i - 1] not in _VOWELS))
    return groups == 1 and len(stem) >= 3 and stem[-1] not in _VOWELS | {"w", "x", "y"} and stem[-2] in _VOWELS and stem[-3] not in _VOWELS


def inflection_bases(word: str) -> List[str]:
    """Candidate bases of a regularly inflected English word, likeliest first (none for short words)."""
    if len(word) < 4 or not word.isalpha():
        return []
    out: List[str] = []
    if word.endswith("ies"):
        out.append(word[:-3] + "y")
    if word.endswith("es"):
        out.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss"):
        out.append(word[:-1])
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            stem = word[: -len(suffix)]
            if not _doubles_its_consonant(stem):
                out.append(stem)
            out.append(stem + "e")
            if len(stem) > 2 and stem[-1] == stem[-2]:
                out.append(stem[:-1])
            if suffix == "ed" and stem.endswith("i"):
                out.append(stem[:-1] + "y")
    if word.endswith("d") and word.endswith("ed"):
        out.append(word[:-1])
    return out


@functools.lru_cache(maxsize=1)
def _table() -> Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """``{lemma: (forms matched, forms shared with another word)}`` read from :data:`TABLE`."""
    out: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            lemma, forms, shared = (line.split("\t") + ["", ""])[:3]
            out[lemma] = (tuple(forms.split()), tuple(shared.split()))
    return out


def irregular_forms(word: str) -> List[str]:
    """The irregular forms of ``word`` that are matched without being listed (``mouse`` -> ``["mice"]``)."""
    lower = word.lower()
    forms = list(_table().get(lower, ((), ()))[0])
    if lower.endswith("man") and len(lower) > 3:  # WordNet's rule: women, firemen
        forms.append(lower[:-3] + "men")
    return sorted(set(forms) - {lower})


def shared_forms(word: str) -> List[str]:
    """The irregular forms of ``word`` that are words of their own too, matched only when listed (``find`` -> ``["found"]``)."""
    return list(_table().get(word.lower(), ((), ()))[1])
