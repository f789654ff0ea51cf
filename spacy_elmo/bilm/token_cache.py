"""An LRU cache of context-free token vectors (the token encoder's output), keyed by string.

The character CNN is context-free, so a frequent word's layer-0 vector can be computed once and
reused. Entries live in one preallocated table.

Staleness: the cache empties itself whenever the encoder's parameters may have changed. Its key
holds, for every parameter, the parameter object's identity, its storage address and its
in-place version counter, plus the device and dtype. In-place updates (an optimizer step,
``load_state_dict`` copying into the parameters) move the version counter; replacing a tensor
(``param.data = ...``, ``load_state_dict(..., assign=True)``, ``.to()``) moves the storage
address. The cache keeps the storages it keyed on alive, so a freed address cannot be reused by
new weights and look unchanged. :class:`~spacy_elmo.bilm.model.BiLM` also clears its cache on
every ``load_state_dict``. Writes that bypass autograd's version counting (``param.data.add_()``,
writing through a NumPy view) cannot be seen: call :meth:`TokenVectorCache.clear` after them.

Threads: one cache may serve several threads at once (e.g. ``nlp()`` calls on a shared
pipeline). A lock guards the lookup and the insertion; the encoder runs outside it, and every
call gets its own output tensor (never a view of the shared table).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn


class TokenVectorCache:
    """Up to ``capacity`` token vectors; see :meth:`encode`. Safe to share between threads."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"token cache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self.slots: "OrderedDict[str, int]" = OrderedDict()
        self.free: List[int] = list(range(capacity, 0, -1))
        self.table: Optional[torch.Tensor] = None
        self.key: Optional[Tuple] = None
        self._held: List[torch.Tensor] = []  # keeps the keyed storages alive (see module docstring)
        self.hits = self.misses = 0

    def clear(self) -> None:
        """Forget every entry (and the weights the entries were computed with)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self.slots.clear()
        self.free = list(range(self.capacity, 0, -1))
        self.table = None
        self.key = None
        self._held = []

    def __len__(self) -> int:
        return len(self.slots)

    # a copy (deepcopy, pickle) starts empty: the lock cannot be copied and the key names
    # storages of the original's parameters
    def __getstate__(self) -> Dict[str, Any]:
        return {"capacity": self.capacity, "hits": self.hits, "misses": self.misses}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["capacity"])  # type: ignore[misc]
        self.hits, self.misses = state["hits"], state["misses"]

    @staticmethod
    def _key(params: Sequence[torch.Tensor]) -> Tuple:
        return (params[0].device, params[0].dtype) + tuple((id(p), p.data_ptr(), p._version) for p in params)

    def encode(
        self,
        encoder: nn.Module,
        strings: Sequence[str],
        char_ids: torch.Tensor,
        run: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> torch.Tensor:
        """Vectors ``[U, P]`` for distinct tokens; row 0 (the padding row) is zeros.

        ``strings[i]`` must be the token whose ids are ``char_ids[i]`` (``strings[0]`` is ignored).
        ``run`` computes the missing vectors in place of ``encoder`` (e.g. its bfloat16 path: the
        owner clears the cache when it switches). The result is a new tensor owned by the caller.
        """
        if run is None:
            run = encoder
        params = list(encoder.parameters())
        key = self._key(params)
        n = len(strings)
        out: Optional[torch.Tensor] = None
        with self._lock:
            if key != self.key:
                self._clear()
                self.key = key
                self._held = [p.detach() for p in params]
            slots = self.slots
            found = [0] + [slots.get(s, 0) for s in strings[1:]]  # slot 0: the zero row
            missing = [i for i in range(1, n) if not found[i]]
            self.misses += len(missing)
            self.hits += n - 1 - len(missing)
            if len(missing) < n - 1:
                for i in range(1, n):
                    if found[i]:
                        slots.move_to_end(strings[i])
                assert self.table is not None
                # advanced indexing copies: the rows stay ours when other threads reuse the slots
                out = self.table[torch.tensor(found, device=self.table.device)]
        if not missing:
            return out if out is not None else torch.zeros_like(run(char_ids[:1]))
        rows = torch.tensor(missing, device=char_ids.device)
        if out is None:  # nothing to reuse: one encoder call for all rows
            out = run(char_ids)
            out[0] = 0.0
            computed = out[rows]
        else:
            computed = run(char_ids[rows])
            out[rows.to(out.device)] = computed
        if len(missing) <= self.capacity:  # else more new words than the cache holds: no caching
            self._insert(key, [strings[i] for i in missing], computed)
        return out

    def _insert(self, key: Tuple, strings: List[str], computed: torch.Tensor) -> None:
        with self._lock:
            if key != self.key:  # the weights changed while we computed: these vectors are stale
                return
            new = [(s, row) for row, s in enumerate(strings) if s not in self.slots]  # another thread may have added some
            if not new:
                return
            if self.table is None:
                self.table = computed.new_zeros(self.capacity + 1, computed.shape[1])  # slot 0: zeros
            free = self._free_slots(len(new))
            rows = [row for _, row in new]
            self.table[torch.tensor(free, device=self.table.device)] = computed[torch.tensor(rows, device=computed.device)]
            for (s, _), slot in zip(new, free):
                self.slots[s] = slot

    def _free_slots(self, count: int) -> List[int]:
        """``count`` slots: unused ones first, then the least recently used (``count <= capacity``)."""
        out: List[int] = []
        while len(out) < count and self.free:
            out.append(self.free.pop())
        while len(out) < count:
            _, slot = self.slots.popitem(last=False)  # least recently used first
            out.append(slot)
        return out
