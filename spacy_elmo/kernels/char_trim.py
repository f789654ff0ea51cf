"""Only the character positions a char CNN's max can need: same maxima, a fraction of the work.

ELMo's token encoder convolves every token's 50 character ids (``<bow>``, the word's bytes,
``<eow>``, then padding) and keeps each filter's maximum over positions. A word is a handful of
bytes, so most of the 50 positions hold the same padding id; every window that lies wholly in
that uniform tail sees the same characters and gives the same value. The maximum over
positions therefore equals the maximum over the windows that touch the word plus *one* window of
the tail, and both fit in the first ``word positions + widest filter`` positions.

:func:`encode_trimmed` uses this at inference and in bf16 training (the pooling only, under
autograd: the gradients reach the same characters and weights): distinct tokens are ordered by length and encoded
in chunks, each chunk cut to the positions its longest token needs (rounded up to a multiple of
:data:`POSITION_MULTIPLE`, so the products' shapes repeat). Outputs are the full computation's to
float rounding (the convolutions see the same windows, fewer of the identical ones); nothing
depends on which padding id the tail holds, only that it is uniform.
"""

from __future__ import annotations

from typing import Callable

import torch

#: chunks are cut to a multiple of this many positions (a handful of distinct product shapes)
POSITION_MULTIPLE = 8


def word_positions(char_ids: torch.Tensor) -> torch.Tensor:
    """``[N, L]`` ids -> ``[N]``: per row, the positions before its uniform tail (the longest run
    of one id that ends the row); 0 for a row of one id throughout."""
    different = char_ids != char_ids[:, -1:]  # [N, L]: differs from the row's last id
    positions = torch.arange(1, char_ids.shape[1] + 1, device=char_ids.device)
    return (different * positions).amax(dim=1)  # the last differing position (1-based), or 0


def needed_positions(word_length: int, widest: int, length: int) -> int:
    """Positions to keep for tokens of at most ``word_length`` positions before their tail:
    every window touching the word and one wholly in the tail (``widest`` = the widest filter),
    rounded up to :data:`POSITION_MULTIPLE`, at most ``length`` (all of them)."""
    keep = word_length + widest
    keep = -(-keep // POSITION_MULTIPLE) * POSITION_MULTIPLE
    return min(length, max(keep, widest))


def encode_trimmed(char_ids: torch.Tensor, widest: int, chunk: int, encode: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``encode`` (``[n, positions]`` ids -> ``[n, dim]``) over ``char_ids`` ``[N, L]`` in chunks of
    at most ``chunk`` tokens ordered by length, each cut to the positions it needs (see above);
    rows come back in the input order."""
    n, length = char_ids.shape
    if n == 0 or length < widest:
        return encode(char_ids)
    words = word_positions(char_ids)
    order = torch.argsort(words, stable=True)
    pieces = []
    for part in order.split(chunk):
        keep = needed_positions(int(words[part[-1]]), widest, length)  # the chunk's longest is last
        pieces.append(encode(char_ids[part, :keep]))
    encoded = torch.cat(pieces)
    return encoded[torch.argsort(order)]
