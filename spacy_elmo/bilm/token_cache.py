"""An LRU cache of context-free token vectors (the token encoder's output), keyed by string.

The character CNN is context-free, so a frequent word's layer-0 vector can be computed once and
reused. Entries live in one preallocated table; the cache empties itself whenever the encoder's
parameters change (their in-place version counters are part of the key), so training or
loading new weights never serves stale vectors.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn


class TokenVectorCache:
    """Up to ``capacity`` token vectors; see :meth:`encode`."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"token cache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.slots: "OrderedDict[str, int]" = OrderedDict()
        self.free: List[int] = list(range(capacity, 0, -1))
        self.table: Optional[torch.Tensor] = None
        self.key: Optional[Tuple] = None
        self.hits = self.misses = 0

    def clear(self) -> None:
        self.slots.clear()
        self.free = list(range(self.capacity, 0, -1))
        self.table = None

    def __len__(self) -> int:
        return len(self.slots)

    def encode(self, encoder: nn.Module, strings: Sequence[str], char_ids: torch.Tensor) -> torch.Tensor:
        """Vectors ``[U, P]`` for distinct tokens; row 0 (the padding row) is zeros.

        ``strings[i]`` must be the token whose ids are ``char_ids[i]`` (``strings[0]`` is ignored).
        """
        params = list(encoder.parameters())
        key = (params[0].device, params[0].dtype) + tuple(p._version for p in params)
        if key != self.key:
            self.clear()
            self.key = key
        slots = self.slots
        found: List[Optional[int]] = [None] + [slots.get(s) for s in strings[1:]]
        missing = [i for i in range(1, len(strings)) if found[i] is None]
        self.misses += len(missing)
        self.hits += len(strings) - 1 - len(missing)
        if len(strings) - 1 > self.capacity:  # more distinct words than the cache holds: no caching
            vectors = encoder(char_ids)
            vectors[0] = 0.0
            return vectors
        if missing:
            computed = encoder(char_ids[torch.tensor(missing, device=char_ids.device)])
            if self.table is None:
                self.table = computed.new_zeros(self.capacity + 1, computed.shape[1])  # slot 0: zeros
            free = self._free_slots(len(missing), protect={s for i, s in enumerate(strings) if i and found[i] is not None})
            assert len(free) == len(missing)
            self.table[torch.tensor(free, device=computed.device)] = computed
            for i, slot in zip(missing, free):
                slots[strings[i]] = slot
                found[i] = slot
        for i in range(1, len(strings)):
            slots.move_to_end(strings[i])
        assert self.table is not None
        return self.table[torch.tensor([0] + found[1:], device=self.table.device)]

    def _free_slots(self, count: int, protect: set) -> List[int]:
        """``count`` slots: unused ones first, then the least recently used not in ``protect``."""
        out: List[int] = []
        while len(out) < count and self.free:
            out.append(self.free.pop())
        if len(out) < count:
            for token in list(self.slots):  # least recently used first
                if token not in protect:
                    out.append(self.slots.pop(token))
                    if len(out) == count:
                        break
        return out
