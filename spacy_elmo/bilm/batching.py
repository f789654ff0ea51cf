"""Packing length-sorted items into batches under a token budget."""
from __future__ import annotations

from typing import List, Sequence


def pack_by_token_budget(order: Sequence[int], lengths: Sequence[int], max_tokens: int) -> List[List[int]]:
    """Group ``order`` (indices sorted by ascending length) into consecutive batches with
    ``rows * (longest + 2) <= max_tokens`` (the 2 is ``<S>``/``</S>``); an item longer than the
    budget gets a batch of its own."""
    batches: List[List[int]] = []
    batch: List[int] = []
    for i in order:
        if batch and (len(batch) + 1) * (lengths[i] + 2) > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches
