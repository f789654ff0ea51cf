"""Token strings -> ELMo character ids, exactly as the original implementation encodes them.

Each token becomes ``MAX_CHARS`` ids: begin-of-word, the token's UTF-8 *bytes* (truncated to
``MAX_CHARS - 2`` bytes, possibly inside a multi-byte character), end-of-word, then padding.
Every id is shifted by +1 so that id 0 is free to mean "no token" (a padded batch position).
Each context is wrapped in the pseudo-tokens ``<S>`` and ``</S>``, which use dedicated ids; a
literal ``<S>``/``</S>`` in the text maps to the same ids (as AllenNLP does).

Process-wide cache: :func:`token_char_ids` remembers the ids of the most recently used
``DEFAULT_CHAR_CACHE_SIZE`` (200,000) distinct tokens in an LRU cache shared by every model in the
process; full, it holds about 120 MB. Size it with ``set_char_cache_size(n)`` (``0`` turns it off;
outputs never change, only speed) or, before the package is imported, with the environment
variable ``SPACY_ELMO_CHAR_CACHE_SIZE``. ``char_cache_info()`` reports its hits and size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

MAX_CHARS = 50
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"
N_CHARACTERS = 262  # 261 ids + the padding id 0


def _special_ids(char: int) -> np.ndarray:
    ids = np.full(MAX_CHARS, PAD_CHAR, dtype=np.int64)
    ids[:3] = (BOW_CHAR, char, EOW_CHAR)
    ids += 1
    ids.setflags(write=False)  # shared by every call: nobody may write into them
    return ids


_BOS_IDS = _special_ids(BOS_CHAR)
_EOS_IDS = _special_ids(EOS_CHAR)
PADDING_IDS = np.zeros(MAX_CHARS, dtype=np.int64)
PADDING_IDS.setflags(write=False)


DEFAULT_CHAR_CACHE_SIZE = 200_000
CHAR_CACHE_ENV = "SPACY_ELMO_CHAR_CACHE_SIZE"


def _char_ids(token: str) -> np.ndarray:
    if token == BOS_TOKEN:
        return _BOS_IDS
    if token == EOS_TOKEN:
        return _EOS_IDS
    data = token.encode("utf-8", "ignore")[: MAX_CHARS - 2]
    ids = np.full(MAX_CHARS, PAD_CHAR + 1, dtype=np.int64)
    ids[0] = BOW_CHAR + 1
    ids[1 : len(data) + 1] = np.frombuffer(data, dtype=np.uint8).astype(np.int64) + 1
    ids[len(data) + 1] = EOW_CHAR + 1
    ids.setflags(write=False)
    return ids


def _size_from_environment() -> int:
    value = os.environ.get(CHAR_CACHE_ENV, "").strip()
    if not value:
        return DEFAULT_CHAR_CACHE_SIZE
    try:
        size = int(value)
    except ValueError:
        raise ValueError(f"{CHAR_CACHE_ENV} must be a whole number >= 0 (0 = no cache), got {value!r}") from None
    if size < 0:
        raise ValueError(f"{CHAR_CACHE_ENV} must be a whole number >= 0 (0 = no cache), got {value!r}")
    return size


_cached: Callable[[str], np.ndarray] = lru_cache(maxsize=_size_from_environment())(_char_ids)


def token_char_ids(token: str) -> np.ndarray:
    """The ``[MAX_CHARS]`` int64 character ids (already shifted by +1) of one token (read-only;
    cached process-wide, see the module docstring)."""
    return _cached(token)


def set_char_cache_size(size: int) -> None:
    """Keep the ids of at most ``size`` distinct tokens (``0``: no cache); empties the cache.

    The cache is process-wide (shared by every model); the default is
    ``DEFAULT_CHAR_CACHE_SIZE`` or the ``SPACY_ELMO_CHAR_CACHE_SIZE`` environment variable."""
    global _cached
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"char cache size must be a whole number >= 0 (0 = no cache), got {size!r}")
    _cached.cache_clear()  # type: ignore[attr-defined]
    _cached = lru_cache(maxsize=size)(_char_ids)


def char_cache_size() -> int:
    """The current capacity of the process-wide character-id cache."""
    return int(_cached.cache_info().maxsize or 0)  # type: ignore[attr-defined]


def char_cache_info() -> Any:
    """``functools`` cache statistics (hits, misses, maxsize, currsize) of the character-id cache."""
    return _cached.cache_info()  # type: ignore[attr-defined]


def batch_to_char_ids(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
    """``[B, T, MAX_CHARS]`` ids for a batch, with ``<S>``/``</S>`` added and zero padding.

    ``T`` is the longest sentence plus 2. This is the dense form that AllenNLP's ``batch_to_ids``
    followed by boundary insertion produces; the model's fast path uses :class:`TokenBatch`.
    """
    width = max((len(s) for s in sentences), default=0) + 2
    out = np.zeros((len(sentences), width, MAX_CHARS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        out[row, 0] = _BOS_IDS
        for col, token in enumerate(sentence, start=1):
            out[row, col] = token_char_ids(token)
        out[row, len(sentence) + 1] = _EOS_IDS
    return torch.from_numpy(out)


def distinct_tokens(sentences: Sequence[Sequence[str]], bos: str, eos: str) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """Each sentence between ``bos`` and ``eos`` as indices into its batch's distinct strings:
    ``(index [B, T] int64, lengths [B] int64 with the boundaries, strings)``; row 0 of ``strings``
    is ``""``, the padding row (so that even an empty-string token gets a row of its own), rows 1
    and 2 are ``bos`` and ``eos``, and a token spelled like a boundary shares its row."""
    rows: Dict[Optional[str], int] = {None: 0, bos: 1, eos: 2}
    width = max((len(s) for s in sentences), default=0) + 2
    index = np.zeros((len(sentences), width), dtype=np.int64)
    lengths = np.empty(len(sentences), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        n = len(sentence)
        index[row, 0] = 1
        index[row, 1 : n + 1] = [rows.setdefault(tok, len(rows)) for tok in sentence]
        index[row, n + 1] = 2
        lengths[row] = n + 2
    return index, lengths, [""] + [s for s in rows if s is not None]


@dataclass
class TokenBatch:
    """A batch of contexts as indices into its distinct token strings.

    The character CNN is context-free, so it only needs to run once per distinct string.

    token_index: ``[B, T]`` int64; position ``t`` of row ``b`` is distinct token
        ``token_index[b, t]``; ``<S>`` and ``</S>`` included; padding points at row 0.
    char_ids: ``[U, MAX_CHARS]`` int64 ids of the distinct tokens; row 0 is all zeros (padding).
    lengths: ``[B]`` int64 context lengths *including* the two boundary tokens.
    strings: the ``U`` distinct strings (``""`` for the padding row 0).
    """

    token_index: torch.Tensor
    char_ids: torch.Tensor
    lengths: torch.Tensor
    strings: List[str]

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sequence[str]]) -> "TokenBatch":
        index, lengths, strings = distinct_tokens(sentences, BOS_TOKEN, EOS_TOKEN)
        char_ids = np.stack([PADDING_IDS] + [_cached(s) for s in strings[1:]])
        return cls(
            token_index=torch.from_numpy(index),
            char_ids=torch.from_numpy(char_ids),
            lengths=torch.from_numpy(lengths),
            strings=strings,
        )
