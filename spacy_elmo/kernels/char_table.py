"""A char CNN's convolutions and max-pooling at inference, as table lookups (compiled).

At character position ``t`` a convolution of width ``w`` gives ``b + sum_j W_j e(c[t + j])``, and
the character embedding ``e`` takes one of a few hundred values, so each ``W_j e(c)`` is a row of
a table ``E W_j^T`` (``[n_characters, filters]``) computed once per weight version. A window then
costs ``w`` row additions per filter instead of ``w * char_dim`` multiply-adds, and the compiled
kernel (``char_table_max_f32``) keeps each filter's running maximum, so the ``[positions, filters]``
output is never written. The sums are float32, in a fixed order per token and filter (bias, then
the window's characters in order): a token's value does not depend on the batch, the padding or
the thread count. They differ from a convolution's only by float rounding (the products are
summed in another order).

Used at inference by :meth:`~..bilm.token_encoder.CharCnnEncoder.pooled` (float32, and so int8's
encoder), by the bfloat16 encoder's pooling and by ELMoForManyLangs' encoder; training (autograd)
keeps the convolutions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import torch
from torch import nn

from . import native
from .bf16 import Bf16WeightCache

#: the most the tables may hold (bytes): a char CNN over a large character vocabulary keeps its
#: convolutions (the original shapes' tables over 262 byte ids: 12.9 MB)
MAX_TABLE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class CharTableSet:
    """The tables of one char CNN: ``tables`` holds, group after group (``counts[g]`` filters of
    width ``widths[g]``), the group's ``widths[g]`` tables ``[vocab, counts[g]]``; ``bias``
    ``[n_filters]``."""

    tables: torch.Tensor  # float32, flat
    vocab: int
    widths: Tuple[int, ...]
    counts: Tuple[int, ...]
    bias: torch.Tensor


def build_tables(embedding: torch.Tensor, convs: Sequence[Tuple[torch.Tensor, Optional[torch.Tensor]]]) -> Optional[CharTableSet]:
    """The :class:`CharTableSet` of a char embedding ``[vocab, char_dim]`` and its convolutions'
    ``(weight [filters, char_dim, width], bias)`` in order; ``None`` when a table or a bias is not
    finite (the convolutions then run, and keep their NaN semantics) or the tables would exceed
    :data:`MAX_TABLE_BYTES`."""
    embedding = embedding.detach().float()
    if 4 * embedding.shape[0] * sum(int(w.shape[0]) * int(w.shape[2]) for w, _ in convs) > MAX_TABLE_BYTES:
        return None
    # group g's table j = E W_j^T [vocab, filters], stored j-major: [width, vocab, filters]
    tables = torch.cat([torch.einsum("vc,fcj->jvf", embedding, weight.detach().float()).reshape(-1) for weight, _ in convs])
    bias = torch.cat([b.detach().float() if b is not None else torch.zeros(w.shape[0]) for w, b in convs]).contiguous()
    if not (bool(torch.isfinite(tables).all()) and bool(torch.isfinite(bias).all())):
        return None
    widths = tuple(int(w.shape[2]) for w, _ in convs)
    counts = tuple(int(w.shape[0]) for w, _ in convs)
    return CharTableSet(tables.contiguous(), int(embedding.shape[0]), widths, counts, bias)


class CharTableCache(Bf16WeightCache):
    """A char-CNN encoder's :class:`CharTableSet` (under ``"tables"``, absent when not finite),
    remade when any of the encoder's parameters changes (the key of :class:`.bf16.Bf16WeightCache`)."""

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        params = dict(named)
        convs: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = []
        while f"convs.{len(convs)}.weight" in params:
            k = len(convs)
            convs.append((params[f"convs.{k}.weight"], params.get(f"convs.{k}.bias")))
        tables = build_tables(params["char_embedding.weight"], convs) if convs else None
        return {} if tables is None else {"tables": tables}


def pooled(encoder: Any, cache: CharTableCache, char_ids: torch.Tensor) -> Optional[torch.Tensor]:
    """Each filter's maximum over positions (bias included, before the activation) by the tables,
    ``[N, n_filters]`` float32; ``None`` where they do not apply (no compiled kernels, a device
    other than the CPU, autograd on, weights not float32 or not finite, fewer positions than the
    widest filter): the caller then runs the convolutions."""
    if torch.is_grad_enabled() or char_ids.device.type != "cpu" or encoder.char_embedding.weight.dtype != torch.float32:
        return None
    lib = native.library()
    if lib is None or char_ids.shape[1] < encoder.widest_filter:
        return None
    tables = cast(Optional[CharTableSet], cache.weights(encoder).get("tables"))
    if tables is None:
        return None
    return lib.char_table_max(char_ids, tables.tables, tables.vocab, tables.widths, tables.counts, tables.bias)
