"""Context vectors: an occurrence represented by the words around it, embedded with the biLM's own word vectors.

Schuetze (1998)'s second-order context vectors: the mean of the unit word vectors of the content
words within ``window`` words of the target (stop words, non-words and the target's own forms
left out), every word alike or, with ``smoothing=a > 0``, each weighted by ``a / (a + p(w))``,
``p(w)`` its share of the model's training text (Arora et al. 2017's smooth inverse frequency;
alike where the counts are unknown): a frequent, topic-neutral word ("year", "people") then counts
for less than a telling one ("mound", "ointment"). At ``a = 1e-3`` that separates the labelled
sets' senses better when the number of senses is given, but not through ``induce``'s defaults, so
it is off by default (docs/senses.md, "Context words"). The word vectors are the biLM's: the rows
of its LM head's output embeddings (a language model's output embeddings group words by topic and meaning, Press & Wolf 2017), or, for
a model without a head (the published ELMo files), its context-free char-CNN token vectors.

Why: the small biLMs trained on a CPU carry the topic of a sentence into the *output* word
vectors long before their contextual vectors at the target separate senses. On the hand-labelled
sense set (bench/sense_set.py) k-means at the gold number of senses reaches ARI 0.48 from these
context vectors against 0.09 from the ELMo vectors of the same model (the v2 candidate at step
7,600; docs/senses.md#context-words).
"""

from __future__ import annotations

from typing import Collection, Dict, List, Optional, Sequence

import numpy as np
import torch

from ..bilm import BiLM
from ..bilm.characters import TokenBatch
from ..lang import language
from .clustering import unit_rows
from .induced import Occurrence
from .naming import window_words
from .substitutes import LMHead

DEFAULT_WINDOW = 10
SMOOTHING = 0.0  # ``a`` of the weights a / (a + p(w)); 0 = every word alike (1e-3, Arora et al.'s, measured in docs/senses.md)


def context_tokens(
    text: str, start: int, end: int, window: int = DEFAULT_WINDOW, exclude: Collection[str] = (), lang: str = "en"
) -> List[str]:
    """The content words (case kept) within ``window`` words of ``text[start:end]``: alphabetic,
    two letters or more (one Chinese or Japanese character will do), not stop words of language
    ``lang``, not one of ``exclude`` (lower case: the target's forms)."""
    if window < 1:
        raise ValueError(f"the context window is a number of words on each side, >= 1, got {window}")
    resources = language(lang)
    stop = resources.stop_words
    return [
        w
        for w in window_words(text, start, end, window, lang)
        if resources.long_enough(w, 2) and w.lower() not in stop and w.lower() not in exclude
    ]


class ContextEmbedder:
    """Word vectors for context words, and the context vector of an occurrence.

    Build one with :meth:`from_head` (the LM head's output embeddings) or :meth:`from_bilm` (the
    char-CNN's token vectors); :meth:`embed` gives float32 ``[n, dim]`` context vectors.
    """

    def __init__(self, source: str, dim: int, lookup: Optional[Dict[str, int]] = None, matrix: Optional[np.ndarray] = None,
                 bilm: Optional[BiLM] = None, row_weights: Optional[np.ndarray] = None) -> None:  # fmt: skip
        if (matrix is None) == (bilm is None):
            raise ValueError("a ContextEmbedder reads either a word-vector matrix or a biLM's token encoder")
        if row_weights is not None and (matrix is None or row_weights.shape != (matrix.shape[0],)):
            raise ValueError("row_weights give one weight per row of the word-vector matrix")
        self.source, self.dim = source, dim
        self._lookup, self._matrix, self._bilm = lookup or {}, matrix, bilm
        self._row_weights = row_weights
        self._cache: Dict[str, np.ndarray] = {}

    @classmethod
    def from_head(cls, head: LMHead, smoothing: float = SMOOTHING) -> "ContextEmbedder":
        """The output embeddings of ``head`` (centred on their mean, unit rows); with ``smoothing > 0``
        each word weighted by ``smoothing / (smoothing + p(w))`` where the head knows its training
        counts (``smoothing=0``, the default, or no counts: every word alike)."""
        if smoothing < 0:
            raise ValueError(f"smoothing is the a of the weights a / (a + p(w)), >= 0, got {smoothing}")
        weight = head.weight.detach().float().cpu().numpy()
        matrix = unit_rows(weight - weight.mean(0, keepdims=True))
        lookup: Dict[str, int] = {}
        for i, word in enumerate(head.vocab):
            lookup.setdefault(word, i)
        frequencies = head.frequencies() if smoothing > 0 else None
        row_weights = None if frequencies is None else (smoothing / (smoothing + frequencies)).astype(np.float32)
        source = "the LM head's output embeddings" + (", weighted by smooth inverse frequency" if row_weights is not None else "")
        return cls(source, matrix.shape[1], lookup=lookup, matrix=matrix, row_weights=row_weights)

    def _rows(self, words: Sequence[str]) -> List[Optional[int]]:
        """Each word's row of the matrix: exact, else lower case, else capitalised; ``None`` if unknown."""
        found: List[Optional[int]] = []
        for word in words:
            i = self._lookup.get(word)
            if i is None:
                i = self._lookup.get(word.lower(), self._lookup.get(word.capitalize()))
            found.append(i)
        return found

    def word_weights(self, words: Sequence[str]) -> np.ndarray:
        """float32 ``[len(words)]``: each word's weight in a context vector (1 where no frequencies are
        known, or for a word the vectors do not know, which adds a zero row anyway)."""
        out = np.ones(len(words), dtype=np.float32)
        if self._row_weights is not None:
            for j, i in enumerate(self._rows(words)):
                if i is not None:
                    out[j] = self._row_weights[i]
        return out

    @classmethod
    def from_bilm(cls, bilm: BiLM) -> "ContextEmbedder":
        """The biLM's context-free token vectors (layer 0), for models without an LM head."""
        return cls("the biLM's char-CNN token vectors", bilm.config.projection_dim, bilm=bilm)

    def word_vectors(self, words: Sequence[str]) -> np.ndarray:
        """float32 ``[len(words), dim]`` unit vectors; a word the vectors do not know gets a zero row."""
        out = np.zeros((len(words), self.dim), dtype=np.float32)
        if self._matrix is not None:
            for j, i in enumerate(self._rows(words)):
                if i is not None:
                    out[j] = self._matrix[i]
            return out
        missing = sorted({w for w in words if w not in self._cache})
        if missing:
            assert self._bilm is not None
            batch = TokenBatch.from_sentences([missing])
            with torch.inference_mode():
                vectors = self._bilm.token_encoder(batch.char_ids.to(self._bilm.token_encoder.char_embedding.weight.device))
                rows = vectors[batch.token_index[0, 1 : len(missing) + 1]].float().cpu().numpy()
            for word, row in zip(missing, unit_rows(rows)):
                self._cache[word] = row
        for j, word in enumerate(words):
            out[j] = self._cache[word]
        return out

    def embed(
        self, occurrences: Sequence[Occurrence], window: int = DEFAULT_WINDOW, exclude: Collection[str] = (), lang: str = "en"
    ) -> np.ndarray:
        """float32 ``[n, dim]``: each occurrence's context vector (the weighted mean of its known context
        words' unit vectors, :meth:`word_weights`, the words read in language ``lang``; a zero row when
        no context word is known)."""
        contexts = [context_tokens(o.text, o.start, o.end, window, exclude, lang) for o in occurrences]
        vocabulary = sorted({w for ctx in contexts for w in ctx})
        table = dict(zip(vocabulary, self.word_vectors(vocabulary))) if vocabulary else {}
        weight = dict(zip(vocabulary, self.word_weights(vocabulary).tolist())) if vocabulary and self._row_weights is not None else None
        out = np.zeros((len(occurrences), self.dim), dtype=np.float32)
        for j, ctx in enumerate(contexts):
            known = [w for w in ctx if table[w].any()]
            if not known:
                continue
            if weight is None:  # every word alike: the plain mean
                out[j] = np.mean([table[k] for k in known], axis=0)
            else:
                w = np.array([weight[k] for k in known], dtype=np.float64)
                out[j] = w @ np.stack([table[k] for k in known]) / w.sum()
        return out
