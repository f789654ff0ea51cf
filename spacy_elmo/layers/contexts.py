"""Context getters: which stretches of a Doc the biLM reads at once.

A context is a list of token indices (whitespace tokens are left out, so stray whitespace does
not change any vector) plus the slice of that list whose outputs are kept. Sentences are the
contexts when the Doc has sentence boundaries; otherwise a cheap built-in split (after a token of
sentence-final punctuation, in any script spaCy's sentencizer knows, and at blank lines). A context longer than ``max_length`` tokens is
cut into windows that overlap by ``overlap`` tokens; each token's vectors come from the window
in which it is farthest from an edge (the cut falls in the middle of each overlap).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List

from spacy.attrs import IS_SPACE, SENT_START
from spacy.pipeline.sentencizer import Sentencizer
from spacy.tokens import Doc
from spacy.util import registry

# a token made only of sentence-final punctuation ends a sentence: spaCy's sentencizer's characters
# (the scripts it knows: ., !, ?, 。, ！, ؟, ۔, ।, ॥, ።, ။, ...) and the ellipsis
_SENTENCE_END = re.compile("^[" + re.escape("".join(sorted(set(Sentencizer.default_punct_chars) | {"…"}))) + "]+$")


@dataclass(frozen=True)
class Context:
    """Token indices fed to the biLM together; outputs of ``indices[keep_start:keep_end]`` are kept."""

    indices: List[int]
    keep_start: int
    keep_end: int

    def __len__(self) -> int:
        return len(self.indices)

    def whole(self, n_tokens: int) -> bool:
        """Whether this context is all ``n_tokens`` tokens of its Doc, in order, every output kept."""
        return self.keep_start == 0 and self.keep_end == n_tokens and is_run(self.indices, 0, n_tokens)


def is_run(indices: List[int], start: int, n: int) -> bool:
    """Whether ``indices`` is ``[start, start + 1, ..., start + n - 1]``."""
    return len(indices) == n and (n == 0 or (indices[0] == start and indices == list(range(start, start + n))))


ContextGetter = Callable[[Doc], List[Context]]


def _segments(doc: Doc) -> Iterator[List[int]]:
    """Lists of non-whitespace token indices, one per sentence (given or built-in)."""
    n = len(doc)
    if n == 0:
        return
    values = doc.to_array([IS_SPACE, SENT_START])  # one pass over the tokens for both
    space = values[:, 0].tolist()
    any_space = any(space)
    if doc.has_annotation("SENT_START"):
        starts = (values[:, 1] == 1).nonzero()[0].tolist()
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        for begin, end in zip(starts, starts[1:] + [n]):
            sentence = [i for i in range(begin, end) if not space[i]] if any_space else list(range(begin, end))
            if sentence:
                yield sentence
        return
    segment: List[int] = []
    for i, text in enumerate(t.text for t in doc):
        if space[i]:
            if "\n\n" in text and segment:
                yield segment
                segment = []
            continue
        segment.append(i)
        if _SENTENCE_END.match(text):
            yield segment
            segment = []
    if segment:
        yield segment


def split_windows(indices: List[int], max_length: int, overlap: int) -> List[Context]:
    """Cut ``indices`` into windows of at most ``max_length`` with ``overlap`` shared tokens."""
    n = len(indices)
    if n <= max_length:
        return [Context(indices, 0, n)]
    stride = max_length - overlap
    starts = list(range(0, n - max_length, stride)) + [n - max_length]
    contexts = []
    for k, start in enumerate(starts):
        # cut points in absolute positions: middle of the overlap with each neighbour
        keep_from = 0 if k == 0 else (start + starts[k - 1] + max_length) // 2
        keep_to = n if k == len(starts) - 1 else (starts[k + 1] + start + max_length) // 2
        contexts.append(Context(indices[start : start + max_length], keep_from - start, keep_to - start))
    return contexts


class SentenceContexts:
    """Sentences as contexts (built-in split if the Doc has none), long ones cut into windows.

    A plain class rather than a closure, so that components holding it can be pickled (spawn
    and forkserver workers) and deep-copied.
    """

    def __init__(self, max_length: int = 200, overlap: int = 40) -> None:
        if max_length < 1:
            raise ValueError(f"sentence_contexts: max_length must be >= 1, got {max_length}")
        if not 0 <= overlap < max_length:
            raise ValueError(f"sentence_contexts: overlap must be in [0, max_length), got {overlap}")
        self.max_length, self.overlap = int(max_length), int(overlap)

    def __call__(self, doc: Doc) -> List[Context]:
        contexts: List[Context] = []
        for segment in _segments(doc):
            contexts.extend(split_windows(segment, self.max_length, self.overlap))
        return contexts

    def to_config(self) -> Dict[str, Any]:
        """The config block that rebuilds this getter."""
        return {"@misc": "spacy-elmo.sentence_contexts.v1", "max_length": self.max_length, "overlap": self.overlap}

    def __repr__(self) -> str:
        return f"SentenceContexts(max_length={self.max_length}, overlap={self.overlap})"


@registry.misc("spacy-elmo.sentence_contexts.v1")
def configure_sentence_contexts(max_length: int = 200, overlap: int = 40) -> ContextGetter:
    """Sentences as contexts (built-in split if the Doc has none), long ones cut into windows.

    max_length: the most tokens the biLM reads at once (boundary tokens not counted).
    overlap: tokens shared by consecutive windows of one long sentence.
    """
    return SentenceContexts(max_length, overlap)
