"""Which words are used differently in two corpora: the measures per word, sense by sense.

For each target word, a bounded sample of its occurrences is taken from each corpus while the
corpora stream (:mod:`.sample`); the biLM reads every sampled occurrence once, and the word's
senses are induced jointly over both samples (:class:`..induction.induce.Inducer`), so that the two
corpora's sense shares are shares of the same senses. The word then gets every measure of
:mod:`.measures`, a bootstrap interval for each, a binary call (a permutation test), and an
explanation: each sense with its share in A and in B, whether it appeared, vanished, grew or
shrank, and example sentences from each corpus.

    >>> report = detect_change("books/", "news/", ["broadcast", "gay"])   # doctest: +SKIP
    >>> report.words[0].measures["apd"]                                    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..bilm import BiLM
from ..induction.corpus import Corpus, read_sentences
from ..induction.forms import join_runs
from ..induction.induce import Inducer, InductionSettings, _window, central_first, frequent_words, match_target, target_forms
from ..induction.induced import Occurrence, WordSenses
from ..induction.substitutes import LMHead
from .measures import (
    MEASURES,
    BinaryRule,
    benjamini_hochberg,
    energy_pvalue,
    estimates_and_intervals,
    non_finite_rows,
    permutation_pvalue,
    sense_counts,
    sense_shares,
    share_change_pvalue,
    unit,
    whitened,
)
from .sample import CorpusSamples, Sampled

# The measure words are ranked by, and the vectors it compares, unless told otherwise: the best on
# the dev half of the synthetic SemCor benchmark with the embedded default and with the v2
# candidate (docs/change.md#choosing-the-default-measure; bench/results/change-synthetic-both*.json).
DEFAULT_MEASURE = "mahal"
VECTORS = ("elmo", "context", "both")
DEFAULT_VECTORS = "both"
# The binary call's test: the energy distance over the senses' own representation, chosen on the dev
# lemmas of the synthetic benchmark and the labelled and natural flip sets (bench/change_tests.py;
# docs/change.md#the-binary-call-which-test)
TESTS = ("energy", "measure")
DEFAULT_TEST = "energy"
SHARE_STEP = 0.1  # a sense "grew" or "shrank" when its share moved by at least this much
Words = Union[None, Sequence[str], Mapping[str, Sequence[str]]]


@dataclass
class ChangeSettings:
    """How change is measured.

    max_occurrences: occurrences sampled per word and corpus (a uniform sample beyond: bounded memory).
    min_occurrences: a word with fewer in either corpus is reported without measures.
    test: what the binary call tests: ``energy`` (the energy distance between the two corpora's
        occurrences in the representation their senses were induced from, :func:`.measures.energy_pvalue`:
        any difference of distribution, a sense gained or lost or shares moved) or ``measure`` (the
        ranking ``measure`` itself, the call before issue 47's test was chosen; docs/change.md).
    alpha / n_permutations: the test shuffles the corpus labels of the word's occurrences
        ``n_permutations`` times; a word is called changed when its Benjamini-Hochberg q-value over
        the words measured together is at most ``alpha`` (the expected share of false calls among
        the words called changed); a sense's share change is within noise when Fisher's exact test
        of its counts gives p > ``alpha``.
    rule: SemEval-2020 Task 1's counts (a sense with at most ``rule.at_most`` occurrences in one
        corpus and at least ``rule.at_least`` in the other was gained or lost): a sense's status.
    n_resamples / confidence: the bootstrap's replicates and interval.
    measure: what the ranking sorts by (one of :data:`.measures.MEASURES`).
    vectors: what APD, APD-c, PRT and MAHAL compare: ``elmo`` (each occurrence's ELMo vector),
        ``context`` (its context vector, :mod:`..induction.context`) or ``both`` (the two side by
        side, :func:`occurrence_vectors`).
    induction: the sense induction's settings (its ``max_occurrences`` is set to hold both samples).
    """

    max_occurrences: int = 200
    min_occurrences: int = 10
    test: str = DEFAULT_TEST
    alpha: float = 0.05
    n_permutations: int = 999
    rule: BinaryRule = field(default_factory=BinaryRule)
    n_resamples: int = 200
    confidence: float = 0.95
    measure: str = DEFAULT_MEASURE
    vectors: str = DEFAULT_VECTORS
    n_examples: int = 3
    seed: int = 0
    induction: InductionSettings = field(default_factory=InductionSettings)

    def __post_init__(self) -> None:
        if self.measure not in MEASURES:
            raise ValueError(f"measure must be one of {', '.join(MEASURES)}, got {self.measure!r}")
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {', '.join(TESTS)}, got {self.test!r}")
        if self.vectors not in VECTORS:
            raise ValueError(f"vectors must be one of {', '.join(VECTORS)}, got {self.vectors!r}")
        if self.max_occurrences < 2 or self.min_occurrences < 2:
            raise ValueError(
                f"max_occurrences and min_occurrences must be 2 or more, got {self.max_occurrences} and {self.min_occurrences}"
            )
        if self.min_occurrences > self.max_occurrences:
            raise ValueError(f"min_occurrences ({self.min_occurrences}) is above max_occurrences ({self.max_occurrences})")
        if not 0 < self.alpha < 1 or self.n_permutations < 1:
            raise ValueError(f"alpha must be in (0, 1) and n_permutations >= 1, got {self.alpha} and {self.n_permutations}")
        if self.n_resamples < 1 or not 0 < self.confidence < 1:
            raise ValueError(f"n_resamples must be >= 1 and confidence in (0, 1), got {self.n_resamples} and {self.confidence}")


@dataclass
class SenseChange:
    """One jointly induced sense of a word: its share and count in each corpus and what happened to it."""

    id: int
    name: str
    substitutes: List[str]
    share_a: float
    share_b: float
    count_a: int
    count_b: int
    status: str  # appeared, vanished, grew, shrank or stable (A -> B)
    examples_a: List[int]  # indices into WordChange.word_senses.occurrences, most representative first
    examples_b: List[int]
    share_p: Optional[float] = None  # Fisher's exact test of the sense's counts in A against B (None: not tested)
    within_noise: Optional[bool] = None  # the share moved by no more than sampling gives (share_p > alpha)


@dataclass
class WordChange:
    """How one word's use differs between corpus A and corpus B."""

    word: str
    n_a: int  # occurrences sampled (and measured) in A
    n_b: int
    seen_a: int  # occurrences streamed in A (the sample is drawn from them)
    seen_b: int
    measures: Dict[str, float] = field(default_factory=dict)
    intervals: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    changed: Optional[bool] = None  # the binary call (None: too few occurrences to measure)
    p_value: Optional[float] = None  # the binary call's permutation test (None: not measured)
    test: Optional[str] = None  # what it tested: "energy" or the ranking measure
    q_value: Optional[float] = None  # its Benjamini-Hochberg adjustment over the words measured together
    binary_counts_a: List[int] = field(default_factory=list)  # per sense id: the counts the binary call used (equal_size_counts)
    binary_counts_b: List[int] = field(default_factory=list)
    senses: List[SenseChange] = field(default_factory=list)
    note: Optional[str] = None  # why the word, or one of its measures, was not measured
    rank: Optional[int] = None
    word_senses: Optional[WordSenses] = None  # the occurrences of both corpora and their senses (for explore)

    @property
    def measured(self) -> bool:
        return bool(self.measures)


@dataclass
class ChangeReport:
    """The words of two corpora ranked by how much their use differs."""

    names: Tuple[str, str]
    measure: str
    words: List[WordChange]
    settings: Dict[str, Any]
    seconds: float = 0.0


def sense_status(gained: bool, lost: bool, share_a: float, share_b: float) -> str:
    """What happened to a sense from A to B (see :data:`SHARE_STEP`)."""
    if gained:
        return "appeared"
    if lost:
        return "vanished"
    if share_b - share_a >= SHARE_STEP:
        return "grew"
    if share_a - share_b >= SHARE_STEP:
        return "shrank"
    return "stable"


def _examples(weights: np.ndarray, members: np.ndarray, sense: int, n: int, similarity: Optional[np.ndarray]) -> List[int]:
    """Up to ``n`` of ``members`` (one corpus's occurrences) in ``sense``, most central first: nearest
    the medoid of the sense's occurrences in both corpora (``similarity``: their cosine similarities in
    the representation the senses were cut from), ties broken by weight; by weight alone without it."""
    everyone = np.flatnonzero(weights.argmax(1) == sense)
    order, _ = central_first(everyone, similarity, weights[:, sense])
    return [int(i) for i in order[np.isin(order, members)][:n]]


def occurrence_similarity(ws: WordSenses) -> Optional[np.ndarray]:
    """Cosine similarities of the occurrences in the representation their senses were cut from
    (:attr:`WordSenses.vectors`), or None when it is not stored."""
    shown = np.asarray(ws.vectors, dtype=np.float64)
    if shown.ndim != 2 or len(shown) != len(ws.occurrences) or not shown.shape[1]:
        return None
    rows = unit(shown)
    return rows @ rows.T


def equal_size_counts(counts_a: np.ndarray, counts_b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Sense counts as in two samples of the smaller sample's size (the larger's scaled down, rounded):
    SemEval's rule counts occurrences in samples of about equal size, so 5 of 10 is not 5 of 200."""
    size = min(int(counts_a.sum()), int(counts_b.sum()))
    scaled = [np.rint(c * size / max(int(c.sum()), 1)).astype(np.int64) if int(c.sum()) != size else c for c in (counts_a, counts_b)]
    return scaled[0], scaled[1]


def occurrence_vectors(ws: WordSenses, kind: str) -> np.ndarray:
    """float32 ``[occurrences, dim]``: the vectors the measures compare (see :class:`ChangeSettings`).

    ``both`` joins each occurrence's unit context vector with its unit ELMo vector less the word's
    mean ELMo vector (what sets the occurrence apart), so each half weighs the same."""
    if kind not in VECTORS:
        raise ValueError(f"vectors must be one of {', '.join(VECTORS)}, got {kind!r}")
    needed = {"elmo": ["elmo"], "context": ["context"], "both": ["context", "elmo"]}[kind]
    missing = [f"{name}_vectors" for name in needed if f"{name}_vectors" not in ws.extra]
    if missing:
        raise ValueError(f"the senses of {ws.word!r} carry no {' or '.join(missing)}: measure them with vectors={kind!r} from the start")
    found = [np.asarray(ws.extra[f"{name}_vectors"], dtype=np.float32) for name in needed]
    if kind != "both":
        return found[0]
    context, elmo = found
    return np.hstack([unit(context), unit(elmo - elmo.mean(0, keepdims=True))]).astype(np.float32)


def compare_word(ws: WordSenses, n_a: int, settings: ChangeSettings, seen: Tuple[int, int], names: Tuple[str, str]) -> WordChange:
    """The measures, intervals, binary call and sense explanations of one word whose first ``n_a``
    occurrences come from A and the rest from B; tags ``ws`` with each occurrence's corpus."""
    n_b = len(ws.occurrences) - n_a
    corpus = np.array([0] * n_a + [1] * n_b, dtype=np.int8)
    ws.extra.update({"corpus": corpus, "corpus_names": list(names)})
    change = WordChange(ws.word, n_a, n_b, seen[0], seen[1], word_senses=ws)
    if min(n_a, n_b) < settings.min_occurrences:
        change.note = (
            f"{ws.word!r}: {n_a} occurrences in {names[0]} and {n_b} in {names[1]} (fewer than {settings.min_occurrences}): not measured"
        )
        return change
    vectors = occurrence_vectors(ws, settings.vectors)
    refuse_non_finite(ws.word, ws.occurrences, vectors, n_a, names, f"{settings.vectors!r} vectors")
    weights = np.asarray(ws.weights, dtype=np.float64)
    a, b = vectors[:n_a], vectors[n_a:]
    wa, wb = weights[:n_a], weights[n_a:]
    measures, intervals = estimates_and_intervals(a, b, wa, wb, settings.n_resamples, settings.confidence, settings.seed)
    change.measures = {k: v for k, v in measures.items() if np.isfinite(v)}
    change.intervals = {k: v for k, v in intervals.items() if k in change.measures}
    if "mahal" not in change.measures:
        axes = whitened(a, b)[0].shape[1]
        last = ", ranked last" if settings.measure == "mahal" else ""
        change.note = f"{ws.word!r}: too few occurrences for MAHAL ({n_a} + {n_b} < its {axes} axes + 2): not computed{last}"
    tested = settings.measure if settings.measure in change.measures else next(k for k in ("apd_c", "prt") if k in change.measures)
    if settings.test == "energy":
        change.test = "energy"
        change.p_value = energy_pvalue(np.asarray(ws.vectors, np.float64), n_a, settings.n_permutations, settings.seed)
    else:
        change.test = tested
        change.p_value = permutation_pvalue(a, b, wa, wb, tested, settings.n_permutations, settings.seed)
    if np.isfinite(change.p_value):  # alone, the word's own test; compare_samples adjusts over the words measured together
        change.q_value, change.changed = change.p_value, bool(change.p_value <= settings.alpha)
    counts_a, counts_b = sense_counts(wa), sense_counts(wb)
    used_a, used_b = equal_size_counts(counts_a, counts_b)
    gained, lost = settings.rule.changes(used_a, used_b)
    change.binary_counts_a, change.binary_counts_b = [int(c) for c in used_a], [int(c) for c in used_b]
    shares_a, shares_b = sense_shares(wa), sense_shares(wb)
    members_a, members_b = np.arange(n_a), np.arange(n_a, n_a + n_b)
    similarity = occurrence_similarity(ws)
    for sense in ws.senses:
        s = sense.id
        change.senses.append(
            SenseChange(
                s,
                sense.name,
                list(sense.substitutes),
                float(shares_a[s]),
                float(shares_b[s]),
                int(counts_a[s]),
                int(counts_b[s]),
                sense_status(s in gained, s in lost, float(shares_a[s]), float(shares_b[s])),
                _examples(weights, members_a, s, settings.n_examples, similarity),
                _examples(weights, members_b, s, settings.n_examples, similarity),
            )
        )
        p = share_change_pvalue(int(counts_a[s]), n_a, int(counts_b[s]), n_b)
        change.senses[-1].share_p, change.senses[-1].within_noise = p, p > settings.alpha
    ws.extra["change"] = {"measures": change.measures, "changed": change.changed, "p_value": change.p_value}
    ws.extra["shares"] = [[float(shares_a[s]), float(shares_b[s])] for s in range(len(ws.senses))]
    return change


def rank_words(changes: List[WordChange], measure: str) -> List[WordChange]:
    """Measured words first, by ``measure`` (highest first; those without it, such as MAHAL on too few
    occurrences, last), then the unmeasured; sets ``rank`` (1 = most changed) on the measured."""
    scored = sorted((c for c in changes if measure in c.measures), key=lambda c: -c.measures[measure])
    measured = scored + [c for c in changes if c.measured and measure not in c.measures]
    for rank, c in enumerate(measured, 1):
        c.rank = rank
    return measured + [c for c in changes if not c.measured]


def refuse_non_finite(
    word: str, occurrences: Sequence[Occurrence], vectors: np.ndarray, n_a: int, names: Tuple[str, str], what: str
) -> None:
    """A clear error naming ``word`` when its ``vectors`` (one row per occurrence, the first ``n_a``
    from A) hold NaN or an infinite value: no measure means anything then."""
    bad = non_finite_rows(vectors)
    if len(bad):
        first = int(bad[0])
        o = occurrences[first] if first < len(occurrences) else None
        where = f"; the first in {names[0] if first < n_a else names[1]}: {' '.join(o.text.split())[:80]!r}" if o is not None else ""
        raise ValueError(
            f"the {what} of {word!r} hold NaN or infinite values in {len(bad)} of {len(vectors)} occurrences{where}: "
            "the biLM's output is broken (check its weights)"
        )


def compare_samples(
    samples: Mapping[str, Tuple[Sequence[Sampled], Sequence[Sampled]]],
    bilm: BiLM,
    head: Optional[LMHead],
    settings: Optional[ChangeSettings] = None,
    *,
    names: Tuple[str, str] = ("A", "B"),
    seen: Optional[Mapping[str, Tuple[int, int]]] = None,
    forms: Optional[Mapping[str, Sequence[str]]] = None,
    progress: bool = False,
) -> List[WordChange]:
    """:func:`compare_word` for each word of ``samples`` (``{word: (occurrences in A, occurrences in B)}``),
    in that order: the biLM reads them all first (the induction's prior is their mean prediction),
    then each word's senses are induced over its two samples together."""
    from ..progress import progress_bar

    settings = settings or ChangeSettings()
    largest = max((len(a) + len(b) for a, b in samples.values()), default=1)
    induction = dataclasses.replace(settings.induction, max_occurrences=max(largest, 1))
    inducer = Inducer(bilm, head, induction)
    total = sum(len(a) + len(b) for a, b in samples.values())
    bar = progress_bar(total=total, desc="read occurrences", unit=" occurrences", disable=not progress)
    with torch.inference_mode():
        for word, (in_a, in_b) in samples.items():
            for item in [*in_a, *in_b]:
                inducer.add(word, item.tokens, item.position, item.occurrence)
                bar.update(1)
        inducer.flush()
    bar.close()
    out = []
    for word, (in_a, in_b) in samples.items():
        store = inducer.stores.get(word)
        if store is not None and store.rows:  # before the induction, whose SVD would fail on them without naming the word
            refuse_non_finite(word, store.occurrences, np.stack([r[0] for r in store.rows]), len(in_a), names, "ELMo vectors")
        ws = inducer.word_senses(word, list((forms or {}).get(word, ())))
        if settings.vectors in ("context", "both") and "context_vectors" not in ws.extra:
            ws.extra["context_vectors"] = inducer.context_vectors(ws.occurrences, ws.forms).astype(np.float16)
        counts = (seen or {}).get(word, (len(in_a), len(in_b)))
        out.append(compare_word(ws, len(in_a), settings, counts, names))
    call_changes(out, settings.alpha)
    return out


def call_changes(changes: Sequence[WordChange], alpha: float) -> None:
    """The binary call of every measured word of ``changes``: its permutation p-value adjusted over
    them all (Benjamini-Hochberg), changed when the q-value is at most ``alpha``."""
    tested = [(c, c.p_value) for c in changes if c.p_value is not None and np.isfinite(c.p_value)]
    for (change, _), q in zip(tested, benjamini_hochberg([p for _, p in tested])):
        change.q_value = float(q)
        change.changed = bool(q <= alpha)
        if change.word_senses is not None:
            change.word_senses.extra["change"] = {
                "measures": change.measures,
                "changed": change.changed,
                "p_value": change.p_value,
                "q_value": q,
            }


def candidate_words(corpus_a: Corpus, corpus_b: Corpus, n: int, min_count: int, lang: str = "en") -> Dict[str, List[str]]:
    """The ``n`` content words (of language ``lang``) frequent in both corpora (by the lower of their two frequency ranks), with their forms."""
    pool = max(20 * n, 200)
    in_a = frequent_words(corpus_a, pool, min_count=min_count, lang=lang)
    in_b = frequent_words(corpus_b, pool, min_count=min_count, lang=lang)
    rank_a = {w: i for i, w in enumerate(in_a)}
    rank_b = {w: i for i, w in enumerate(in_b)}
    shared = sorted(set(rank_a) & set(rank_b), key=lambda w: (max(rank_a[w], rank_b[w]), w))[:n]
    return {w: sorted(set(in_a[w]) | set(in_b[w])) for w in shared}


def sample_corpora(
    corpora: Sequence[Corpus], words: Mapping[str, Sequence[str]], limit: int, seed: int = 0, progress: bool = True, lang: str = "en"
) -> CorpusSamples:
    """Stream each corpus once (read in language ``lang``) and keep at most ``limit`` occurrences of each word per corpus (seeded
    reservoir samples), each as its sentence cut to the window ``induce`` reads (:data:`..induction.induce.MAX_WINDOW`
    tokens either side): the biLM's work and the report's text per occurrence are bounded, whatever a line's length."""
    from ..progress import progress_bar

    forms = target_forms(words, lang)
    samples = CorpusSamples(len(corpora), limit, seed)
    for index, corpus in enumerate(corpora):
        bar = progress_bar(desc=f"sample corpus {'AB'[index] if index < 2 else index}", unit=" sentences", disable=not progress)
        for sentence in read_sentences(corpus, lang=lang):
            bar.update(1)
            sentence = join_runs(sentence, forms, lang)  # a target spelled by several tokens (zh, ja, th): one token
            for position, token in enumerate(sentence.tokens):
                word = match_target(token, forms, lang)
                if word is None:
                    continue
                around, at, occurrence = _window(sentence.text, sentence.tokens, sentence.spans, position, sentence.source)
                samples.offer(index, word, Sampled(tuple(around), at, occurrence))
        bar.close()
    return samples


def detect_change(
    corpus_a: Corpus,
    corpus_b: Corpus,
    words: Words = None,
    *,
    n_words: int = 20,
    names: Tuple[str, str] = ("A", "B"),
    weights: Optional[Any] = None,
    bilm: Optional[BiLM] = None,
    head: Optional[LMHead] = None,
    settings: Optional[ChangeSettings] = None,
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
) -> ChangeReport:
    """Measure how each of ``words`` is used differently in ``corpus_b`` than in ``corpus_a``.

    corpus_a / corpus_b: text files, folders of them, DocBins, or lists of Docs or strings (see
        :mod:`..induction.corpus`). Each is read once (twice without ``words``).
    words: target words (a list, or ``{word: [other forms]}``); ``None`` takes the ``n_words``
        content words frequent in both corpora (the corpora must then be paths or lists).
    weights / bilm / head: the biLM (default: the embedded model) and its LM head.
    Returns a :class:`ChangeReport`, words ranked by ``settings.measure``.
    """
    from ..induction.induce import load_head

    started = time.perf_counter()
    settings = settings or ChangeSettings()
    if bilm is None:
        from ..hub.load import load_bilm

        bilm = load_bilm(weights)
    if head is None:
        head = load_head(weights)
    if head is None and settings.induction.uses_substitutes:
        raise ValueError(
            f"the biLM {weights or 'en_default'} carries no LM head (softmax.pt + vocab.txt): induce senses with representation='vectors'"
        )
    if words is None:
        for corpus in (corpus_a, corpus_b):
            if not isinstance(corpus, (str, list, tuple)) and not hasattr(corpus, "__fspath__"):
                raise ValueError("finding the target words reads each corpus twice: pass paths or lists, or name the words")
        table = candidate_words(corpus_a, corpus_b, n_words, settings.min_occurrences, settings.induction.lang)
        if log:
            log(f"{len(table)} content words frequent in both corpora: {', '.join(list(table)[:10])}{' ...' if len(table) > 10 else ''}")
    elif isinstance(words, Mapping):
        table = {w: list(f) for w, f in words.items()}
    else:
        table = {w: [] for w in words}
    if not table:
        raise ValueError("no target words: name them, or give corpora that share frequent content words")
    samples = sample_corpora([corpus_a, corpus_b], table, settings.max_occurrences, settings.seed, progress, settings.induction.lang)
    pairs = {w: (samples.items(0, w), samples.items(1, w)) for w in table}
    seen = {w: (samples.seen(0, w), samples.seen(1, w)) for w in table}
    changes = compare_samples(pairs, bilm, head, settings, names=names, seen=seen, forms=table, progress=progress)
    return ChangeReport(
        names, settings.measure, rank_words(changes, settings.measure), settings_dict(settings), time.perf_counter() - started
    )


def settings_dict(settings: ChangeSettings) -> Dict[str, Any]:
    """The settings as JSON values (for the report)."""
    out = dataclasses.asdict(settings)
    mix = settings.induction.mix
    out["induction"]["mix"] = "the average of the contextual layers" if mix is None else list(mix)
    return out
