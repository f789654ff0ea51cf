"""The forms of a target word that induction and ``change`` match, and the lines that say which.

A token is an occurrence of a target word when it is the word, a form the user listed
(``--words lie=lay/lain``), or a form the language's resources reach (:mod:`..lang`): in English,
a regular inflection (banks, played, carrying) or one of WordNet's irregular forms (mice for mouse,
went for go, children for child, women for woman; :mod:`..lang.english`); in another language, the
forms whose lemma spaCy's lookup table gives as the word, when spacy-lookups-data is installed. An
irregular form that is also a word of its own (saw for see, found for find, left for leave) is
not matched unless listed: :func:`forms_hint` names those. In a language written without spaces
(Chinese, Japanese, Thai), where spaCy's tokens may be single characters, a target word of several
characters is matched on the run of tokens that spells it (:func:`join_runs`).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

from ..lang import language
from ..lang.english import TABLE, irregular_forms, shared_forms
from .corpus import Sentence

__all__ = ["TABLE", "form_counts", "forms_hint", "forms_line", "irregular_forms", "join_runs", "shared_forms", "target_forms"]


def target_forms(words: Mapping[str, Sequence[str]], lang: str = "en") -> Dict[str, str]:
    """``{lower-case form: word}`` for the given words: each word, the forms listed with it, then its
    irregular forms in language ``lang`` (a form listed, or a target word itself, keeps its own word)."""
    resources = language(lang)
    out: Dict[str, str] = {}
    for word, forms in words.items():
        for form in [word, *forms]:
            out.setdefault(form.lower(), word)
    for word in words:
        for form in resources.irregular_forms(word):
            out.setdefault(form, word)
    return out


def form_counts(texts: Iterable[str]) -> Counter:
    """How often each form (lower case) occurs among the matched tokens ``texts``."""
    return Counter(t.lower() for t in texts)


def forms_line(word: str, counts: Counter, where: str = "") -> str:
    """``'mouse': forms matched: mouse 30, mice 14`` (most frequent first)."""
    found = ", ".join(f"{form} {n:,}" for form, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{word!r}: forms matched{where}: {found or 'none'}"


def forms_hint(words: Iterable[str], lang: str = "en") -> str:
    """One line on how forms are matched in language ``lang`` and how to add more, naming the irregular
    forms of ``words`` not matched."""
    resources = language(lang)
    words = list(words)
    example = words[0] if words else "WORD"
    shared = [f"{w}: {'/'.join(resources.shared_forms(w))}" for w in words if resources.shared_forms(w)]
    unmatched = f"; not matched unless listed, being words of their own too: {', '.join(shared)}" if shared else ""
    return f"{resources.forms_rule()}; list others after '=': --words {example}=FORM/FORM{unmatched}"


def join_runs(sentence: Sentence, forms: Mapping[str, str], lang: str = "en") -> Sentence:
    """``sentence`` with each run of adjacent tokens that spells a target form of several
    characters (longest first, left to right) made one token, in a language written without spaces
    (:attr:`~spacy_elmo.lang.Language.without_spaces`); other languages' sentences are returned as
    they are. ``forms``: ``{lower-case form: word}`` (:func:`target_forms`)."""
    longest = max((len(f) for f in forms if len(f) > 1), default=0)
    if not longest or not language(lang).without_spaces:
        return sentence
    tokens: List[str] = []
    spans: List[Tuple[int, int]] = []
    i, n = 0, len(sentence.tokens)
    while i < n:
        end, spelled, j = None, "", i
        while j < n and len(spelled) < longest and (j == i or sentence.spans[j][0] == sentence.spans[j - 1][1]):
            spelled += sentence.tokens[j]
            j += 1
            if j - i > 1 and spelled.lower() in forms:
                end = j
        if end is None:
            tokens.append(sentence.tokens[i])
            spans.append(sentence.spans[i])
            i += 1
            continue
        start, stop = sentence.spans[i][0], sentence.spans[end - 1][1]
        tokens.append(sentence.text[start:stop])
        spans.append((start, stop))
        i = end
    return Sentence(sentence.text, tokens, spans, sentence.source)
