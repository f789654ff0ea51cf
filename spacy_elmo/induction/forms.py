"""The forms of a target word that induction and ``change`` match, and the lines that say which.

A token is an occurrence of a target word when it is the word, a form the user listed
(``--words lie=lay/lain``), a regular inflection of the word (:func:`.substitutes.inflection_bases`:
banks, played, carrying) or one of its irregular forms: ``irregular_forms.tsv``, WordNet 3.0's
exception lists for nouns and verbs as spaCy's lookups data ships them (mice for mouse, went for go,
children for child), plus WordNet's ``-men`` plural of a ``-man`` noun (women). An irregular form
that is also a word of its own (saw for see, found for find, left for leave) is not matched unless
listed: :func:`forms_hint` names those. ``project/scripts/irregular_forms.py`` writes the table.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

TABLE = Path(__file__).with_name("irregular_forms.tsv")


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


def target_forms(words: Mapping[str, Sequence[str]]) -> Dict[str, str]:
    """``{lower-case form: word}`` for the given words: each word, the forms listed with it, then its
    irregular forms (a form listed, or a target word itself, keeps its own word)."""
    out: Dict[str, str] = {}
    for word, forms in words.items():
        for form in [word, *forms]:
            out.setdefault(form.lower(), word)
    for word in words:
        for form in irregular_forms(word):
            out.setdefault(form, word)
    return out


def form_counts(texts: Iterable[str]) -> Counter:
    """How often each form (lower case) occurs among the matched tokens ``texts``."""
    return Counter(t.lower() for t in texts)


def forms_line(word: str, counts: Counter, where: str = "") -> str:
    """``'mouse': forms matched: mouse 30, mice 14`` (most frequent first)."""
    found = ", ".join(f"{form} {n:,}" for form, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{word!r}: forms matched{where}: {found or 'none'}"


def forms_hint(words: Iterable[str]) -> str:
    """One line on how forms are matched and how to add more, naming the irregular forms of ``words`` not matched."""
    words = list(words)
    example = words[0] if words else "WORD"
    shared = [f"{w}: {'/'.join(shared_forms(w))}" for w in words if shared_forms(w)]
    unmatched = f"; not matched unless listed, being words of their own too: {', '.join(shared)}" if shared else ""
    return (
        "forms are matched as typed, by regular endings and by WordNet's irregular forms (mice, went); "
        f"list others after '=': --words {example}=FORM/FORM{unmatched}"
    )
