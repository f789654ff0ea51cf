"""Context vectors: an occurrence represented by the words around it, embedded with the biLM's own word vectors.

Schuetze (1998)'s second-order context vectors: the mean of the unit word vectors of the content
words within ``window`` words of the target (stop words, non-words and the target's own forms
left out). The word vectors are the biLM's: the rows of its LM head's output embeddings (a
language model's output embeddings group words by topic and meaning, Press & Wolf 2017), or, for
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
                 bilm: Optional[BiLM] = None) -> None:  # fmt: skip
        if (matrix is None) == (bilm is None):
            raise ValueError("a ContextEmbedder reads either a word-vector matrix or a biLM's token encoder")
        self.source, self.dim = source, dim
        self._lookup, self._matrix, self._bilm = lookup or {}, matrix, bilm
        self._cache: Dict[str, np.ndarray] = {}

    @classmethod
    def from_head(cls, head: LMHead) -> "ContextEmbedder":
        """The output embeddings of ``head`` (centred on their mean, unit rows)."""
        weight = head.weight.detach().float().cpu().numpy()
        matrix = unit_rows(weight - weight.mean(0, keepdims=True))
        lookup: Dict[str, int] = {}
        for i, word in enumerate(head.vocab):
            lookup.setdefault(word, i)
        return cls("the LM head's output embeddings", matrix.shape[1], lookup=lookup, matrix=matrix)

    @classmethod
    def from_bilm(cls, bilm: BiLM) -> "ContextEmbedder":
        """The biLM's context-free token vectors (layer 0), for models without an LM head."""
        return cls("the biLM's char-CNN token vectors", bilm.config.projection_dim, bilm=bilm)

    def word_vectors(self, words: Sequence[str]) -> np.ndarray:
        """float32 ``[len(words), dim]`` unit vectors; a word the vectors do not know gets a zero row."""
        out = np.zeros((len(words), self.dim), dtype=np.float32)
        if self._matrix is not None:
            for j, word in enumerate(words):
                i = self._lookup.get(word)
                if i is None:
                    i = self._lookup.get(word.lower(), self._lookup.get(word.capitalize()))
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
        """float32 ``[n, dim]``: each occurrence's context vector (the mean of its context words' unit
        vectors, the words read in language ``lang``; a zero row when no context word is known)."""
        contexts = [context_tokens(o.text, o.start, o.end, window, exclude, lang) for o in occurrences]
        vocabulary = sorted({w for ctx in contexts for w in ctx})
        table = dict(zip(vocabulary, self.word_vectors(vocabulary))) if vocabulary else {}
        out = np.zeros((len(occurrences), self.dim), dtype=np.float32)
        for j, ctx in enumerate(contexts):
            rows = [table[w] for w in ctx if table[w].any()]
            if rows:
                out[j] = np.mean(rows, axis=0)
        return out
