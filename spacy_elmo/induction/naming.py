"""Names a person can read for induced senses: distinctive context words and cleaned substitutes.

A sense is named by two kinds of words: the words around its occurrences that tell it apart
(:func:`distinctive_words`: the log-odds ratio with an informative Dirichlet prior, Monroe et al.
2008, of the sense's context words against the word's other senses, or against the corpus when
the word has one sense), and the LM's substitutes that tell it apart. Both pass :func:`readable`:
alphabetic words of two letters or more, no stop words, Roman numerals or book apparatus
(chapter, vol., page), never the target word itself (in the corpus's language: :mod:`..lang`); :func:`exclusive` then keeps a word under
one sense of a word only (the sense where it scores highest).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import sparse

from ..lang import language


def plural(n: int, noun: str) -> str:
    """``1 sense``, ``2 senses``, ``0 pairs``: a count and its noun, for what a person reads."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


_ROMAN = re.compile(r"^m{0,4}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$")


def stop_words(lang: str = "en") -> Collection[str]:
    """spaCy's stop words of language ``lang``."""
    return language(lang).stop_words


def readable(word: str, exclude: Collection[str] = (), lang: str = "en") -> bool:
    """Whether ``word`` can name a sense in language ``lang``: letters only, two or more (one Chinese
    or Japanese character will do), not a stop word, a Roman numeral, English book apparatus
    (chapter, vol, page, ...) or one of ``exclude`` (the target's forms)."""
    resources = language(lang)
    lower = word.lower()
    if not resources.long_enough(lower, 2) or not resources.is_word(lower) or lower in exclude:
        return False
    if lower in resources.unnamed:
        return False
    return not (_ROMAN.match(lower) and lower not in ("mix", "mild", "dim"))


def window_words(text: str, start: int, end: int, window: int = 10, lang: str = "en") -> List[str]:
    """The words (as written) within ``window`` words of ``text[start:end]`` (the target excluded)."""
    words = language(lang).words
    return [*words(text[:start])[-window:], *words(text[end:])[:window]]


def context_words(text: str, start: int, end: int, window: int = 10, lang: str = "en") -> List[str]:
    """The lower-case words within ``window`` words of ``text[start:end]`` (the target excluded)."""
    return [w.lower() for w in window_words(text, start, end, window, lang)]


def log_odds(
    counts: Mapping[str, float], rest: Mapping[str, float], prior: Mapping[str, float], prior_size: float = 100.0
) -> Dict[str, float]:
    """z-scores of the log-odds ratio of each word of ``counts`` against ``rest``, with an informative
    Dirichlet prior (``prior``: word counts of a background, scaled to ``prior_size`` pseudo-counts)."""
    total_prior = float(sum(prior.values())) or 1.0
    n, m = float(sum(counts.values())), float(sum(rest.values()))
    out: Dict[str, float] = {}
    for word, y in counts.items():
        alpha = prior_size * prior.get(word, 0.0) / total_prior + 0.01
        a0 = prior_size + 0.01 * len(prior)
        z = rest.get(word, 0.0)
        delta = np.log((y + alpha) / (n + a0 - y - alpha)) - np.log((z + alpha) / (m + a0 - z - alpha))
        out[word] = float(delta / np.sqrt(1.0 / (y + alpha) + 1.0 / (z + alpha)))
    return out


def distinctive_words(
    contexts: Sequence[Sequence[str]],
    labels: np.ndarray,
    background: Mapping[str, float],
    exclude: Collection[str] = (),
    min_count: int = 2,
    lang: str = "en",
) -> List[Dict[str, float]]:
    """Per sense (``labels`` 0..k-1), its readable context words (in language ``lang``) scored by
    log-odds z against the other senses (against ``background`` when there is one sense), positive
    scores only, best first.

    ``contexts[i]``: occurrence i's context words (each counted once per occurrence, an inflected form
    as its base when the base occurs too)."""
    bases = language(lang).bases
    k = int(labels.max()) + 1 if len(labels) else 0
    seen = {w for words in contexts for w in words}
    per: List[Counter] = [Counter() for _ in range(k)]
    for words, label in zip(contexts, labels):  # inflections folded onto a base seen too: "genes" counts as "gene"
        per[int(label)].update(
            {next((b for b in bases(w) if b in seen and readable(b, exclude, lang)), w) for w in words if readable(w, exclude, lang)}
        )
    prior: Counter = Counter()
    for sense_counts in per:
        prior.update(sense_counts)
    prior.update({w: v for w, v in background.items() if readable(w, exclude, lang)})
    out = []
    for c in range(k):
        if k > 1:
            rest: Counter = Counter()
            for other in range(k):
                if other != c:
                    rest.update(per[other])
        else:
            rest = Counter({w: v for w, v in background.items() if readable(w, exclude, lang)})
        counts = {w: float(v) for w, v in per[c].items() if v >= min_count}
        scores = log_odds(counts, rest, prior)
        out.append(dict(sorted(((w, s) for w, s in scores.items() if s > 0), key=lambda item: -item[1])))
    return out


def exclusive(scored: Sequence[Mapping[str, float]]) -> List[List[str]]:
    """Each sense's words (best first), a word shared by several senses kept only where it scores highest."""
    best: Dict[str, int] = {}
    for c, scores in enumerate(scored):
        for word, score in scores.items():
            if word not in best or score > scored[best[word]][word]:
                best[word] = c
    return [[w for w in scores if best[w] == c] for c, scores in enumerate(scored)]


def ranked(*lists: Sequence[str]) -> Dict[str, float]:
    """``{word: 1 / (1 + its best rank)}`` over several best-first lists (to compare words across kinds)."""
    out: Dict[str, float] = {}
    for words in lists:
        for rank, word in enumerate(words):
            out[word] = max(out.get(word, 0.0), 1.0 / (1 + rank))
    return out


def sense_name(word: str, context: Sequence[str], substitutes: Sequence[str], n: int = 3) -> str:
    """``"bank: money / loan / deposit"``: the first ``n`` words, context and substitutes in turn."""
    merged: List[str] = []
    for pair in zip(list(context) + [""] * n, list(substitutes) + [""] * n):
        for w in pair:
            if w and w not in merged:
                merged.append(w)
    return f"{word}: {' / '.join(merged[:n])}" if merged else word


def distinctive_substitutes(
    mass: Any,
    labels: np.ndarray,
    vocab: Sequence[str],
    prior: Optional[np.ndarray] = None,
    exclude: Collection[str] = (),
    lang: str = "en",
    min_t: float = 3.0,
    floor: float = 1e-3,
    min_lift: float = float(np.log(3.0)),
) -> List[Dict[str, float]]:
    """Per sense (``labels`` 0..k-1), the readable substitutes that the LM predicts more often in its
    occurrences than elsewhere, best first: ``mass`` is ``[n, V]`` (sparse), each occurrence's plain LM
    probability of each word. A word passes Welch's t-test, ``t >= min_t``, of its mean probability in
    the sense against the word's other occurrences (against ``prior``, the LM's mean prediction over
    the corpus, when there is one sense) and is at least ``exp(min_lift)`` times as likely there
    (``floor`` added to both means), and is scored by that log lift. So a word the LM gives a sliver
    of probability everywhere (a rare word lifted by the prior correction) names nothing."""
    mass = sparse.csr_matrix(mass, dtype=np.float64)
    k = int(labels.max()) + 1 if len(labels) else 0
    columns = np.flatnonzero(mass.getnnz(axis=0))  # words predicted somewhere
    mass = mass[:, columns]  # sparse throughout: n occurrences x the words predicted (never dense)

    def mean_and_error(rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:  # the mean and its squared standard error
        part = mass[rows]
        n = part.shape[0]
        mean = np.asarray(part.sum(0)).ravel() / n
        if n < 2:
            return mean, np.zeros(len(columns))
        squares = np.asarray(part.multiply(part).sum(0)).ravel()
        return mean, np.maximum(squares - n * mean**2, 0.0) / (n - 1) / n

    out: List[Dict[str, float]] = []
    for c in range(k):
        inside, outside = labels == c, labels != c
        if not inside.any():
            out.append({})
            continue
        mean_a, var_a = mean_and_error(np.flatnonzero(inside))
        if outside.any() and k > 1:
            mean_b, var_b = mean_and_error(np.flatnonzero(outside))
        elif prior is not None:
            mean_b, var_b = prior[columns], np.zeros(len(columns))
        else:
            out.append({})
            continue
        diff = mean_a - mean_b
        t = diff / np.sqrt(np.maximum(var_a + var_b, 1e-30))
        lift = np.log((mean_a + floor) / (mean_b + floor))
        scores: Dict[str, float] = {}
        for j in np.argsort(-lift):
            if diff[j] <= 0 or lift[j] < min_lift:
                break
            word = vocab[int(columns[j])].lower()
            if t[j] >= min_t and word not in scores and readable(word, exclude, lang):
                scores[word] = float(lift[j])
        out.append(scores)
    return out
