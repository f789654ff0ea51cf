"""Packing length-sorted items into batches under a token budget."""

from __future__ import annotations

from typing import List, Optional, Sequence


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


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens: Optional[int] = None, sort: bool = True) -> List[List[int]]:
    """Indices ``0..len(lengths)-1`` in batches: sorted by length (unless ``sort`` is false),
    then ``batch_size`` at a time or, with ``max_tokens``, packed by :func:`pack_by_token_budget`."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i]) if sort else list(range(len(lengths)))
    if max_tokens is None:
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    return pack_by_token_budget(order, lengths, max_tokens)
