"""Word sense induction with the biLM's own language model (after Amrami & Goldberg 2018).

For each occurrence of a target word the forward LM (reading up to the word) and the backward LM
(reading back to it) each predict what could stand in its place (:mod:`.substitutes`). The
occurrences of a word are clustered (:mod:`.clustering`) by those substitutes, by their ELMo
vectors (less their form's mean, so that "cell" and "cells" in one context agree), or by both;
the number of senses is decided against a null: a word whose occurrences look like one
distribution gets one sense. Each occurrence then gets a
graded assignment: with substitutes, ``n_representatives`` small bags sampled from its two
predicted distributions (Amrami & Goldberg's representatives) each vote for their nearest sense,
and its full bag votes once more; with vectors, a softmax over its cosines to the senses'
centroids. Each sense is named by its most distinctive context words and substitutes ("bank:
river / water / shore", :mod:`.naming`) and shown by its most representative sentences.

The corpus is streamed (:mod:`.corpus`): per occurrence only its sentence, the LM states that
predict it (two, four with the symmetric pattern; float16) and one compact vector are kept, and
at most ``max_occurrences`` per word (a uniform sample of them beyond that). The LM's mean
prediction over every occurrence streamed is the prior the substitutes are corrected by; the
head reads the kept states when a word is clustered.

    >>> results = induce("texts/", ["bank", "cell"])            # doctest: +SKIP
    >>> inventory = build_inventory(results, fingerprint)        # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from scipy import sparse

from ..bilm import BiLM
from ..bilm.batching import plan_batches
from ..lang import language
from ..senses.inventory import SenseInventory
from . import DEFAULT_REPRESENTATION, SIGNIFICANCE
from .clustering import cosine_distances, cut_senses, embed_distances, remove_form, split_score, substitute_bags, tfidf, unit_rows
from .context import DEFAULT_WINDOW, SMOOTHING, ContextEmbedder
from .corpus import Corpus, _is_paths, corpus_files, read_sentences
from .forms import join_runs, target_forms
from .induced import Occurrence, Sense, WordSenses, load_word_senses, save_word_senses, word_senses_files
from .naming import context_words, distinctive_substitutes, distinctive_words, exclusive, plural, ranked, sense_name
from .substitutes import LMHead, content_mask, fold_vocabulary, lm_states

PARTS = ("substitutes", "vectors", "context")
ALIASES = {"both": "substitutes+vectors"}
REPRESENTATIONS = ("substitutes", "vectors", "context", "both", "substitutes+context", "vectors+context", "substitutes+vectors+context")
REPRESENTATION_CHOICES = f"{', '.join(PARTS)}, or several joined by '+' ({', '.join(REPRESENTATIONS[len(PARTS) :])})"
Words = Union[None, Sequence[str], Mapping[str, Sequence[str]]]
DEFAULT_MIX = (0.0, 1.0, 1.0)  # the vectors' layer weights for an LSTM biLM of two layers: the average of its two layers


def contextual_average(n_layers: int) -> Tuple[float, ...]:
    """The layer weights of the average of every layer above the token layer (``DEFAULT_MIX`` for the
    LSTM biLM's three layers; the same mix for a biLM of any depth, e.g. a 6-block transformer's 7)."""
    if n_layers < 2:
        raise ValueError(f"a biLM has its token layer and at least one contextual layer, got {n_layers} layers")
    return (0.0,) + (1.0,) * (n_layers - 1)


LANGUAGE_AND = "<and>"  # the pattern's default: the word for "and" of the settings' language


@dataclass
class InductionSettings:
    """How senses are induced (defaults: the representation chosen on the hand-labelled sense sets,
    the substitutes' settings on SemEval-2010; see docs/senses.md).

    representation: ``substitutes`` (the LM's predictions), ``vectors`` (the ELMo vectors under
        ``mix``), ``context`` (the words within ``context_window`` words, embedded with the biLM's
        own word vectors: :mod:`.context`), or several joined by ``+`` (their cosine similarities
        averaged; ``both`` = ``substitutes+vectors``).
    top_k: substitutes kept per direction and occurrence. temperature: applied to their
        log-probabilities (above 1 flattens, below sharpens).
    max_senses: at most this many senses per word (a cap; the number below it is decided per word
        against a null: :func:`.clustering.count_senses`).
    min_share: a sense holds at least this share of the word's occurrences (a split that would
        leave less on one side is not made).
    significance: a split into two senses is kept when it separates the occurrences better than
        one Gaussian with their spread would be, by this many standard deviations (z-score).
    test_axes: the test reads the ``test_axes`` leading principal axes of the occurrences being split
        (``None``: all of them). Reading the two leading axes, where a split between senses shows,
        and not the noise of the others, is what lets the rule keep the splits the features carry
        (chosen with ``significance`` on the hand-labelled sets and SemEval-2010's tuning words,
        checked on a held-out set and on synthetic clouds: docs/senses.md, "How many senses").
    n_senses: a fixed number of senses instead (for comparisons).
    min_occurrences: a word seen fewer times gets one sense (and a note saying so).
    max_occurrences: occurrences kept per word (a uniform sample beyond it: bounded memory).
    prior_weight: alpha of the prior correction: each direction's substitutes are ranked by
        ``log p(w | context) - alpha * log p(w)``, ``p(w)`` being the LM's mean prediction over
        every occurrence streamed (a word that every context predicts, "said", "mr.", is demoted);
        0 = the plain distributions.
    pattern: a word for Amrami & Goldberg's dynamic symmetric pattern (``"and"``: the forward LM
        reads "... X and" and predicts what follows, the backward LM "and X ..." and predicts what
        precedes); its two predictions join the plain two. ``None`` = the plain two only;
        :data:`LANGUAGE_AND` (the default) = the word for "and" of the language ``lang`` (``and``, ``und``, ``и``,
        ``和``, ...; ``None`` for a language whose word the package does not know).
    (Defaults ``prior_weight=0.75`` and, in English, ``pattern="and"``: the best on the SemEval-2010 tuning words.)
    n_representatives / sample_size: representatives per occurrence and substitutes drawn per
        direction for each (the graded assignment).
    mix: the layer weights of the vectors (default ``None``: the average of every layer above the token
        layer, the LSTM's two or a transformer's six: :func:`contextual_average`).
    context_window: words on each side that the ``context`` representation reads.
    context_smoothing: ``a > 0`` weighs each context word by ``a / (a + p(w))``, ``p(w)`` its share
        of the model's training text (smooth inverse frequency, where the vocabulary carries counts);
        0, the default, weighs every word alike: :mod:`.context`.
    lang: the spaCy language code of the corpus: its tokenizer, stop words and word forms
        (:mod:`..lang`); the commands' ``--lang``.
    """

    representation: str = DEFAULT_REPRESENTATION
    top_k: int = 100
    temperature: float = 0.5
    max_senses: int = 10
    min_share: float = 0.05
    significance: float = SIGNIFICANCE
    test_axes: Optional[int] = 2
    n_senses: Optional[int] = None
    min_occurrences: int = 10
    max_occurrences: int = 2000
    prior_weight: float = 0.75
    pattern: Optional[str] = LANGUAGE_AND
    n_representatives: int = 20
    sample_size: int = 4
    mix: Optional[Tuple[float, ...]] = None
    n_names: int = 3
    n_examples: int = 5
    seed: int = 0
    max_batch_tokens: int = 4000
    context_window: int = DEFAULT_WINDOW
    context_smoothing: float = SMOOTHING
    lang: str = "en"

    def __post_init__(self) -> None:
        if self.pattern == LANGUAGE_AND:  # the language's word for "and" (an unknown code is a one-line LanguageError here)
            self.pattern = language(self.lang).conjunction
        language(self.lang)
        if self.representation not in REPRESENTATIONS:
            raise ValueError(f"representation must be one of {REPRESENTATION_CHOICES}, got {self.representation!r}")
        if self.max_senses < 1 or (self.n_senses is not None and self.n_senses < 1):
            raise ValueError(f"max_senses and n_senses must be >= 1, got {self.max_senses} and {self.n_senses}")
        if not 0 <= self.min_share < 0.5:
            raise ValueError(f"min_share is the smallest share of a word's occurrences a sense may hold, in [0, 0.5), got {self.min_share}")
        if self.significance < 0:
            raise ValueError(f"significance is a z-score threshold, >= 0, got {self.significance}")
        if self.test_axes is not None and self.test_axes < 1:
            raise ValueError(f"test_axes is a number of principal axes, >= 1 (or None for all), got {self.test_axes}")
        if self.context_window < 1:
            raise ValueError(f"context_window is a number of words on each side, >= 1, got {self.context_window}")
        if not self.context_smoothing >= 0:
            raise ValueError(f"context_smoothing is the a of the context words' weights a / (a + p(w)), >= 0, got {self.context_smoothing}")
        if self.top_k < 1 or self.temperature <= 0 or self.max_occurrences < 1:
            raise ValueError("top_k and max_occurrences must be >= 1 and temperature > 0")
        if not 0 <= self.prior_weight <= 2:
            raise ValueError(f"prior_weight is the exponent alpha of the prior correction, in [0, 2], got {self.prior_weight}")
        if self.pattern is not None and (not self.pattern or self.pattern != self.pattern.strip() or len(self.pattern.split()) != 1):
            raise ValueError(f"pattern must be one word (e.g. 'and') or None, got {self.pattern!r}")
        self.mix = None if self.mix is None else tuple(float(w) for w in self.mix)

    def layer_weights(self, n_layers: int) -> Tuple[float, ...]:
        """:attr:`mix` for a biLM of ``n_layers`` layers (``None``: :func:`contextual_average`)."""
        if self.mix is None:
            return contextual_average(n_layers)
        if len(self.mix) != n_layers:
            raise ValueError(f"mix {list(self.mix)} needs one weight per biLM layer ({n_layers})")
        return self.mix

    @property
    def parts(self) -> Tuple[str, ...]:
        """The representations clustered together (``both`` = substitutes and vectors)."""
        return tuple(ALIASES.get(self.representation, self.representation).split("+"))

    @property
    def uses_substitutes(self) -> bool:
        return "substitutes" in self.parts


# ---------------------------------------------------------------------------------------------- targets


def match_target(token: str, forms: Mapping[str, str], lang: str = "en") -> Optional[str]:
    """The target word ``token`` is a form of: listed forms first, then inflections of a word (the bases of language ``lang``)."""
    lower = token.lower()
    if lower in forms:
        return forms[lower]
    for base in language(lang).bases(lower):
        if base in forms and forms[base].lower() == base:  # the base is a target word itself (as typed: Bank), not a listed form
            return forms[base]
    return None


@dataclass
class _Store:
    """What induction keeps of one word's occurrences (a reservoir sample of at most ``limit``)."""

    word: str
    limit: int
    seen: int = 0
    occurrences: List[Occurrence] = field(default_factory=list)
    rows: List[Tuple[np.ndarray, ...]] = field(default_factory=list)

    def slot(self, rng: random.Random) -> Optional[int]:
        """Where the next occurrence goes (None: dropped by the reservoir)."""
        self.seen += 1
        if len(self.occurrences) < self.limit:
            return len(self.occurrences)
        j = rng.randrange(self.seen)
        return j if j < self.limit else None


@dataclass
class _Pending:
    word: str
    tokens: List[str]
    position: int
    occurrence: Occurrence


class Inducer:
    """Streams occurrences through the biLM (and its LM head) and clusters each word's.

    ``head`` is needed for the substitutes representation (and names senses by substitutes
    whatever the representation); :meth:`add` queues occurrences, :meth:`senses` clusters.
    """

    def __init__(self, bilm: BiLM, head: Optional[LMHead], settings: Optional[InductionSettings] = None) -> None:
        self.settings = settings or InductionSettings()
        if self.settings.uses_substitutes and head is None:
            raise ValueError(f"the {self.settings.representation!r} representation needs the biLM's LM head (softmax and vocabulary)")
        if head is not None:
            head.check(bilm)
        self.mix = self.settings.layer_weights(bilm.n_output_layers)  # the vectors' layer weights for this biLM
        self.bilm, self.head = bilm, head
        self.stores: Dict[str, _Store] = {}
        self._pending: List[_Pending] = []
        self._rng = random.Random(self.settings.seed)
        self._fold: Optional[np.ndarray] = None
        self._drop: Optional[np.ndarray] = None
        self._excluded: Optional[torch.Tensor] = None
        self._context: Optional[ContextEmbedder] = None
        self._prior_sum: Optional[torch.Tensor] = None  # float64 [V]: the summed predictions of every reading streamed
        self._prior_count = 0
        self.background: Counter = Counter()  # the corpus's readable words (see observe): what sense names are set against

    def observe(self, tokens: Sequence[str]) -> None:
        """Count a sentence's words as the corpus background that single senses are named against."""
        is_word = language(self.settings.lang).is_word
        self.background.update(t.lower() for t in tokens if is_word(t))

    # ------------------------------------------------------------------ streaming

    def add(self, word: str, tokens: Sequence[str], position: int, occurrence: Occurrence) -> None:
        """Queue one occurrence (``tokens[position]`` is the word); runs the biLM when a batch is full."""
        if not 0 <= position < len(tokens):
            raise ValueError(f"position {position} is outside a sentence of {len(tokens)} tokens")
        self.stores.setdefault(word, _Store(word, self.settings.max_occurrences))
        self._pending.append(_Pending(word, list(tokens), position, occurrence))
        if sum(len(p.tokens) + 2 for p in self._pending) >= 8 * self.settings.max_batch_tokens:
            self.flush()

    def flush(self) -> None:
        """Run the biLM over the queued occurrences and keep their compact features."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        s = self.settings
        rows: List[Tuple[np.ndarray, ...]] = [()] * len(pending)
        extra = 2 if s.pattern is not None else 0
        for chunk in plan_batches([len(p.tokens) + extra for p in pending], 256, s.max_batch_tokens):
            items = [pending[i] for i in chunk]
            states = lm_states(self.bilm, [p.tokens for p in items], [p.position for p in items], self.mix, pattern=s.pattern)
            readings: List[np.ndarray] = []
            if self.head is not None:  # the LM states are kept (float16) and read by the head when clustering
                if s.prior_weight > 0:
                    self._add_to_prior(states.readings())
                readings = [r.cpu().numpy().astype(np.float16) for r in states.readings()]
            for j, i in enumerate(chunk):
                rows[i] = (states.vectors[j].astype(np.float16), *(r[j] for r in readings))
        for item, row in zip(pending, rows):  # in corpus order (batches run sorted by length)
            store = self.stores[item.word]
            slot = store.slot(self._rng)
            if slot is None:
                continue
            if slot == len(store.occurrences):
                store.occurrences.append(item.occurrence)
                store.rows.append(row)
            else:
                store.occurrences[slot], store.rows[slot] = item.occurrence, row

    def _add_to_prior(self, readings: Sequence[torch.Tensor]) -> None:
        assert self.head is not None
        for states in readings:
            total = self.head.log_probs(states).exp().sum(0, dtype=torch.float64)
            self._prior_sum = total if self._prior_sum is None else self._prior_sum + total
            self._prior_count += len(states)

    def log_prior(self) -> Optional[torch.Tensor]:
        """float32 ``[V]``: log of the LM's mean prediction over every reading streamed so far (``None`` before any)."""
        if self._prior_sum is None or not self._prior_count:
            return None
        return torch.log((self._prior_sum / self._prior_count).clamp_min(1e-30)).float()

    def _excluded_words(self) -> torch.Tensor:
        if self._excluded is None:
            assert self.head is not None
            self._excluded = content_mask(self.head.vocab)
        return self._excluded

    # ------------------------------------------------------------------ clustering

    def _vocab_tables(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._fold is None or self._drop is None:
            assert self.head is not None
            resources = language(self.settings.lang)
            self._fold = fold_vocabulary(self.head.vocab, bases=resources.bases)
            self._drop = np.array([w.lower() in resources.stop_words for w in self.head.vocab]) | self._excluded_words().cpu().numpy()
        return self._fold, self._drop

    def senses(self, words: Optional[Iterable[str]] = None, forms: Optional[Mapping[str, Sequence[str]]] = None) -> List[WordSenses]:
        """Cluster each word's occurrences (every word added, or ``words`` in that order)."""
        self.flush()
        chosen = list(words) if words is not None else list(self.stores)
        return [self.word_senses(w, list((forms or {}).get(w, ()))) for w in chosen]

    def word_senses(self, word: str, forms: Sequence[str] = ()) -> WordSenses:
        """The senses of one word from its stored occurrences (one sense, with a note, if too few)."""
        s = self.settings
        store = self.stores.get(word) or _Store(word, s.max_occurrences)
        n = len(store.occurrences)
        forms = sorted({word.lower(), *(f.lower() for f in forms), *(o.text[o.start : o.end].lower() for o in store.occurrences)})
        if n == 0:
            return WordSenses(
                word,
                forms,
                [],
                [],
                np.zeros((0, 0), np.float32),
                np.zeros((0, 0), np.float32),
                s.representation,
                f"{word!r}: no occurrences in the corpus",
            )
        vectors, subs, bags, blocks, extra = self.representation(store, forms)
        note = None
        distances: Optional[np.ndarray] = None
        if n < s.min_occurrences:
            labels = np.zeros(n, dtype=np.int64)
            note = f"{word!r}: only {plural(n, 'occurrence')} (fewer than {s.min_occurrences}): one sense"
        else:
            distances = cosine_distances(blocks)
            labels = cut_senses(
                distances, s.max_senses, s.n_senses, min_share=s.min_share, significance=s.significance, seed=s.seed, axes=s.test_axes
            )
        mass = self._plain_mass(subs) if subs is not None else None
        if distances is not None and labels.max() == 0 and s.n_senses is None and s.max_senses >= 2:
            extra["best_split"] = self._best_split(word, store, distances, mass, blocks, forms, extra.get("context_vectors"))
        k = int(labels.max()) + 1
        weights = self._weights(subs, labels, blocks, bags)
        senses = self._describe(word, store, labels, weights, mass, blocks, forms, extra.get("context_vectors"), distances)
        shown = self._shown_vectors(blocks)
        return WordSenses(
            word, forms, list(store.occurrences), senses, weights, shown, s.representation, note,
            extra={"elmo_vectors": vectors.astype(np.float16), "mix": list(self.mix), "seen": store.seen, "n_senses": k, **extra},
        )  # fmt: skip

    def representation(
        self, store: _Store, forms: Sequence[str]
    ) -> Tuple[
        np.ndarray, Optional[List[Tuple[np.ndarray, np.ndarray]]], Optional[Tuple[sparse.csr_matrix, np.ndarray]], List[Any], Dict[str, Any]
    ]:
        """What the word's occurrences are clustered on: their ELMo vectors, substitutes and bags (None
        without a head), the unit-row blocks of the settings' representation (compared by their mean
        cosine), and extra arrays kept with the result (the context vectors)."""
        s = self.settings
        vectors = np.stack([r[0] for r in store.rows]).astype(np.float32)
        subs = self._substitutes(store) if self.head is not None else None
        bags = self._bags(subs) if subs is not None else None
        blocks: List[Any] = []
        if s.uses_substitutes:
            assert bags is not None
            blocks.append(bags[0])
        if "vectors" in s.parts:  # the form's own part removed: "cell" and "cells" in one context agree
            blocks.append(unit_rows(remove_form(vectors, [o.text[o.start : o.end].lower() for o in store.occurrences])))
        extra: Dict[str, Any] = {}
        if "context" in s.parts:  # centred on the word's own mean: what sets an occurrence apart
            context = self.context_vectors(store.occurrences, forms)
            extra["context_vectors"] = context.astype(np.float16)
            blocks.append(unit_rows(context - context.mean(0, keepdims=True)))
        return vectors, subs, bags, blocks, extra

    def _best_split(
        self,
        word: str,
        store: _Store,
        distances: np.ndarray,
        mass: Optional[sparse.csr_matrix],
        blocks: List[Any],
        forms: Sequence[str],
        context: Optional[np.ndarray],
    ) -> Dict[str, Any]:
        """What was almost found where the rule kept one sense: the best two-way split of the
        occurrences (the rule's own first split), its z-score against the null and the z it needed,
        each side's size and name. Shown, marked as not kept; never used as senses."""
        s = self.settings
        halves, z = split_score(embed_distances(distances), np.random.default_rng(s.seed), axes=s.test_axes)
        sizes = [int((halves == c).sum()) for c in (0, 1)]
        if min(sizes) == 0:
            return {"z": float(z), "needed": -s.significance, "sizes": sizes, "names": []}
        onehot = np.eye(2, dtype=np.float32)[halves]
        named = self._describe(word, store, halves, onehot, mass, blocks, forms, context, distances)
        order = sorted(range(2), key=lambda c: -sizes[c])
        return {
            "z": round(float(z), 3),
            "needed": -s.significance,
            "sizes": [sizes[c] for c in order],
            "names": [named[c].name for c in order],
            "examples": [named[c].examples[:2] for c in order],
            "min_share_met": min(sizes) >= max(3, int(np.ceil(s.min_share * len(halves)))),
        }

    def context_vectors(self, occurrences: Sequence[Occurrence], forms: Sequence[str] = ()) -> np.ndarray:
        """float32 ``[n, dim]``: the occurrences' context vectors (:mod:`.context`), read with the LM head's
        output embeddings when there is a head, else with the biLM's char-CNN token vectors."""
        if self._context is None:
            self._context = (
                ContextEmbedder.from_head(self.head, self.settings.context_smoothing)
                if self.head is not None
                else ContextEmbedder.from_bilm(self.bilm)
            )
        return self._context.embed(occurrences, self.settings.context_window, {f.lower() for f in forms}, self.settings.lang)

    def _substitutes(self, store: _Store) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per reading (forward, backward, then the pattern's two), the ``top_k`` substitutes of each
        stored occurrence: ids int32 ``[n, k]`` and scores float32 ``[n, k]`` (log-probabilities,
        less ``prior_weight`` times the log prior)."""
        assert self.head is not None
        s = self.settings
        log_prior = self.log_prior() if s.prior_weight > 0 else None
        out = []
        for r in range(1, len(store.rows[0])):
            states = torch.from_numpy(np.stack([row[r] for row in store.rows]).astype(np.float32))
            out.append(self.head.top_substitutes(states, s.top_k, self._excluded_words(), log_prior, s.prior_weight))
        return out

    def _bags(self, subs: List[Tuple[np.ndarray, np.ndarray]]) -> Tuple[sparse.csr_matrix, np.ndarray]:
        """The word's TF-IDF substitute bags (unit rows) and IDF."""
        assert self.head is not None
        fold, drop = self._vocab_tables()
        ids, scores = [i for i, _ in subs], [v for _, v in subs]
        return tfidf(substitute_bags(ids, scores, len(self.head), fold, drop, self.settings.temperature))

    def _plain_mass(self, subs: List[Tuple[np.ndarray, np.ndarray]]) -> sparse.csr_matrix:
        """float32 ``[n, V]``: each occurrence's plain LM probability of each of its substitutes (the
        prior correction undone), averaged over the forward and backward readings in the word's place,
        function words dropped, forms folded onto their lemma: what names a sense
        (:func:`.naming.distinctive_substitutes`)."""
        assert self.head is not None
        fold, drop = self._vocab_tables()
        log_prior = self.log_prior()
        lifted = self.settings.prior_weight * log_prior.cpu().numpy().astype(np.float64) if log_prior is not None else None
        total = None
        plain = subs[:2]  # the forward and backward predictions in the word's place (the pattern's predict its neighbours)
        for ids, scores in plain:
            ids = ids.astype(np.int64)
            log_p = scores.astype(np.float64) + (lifted[ids] if lifted is not None else 0.0)
            p = np.exp(log_p) * ~drop[ids]
            rows = np.repeat(np.arange(len(ids)), ids.shape[1])
            block = sparse.csr_matrix((p.ravel(), (rows, fold[ids].ravel())), shape=(len(ids), len(self.head)))
            total = block if total is None else total + block
        assert total is not None
        return (total / len(plain)).astype(np.float32).tocsr()

    def _folded_prior(self) -> Optional[np.ndarray]:
        """float64 ``[V]``: the LM's mean prediction over the corpus, folded as :meth:`_plain_mass` folds."""
        log_prior = self.log_prior()
        if log_prior is None:
            return None
        fold, drop = self._vocab_tables()
        return np.bincount(fold, weights=np.exp(log_prior.cpu().numpy().astype(np.float64)) * ~drop, minlength=len(fold))

    def _weights(
        self,
        subs: Optional[List[Tuple[np.ndarray, np.ndarray]]],
        labels: np.ndarray,
        blocks: List[Any],
        bags: Optional[Tuple[sparse.csr_matrix, np.ndarray]],
    ) -> np.ndarray:
        """float32 ``[n, k]`` graded assignment, rows summing to 1."""
        n, k = len(labels), int(labels.max()) + 1
        if k == 1:
            return np.ones((n, 1), dtype=np.float32)
        onehot = np.zeros((n, k), dtype=np.float32)
        onehot[np.arange(n), labels] = 1.0
        s = self.settings
        if s.uses_substitutes and bags is not None and subs is not None and s.n_representatives > 0:
            matrix, idf = bags
            centroids = np.asarray((sparse.csr_matrix(onehot.T) @ matrix).todense())  # [k, V]
            centroids = unit_rows(centroids)
            votes = onehot.copy()  # the full bag votes for its own cluster
            fold, drop = self._vocab_tables()
            rng = np.random.default_rng(s.seed)
            drawn = []
            for ids, scores in subs:  # sample_size substitutes from each reading's distribution
                ids = ids.astype(np.int64)
                lp = scores.astype(np.float64) / s.temperature
                p = np.exp(lp - lp.max(1, keepdims=True)) * ~drop[ids]
                p /= np.maximum(p.sum(1, keepdims=True), 1e-12)
                cum = np.cumsum(p, axis=1)
                draws = rng.random((n, s.n_representatives, s.sample_size))
                picks = np.minimum((draws[..., None] > cum[:, None, None, :]).sum(-1), ids.shape[1] - 1)  # [n, R, m]
                drawn.append(fold[np.take_along_axis(ids[:, None, :].repeat(s.n_representatives, 1), picks, axis=2)])
            sampled = np.concatenate(drawn, axis=2)  # [n, R, readings * m]
            scores = (idf[sampled][..., None] * centroids.T[sampled]).sum(2)  # [n, R, k]
            np.add.at(votes, (np.repeat(np.arange(n), s.n_representatives), scores.argmax(-1).ravel()), 1.0)
            return (votes / votes.sum(1, keepdims=True)).astype(np.float32)
        vectors = blocks[-1] if not sparse.issparse(blocks[-1]) else unit_rows(np.asarray(blocks[-1].todense()))
        centroids = unit_rows(onehot.T @ vectors)
        logits = vectors @ centroids.T / 0.05
        logits -= logits.max(1, keepdims=True)
        weights = np.exp(logits)
        return (weights / weights.sum(1, keepdims=True)).astype(np.float32)

    def _describe(
        self,
        word: str,
        store: _Store,
        labels: np.ndarray,
        weights: np.ndarray,
        mass: Optional[sparse.csr_matrix],
        blocks: List[Any],
        forms: Sequence[str] = (),
        context: Optional[np.ndarray] = None,
        distances: Optional[np.ndarray] = None,
    ) -> List[Sense]:
        """Name each sense by its most distinctive context words and substitutes (readable words only, none
        shared by two senses: :mod:`.naming`) and pick its most representative occurrences (``distances``:
        the blocks' cosine distances when the caller has them, else computed here)."""
        s = self.settings
        k = weights.shape[1]
        strongest = weights.argmax(1)
        exclude = {word.lower(), *(f.lower() for f in forms)}
        scored_subs: List[Dict[str, float]] = [{} for _ in range(k)]
        if mass is not None and self.head is not None:
            scored_subs = distinctive_substitutes(mass, strongest, self.head.vocab, self._folded_prior(), exclude, s.lang)
        contexts = [context_words(o.text, o.start, o.end, lang=s.lang) for o in store.occurrences]
        background = self.background or Counter(w for ctx in contexts for w in ctx)
        scored_context = distinctive_words(contexts, strongest, background, exclude, lang=s.lang)
        if context is not None and self._context is not None:
            scored_context = self._on_topic(scored_context, np.asarray(context, dtype=np.float32), strongest)
        # a word names one sense of the word only: the sense where it ranks highest in either kind
        owned = [set(words) for words in exclusive([ranked(list(a), list(b)) for a, b in zip(scored_subs, scored_context)])]
        limit = max(s.n_names * 2, 6)
        if distances is None and blocks:
            distances = cosine_distances(blocks)
        similarity = None if distances is None else 1.0 - distances
        senses = []
        for c in range(k):
            subs = [w for w in scored_subs[c] if w in owned[c]][:limit]
            ctx = [w for w in scored_context[c] if w in owned[c]][:limit]
            members = np.flatnonzero(strongest == c)
            order, typical = central_first(members, similarity, weights[:, c])
            name = sense_name(word, ctx, subs, s.n_names) if (ctx or subs) else f"{word}: sense {c + 1}"
            shown = [int(i) for i in order[: s.n_examples]]
            senses.append(Sense(c, name, subs, int(len(members)), shown, ctx, [round(float(t), 4) for t in typical[: s.n_examples]]))
        return senses

    def _on_topic(self, scored: List[Dict[str, float]], context: np.ndarray, strongest: np.ndarray) -> List[Dict[str, float]]:
        """Context words re-ranked by how well they point where their sense's occurrences differ: the
        log-odds score times the cosine between the word's vector and the sense's mean context vector
        less the other senses' (less nothing with one sense); a word pointing elsewhere keeps 5%."""
        assert self._context is not None
        out = []
        for c, scores in enumerate(scored):
            if not scores or not (strongest == c).any():
                out.append(scores)
                continue
            direction = context[strongest == c].mean(0)
            if (strongest != c).any():
                direction = direction - context[strongest != c].mean(0)
            norm = float(np.linalg.norm(direction))
            words = list(scores)
            cosines = self._context.word_vectors(words) @ (direction / norm) if norm > 0 else np.ones(len(words))
            rescored = {w: scores[w] * max(float(cos), 0.05) for w, cos in zip(words, cosines)}
            out.append(dict(sorted(rescored.items(), key=lambda item: -item[1])))
        return out

    def _shown_vectors(self, blocks: List[Any]) -> np.ndarray:
        """A dense ``[n, <=256]`` stand-in for the representation clustered (substitute bags reduced by SVD)."""
        parts = []
        for block in blocks:
            if sparse.issparse(block):  # the top principal axes of the bags, from their Gram matrix (n x n, not n x V)
                gram = np.asarray((block @ block.T).todense(), dtype=np.float64)
                values, axes = np.linalg.eigh(gram)
                r = int(min(64, len(values)))
                top = np.argsort(-values)[:r]
                parts.append(unit_rows((axes[:, top] * np.sqrt(np.clip(values[top], 0, None))).astype(np.float32)))
            else:
                parts.append(unit_rows(block))
        return (np.hstack(parts) / math.sqrt(len(parts))).astype(np.float32)


def central_first(members: np.ndarray, similarity: Optional[np.ndarray], weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A sense's occurrences ``members``, most central first: by cosine ``similarity`` to the sense's
    medoid (the member with the highest mean similarity to the others), ties broken by the sense
    weight; and those similarities. Without a similarity matrix, by weight alone (similarity NaN)."""
    if len(members) == 0:
        return members, np.zeros(0)
    if similarity is None:
        return members[np.argsort(-weights[members], kind="stable")], np.full(len(members), np.nan)
    inside = similarity[np.ix_(members, members)]
    medoid = int(np.argmax(inside.mean(1)))
    to_medoid = inside[medoid]
    order = np.lexsort((-weights[members], -to_medoid))
    return members[order], to_medoid[order]


# ---------------------------------------------------------------------------------------------- corpus level


def load_head(weights: Optional[Any] = None) -> Optional[LMHead]:
    """The LM head of a native model folder (``None`` = the embedded default); ``None`` if it carries none."""
    from ..hub.resolve import default_model_path, resolve_weights
    from .substitutes import SOFTMAX_FILE, native_head

    folder = default_model_path() if weights is None else resolve_weights(weights).folder
    if folder is None or not (Path(folder) / SOFTMAX_FILE).is_file():
        return None
    return native_head(folder)


def frequent_words(corpus: Corpus, n: int, min_count: int = 20, lang: str = "en") -> Dict[str, List[str]]:
    """The ``n`` most frequent content words of the corpus in language ``lang`` (lower case, letters only,
    three or more (one Chinese or Japanese character will do), no stop words), with their forms."""
    resources = language(lang)
    stop = resources.stop_words
    counts: Counter = Counter()
    for sentence in read_sentences(corpus, lang=lang):
        counts.update(t.lower() for t in sentence.tokens if resources.is_word(t) and resources.long_enough(t, 3) and t.lower() not in stop)
    bases: Dict[str, str] = {}
    for form in counts:
        bases[form] = next((b for b in resources.bases(form) if counts.get(b, 0) >= counts[form]), form)
    grouped: Counter = Counter()
    forms: Dict[str, List[str]] = {}
    for form, count in counts.items():
        grouped[bases[form]] += count
        forms.setdefault(bases[form], []).append(form)
    chosen = [w for w, c in grouped.most_common() if c >= min_count][:n]
    return {w: sorted(f for f in forms[w] if f != w) for w in chosen}


def spread(result: WordSenses) -> float:
    """How much a word's occurrences spread: 1 - the mean cosine of their vectors to their centroid."""
    vectors = unit_rows(np.asarray(result.extra.get("elmo_vectors", result.vectors), dtype=np.float32))
    if len(vectors) < 2:
        return 0.0
    centroid = unit_rows(vectors.mean(0, keepdims=True))[0]
    return float(1.0 - (vectors @ centroid).mean())


def induce(
    corpus: Corpus,
    words: Words = None,
    *,
    n_words: int = 20,
    weights: Optional[Any] = None,
    bilm: Optional[BiLM] = None,
    head: Optional[LMHead] = None,
    settings: Optional[InductionSettings] = None,
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
) -> List[WordSenses]:
    """Induce the senses of ``words`` from ``corpus``.

    corpus: a text file, a folder of them, a DocBin file, or an iterable of Docs or strings.
    words: the target words (a list; or ``{word: [other forms]}``, regular inflections being
        found anyway); ``None`` finds them: of the ``4 * n_words`` most frequent content words,
        the ``n_words`` whose occurrences spread most (needs a corpus that can be read twice: a
        path or a list).
    weights / bilm / head: the biLM (default: the embedded model) and its LM head (default: the
        one saved with the model; any ``(vocab, W, b)`` through :meth:`LMHead.from_arrays`).
    Returns one :class:`WordSenses` per word, in the order given (a word without occurrences
    gets an empty one with a note).
    """
    settings = settings or InductionSettings()
    if bilm is None:
        from ..hub.load import load_bilm

        bilm = load_bilm(weights)
    if head is None:
        head = load_head(weights)
    if head is None and settings.uses_substitutes:
        raise ValueError(
            f"the biLM {weights or 'en_default'} carries no LM head (softmax.pt + vocab.txt): use representation='vectors', or pass head="
        )
    found = words is None
    if found:
        if not _is_paths(corpus) and not isinstance(corpus, (list, tuple)):
            raise ValueError("finding the target words reads the corpus twice: pass a path or a list, or name the words")
        candidates = frequent_words(corpus, 4 * n_words, min_count=settings.min_occurrences, lang=settings.lang)
        if log:
            log(f"{len(candidates)} frequent words as candidates; keeping the {n_words} whose occurrences spread most")
        if not candidates:
            if next(iter(read_sentences(corpus, lang=settings.lang)), None) is None:
                raise ValueError("the corpus is empty: no sentences to induce senses from")
            raise ValueError(
                f"no content word occurs {settings.min_occurrences} times or more in the corpus: name the target words (--words)"
            )
        words = candidates
    table: Dict[str, List[str]] = {w: list(f) for w, f in words.items()} if isinstance(words, Mapping) else {w: [] for w in words}  # type: ignore[union-attr]
    if not table:
        raise ValueError("no target words given")
    forms = target_forms(table, settings.lang)
    inducer = Inducer(bilm, head, settings)
    from ..progress import progress_bar

    bar = progress_bar(desc="induce", unit=" sentences", disable=not progress)
    with torch.inference_mode():
        n_sentences = 0
        for sentence in read_sentences(corpus, lang=settings.lang):
            bar.update(1)
            n_sentences += 1
            sentence = join_runs(sentence, forms, settings.lang)  # a target spelled by several tokens (zh, ja, th): one
            inducer.observe(sentence.tokens)
            for position, token in enumerate(sentence.tokens):
                word = match_target(token, forms, settings.lang)
                if word is not None:
                    inducer.add(word, *_window(sentence.text, sentence.tokens, sentence.spans, position, sentence.source))
        inducer.flush()
    bar.close()
    if not n_sentences:
        raise ValueError("the corpus is empty: no sentences to induce senses from")
    results = [inducer.word_senses(w, table[w]) for w in table]
    if found:
        results = sorted(results, key=spread, reverse=True)[:n_words]
    return results


MAX_WINDOW = 64  # tokens either side of an occurrence given to the biLM (an unpunctuated text is one "sentence")


def _window(
    text: str, tokens: Sequence[str], spans: Sequence[Tuple[int, int]], position: int, source: str, width: int = MAX_WINDOW
) -> Tuple[List[str], int, Occurrence]:
    """``(tokens, position, occurrence)`` arguments for :meth:`Inducer.add` of ``tokens[position]``, the
    sentence cut to ``width`` tokens either side of it: the cost per occurrence is bounded, whatever the sentence's length."""
    lo, hi = max(0, position - width), min(len(tokens), position + width + 1)
    offset, stop = spans[lo][0], spans[hi - 1][1]
    start, end = spans[position]
    occurrence = Occurrence(text[offset:stop], start - offset, end - offset, source)
    return list(tokens[lo:hi]), position - lo, occurrence


# ---------------------------------------------------------------------------------------------- use


def sense_label(word: str, sense: int) -> str:
    """The inventory label of a word's induced sense: ``bank.1`` for its first (largest)."""
    return f"{word}.{sense + 1}"


def build_inventory(results: Iterable[WordSenses], fingerprint: Optional[str] = None) -> SenseInventory:
    """A :class:`SenseInventory` of the induced senses: the centroid of each sense's ELMo vectors.

    Keyed by lower-case form (``key="lower"``: every form seen is an entry, so no lemmatizer is
    needed); the vectors are the induction's mix of the raw layers, so the ``elmo`` component
    must store them (``store_layers = true``). Sense labels are ``word.N``; their names are in
    ``inventory.names``.
    """
    inventory: Optional[SenseInventory] = None
    for result in results:
        if not result.occurrences:
            continue
        mix = [float(w) for w in result.extra.get("mix", DEFAULT_MIX)]
        if inventory is None:
            inventory = SenseInventory(layer=mix, key="lower", fingerprint=fingerprint)
        vectors = np.asarray(result.extra["elmo_vectors"], dtype=np.float32)
        labels = result.labels
        forms = sorted({result.word.lower(), *(f.lower() for f in result.forms)})
        for form in forms:
            inventory.add_vectors([form] * len(labels), [sense_label(result.word, int(c)) for c in labels], vectors)
        for sense in result.senses:
            inventory.names[sense_label(result.word, sense.id)] = sense.name
    if inventory is None:
        raise ValueError("no induced word has occurrences: nothing to build an inventory from")
    return inventory


# ---------------------------------------------------------------------------------------------- saving


def file_stem(word: str) -> str:
    """A file name for a word's saved senses (characters outside letters, digits, ``.``, ``-`` become ``_``)."""
    return re.sub(r"[^\w.-]", "_", word) or "_"


def save_senses(folder: Union[str, Path], results: Sequence[WordSenses]) -> List[Path]:
    """Save each word's senses in ``folder`` as ``WORD.json`` + ``WORD.npz`` (see :func:`.induced.save_word_senses`:
    the files ``spacy elmo explore`` reads); returns the JSON paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stems = [file_stem(r.word) for r in results]
    if len(set(stems)) != len(stems):
        raise ValueError(f"two target words share a file name in {folder}: {sorted(s for s in stems if stems.count(s) > 1)[:3]}")
    return [save_word_senses(r, folder / stem) for r, stem in zip(results, stems)]


def load_senses(folder: Union[str, Path]) -> List[WordSenses]:
    """Every word's senses saved in ``folder`` by :func:`save_senses` (sorted by file name)."""
    folder = Path(folder)
    paths = sorted(p for p in folder.glob("*.json") if p.with_suffix(".npz").is_file())  # not check.json and the like
    if not paths:
        raise FileNotFoundError(f"{folder} holds no saved word senses (WORD.json + WORD.npz)")
    return [load_word_senses(p) for p in paths]


def holds_saved_senses(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds word senses saved by :func:`save_senses` (a ``WORD.json`` with its ``WORD.npz``)."""
    folder = Path(folder)
    return folder.is_dir() and any(p.with_suffix(".npz").is_file() for p in folder.glob("*.json"))


def is_saved_word_senses(path: Union[str, Path]) -> bool:
    """Whether ``path`` names one word's saved senses: ``WORD.json``, ``WORD.npz``, or the stem ``WORD`` of an existing pair."""
    path = Path(path)
    return path.suffix in (".json", ".npz") or (not path.exists() and word_senses_files(path)[0].is_file())


def word_senses_from(sources: Sequence[Union[str, Path]], word: Optional[str] = None, **induce_options: Any) -> WordSenses:
    """One word's senses, from whichever of three inputs ``sources`` is (what ``spacy elmo explore`` reads):

    - one saved ``WORD.json`` (:func:`.induced.save_word_senses`): read; ``word``, if given, must be its word;
    - one folder that :func:`save_senses` wrote (``induce --out``): ``word``'s file in it;
    - otherwise a corpus (text files, folders of them, DocBins): ``induce(sources, [word], **induce_options)``.

    Raises ``ValueError`` (one line) for a folder or corpus without ``word``, a word the folder has
    no file for, or a word that does not occur in the corpus.
    """
    paths = [Path(s) for s in sources]
    if not paths:
        raise ValueError("no input: give a saved WORD.json, an induce --out folder, or a corpus with a word")
    first = paths[0]
    if is_saved_word_senses(first):
        if len(paths) > 1:
            raise ValueError(f"{first} is saved word senses: give it alone, not with {paths[1]}")
        ws = load_word_senses(first)
        if word is not None and word != ws.word:
            raise ValueError(f"{first} holds the senses of {ws.word!r}, not {word!r}")
        return ws
    if len(paths) == 1 and holds_saved_senses(first):
        saved = sorted(p.stem for p in first.glob("*.json") if p.with_suffix(".npz").is_file())
        listed = ", ".join(saved[:10]) + (", ..." if len(saved) > 10 else "")
        if word is None:
            raise ValueError(f"{first} is a folder of saved senses: pick a word with --word (word=); it has {listed}")
        path = first / f"{file_stem(word)}.json"
        if not path.is_file():
            raise ValueError(f"{first} holds no saved senses of {word!r}; it has {listed}")
        return load_word_senses(path)
    if word is None:
        names = ", ".join(str(p) for p in paths[:3])
        raise ValueError(f"{names} is a corpus, not saved senses: name the word to induce with --word (word=)")
    corpus_files(paths)  # a missing file is one line now, not after loading the model
    (ws,) = induce(paths, [word], **induce_options)
    if not ws.occurrences:
        raise ValueError(ws.note or f"{word!r}: no occurrences in the corpus")
    return ws
