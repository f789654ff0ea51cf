"""The context-free token encoder: character CNN -> highway layers -> projection (layer 0)."""

from __future__ import annotations

from functools import partial
from typing import List, Optional, Sequence, Tuple, cast

import torch
from torch import nn
from torch.nn import functional as F

from ..kernels import char_conv_train, char_table, char_trim, matmul

_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}


class Highway(nn.Module):
    """One highway layer as in bilm-tf: ``y = g * relu(x W_t + b_t) + (1 - g) * x``.

    The gate is ``g = sigmoid(x W_c + b_c)``; ``carry`` holds ``W_c``/``b_c`` (the name bilm-tf
    uses), ``transform`` holds ``W_t``/``b_t``.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.transform = nn.Linear(dim, dim)
        self.carry = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transformed = torch.relu(matmul.linear_t(x, self.transform.weight, self.transform.bias))
        gate = torch.sigmoid(matmul.linear_t(x, self.carry.weight, self.carry.bias))
        return gate * transformed + (1.0 - gate) * x


class CharCnnEncoder(nn.Module):
    """Character ids ``[N, max_chars]`` -> context-free token vectors ``[N, output_dim]``.

    One convolution per (width, n_filters) pair, max over character positions, then the
    activation, ``n_highway`` highway layers, and a linear projection to ``output_dim`` (omitted
    when the filter total already equals it, as in bilm-tf).
    """

    def __init__(
        self,
        n_characters: int,
        char_dim: int,
        filters: Sequence[Tuple[int, int]],
        n_highway: int,
        output_dim: int,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"char_cnn activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.char_embedding = nn.Embedding(n_characters, char_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, n, kernel_size=w) for w, n in filters)
        self.n_filters = sum(n for _, n in filters)
        self.highways = nn.ModuleList(Highway(self.n_filters) for _ in range(n_highway))
        self.projection: nn.Module
        if self.n_filters == output_dim:
            self.projection = nn.Identity()
        else:
            self.projection = nn.Linear(self.n_filters, output_dim)
        self.output_dim = output_dim
        #: under autograd, run the convolutions and products in this dtype (bf16 training)
        self.train_dtype: Optional[torch.dtype] = None
        #: at float32 inference, the convolutions as table lookups (:mod:`..kernels.char_table`)
        self.char_tables = char_table.CharTableCache()

    #: at inference, tokens are encoded this many at a time: the widest convolution's output
    #: (``[tokens, n_filters, max_chars]``) stays small (original shapes: 90 MB per 512 tokens)
    inference_chunk = 512
    #: in bf16 training, tokens are pooled this many at a time, each chunk cut to the positions
    #: its longest token needs (a training batch holds ~1,200 distinct tokens: a few chunks)
    train_chunk = 512

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():  # only the positions the maxima need (same outputs)
            return char_trim.encode_trimmed(char_ids, self.widest_filter, self.inference_chunk, self._encode)
        return self._encode(char_ids)

    @property
    def widest_filter(self) -> int:
        """The widest convolution's width (in characters)."""
        return max(cast(nn.Conv1d, conv).kernel_size[0] for conv in self.convs)

    def _encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        if self.train_dtype is not None and torch.is_grad_enabled():
            return self._encode_mixed(char_ids, self.train_dtype)
        h = self.pooled(char_ids)
        for highway in self.highways:
            h = highway(h)
        if isinstance(self.projection, nn.Linear):
            return matmul.linear_t(h, self.projection.weight, self.projection.bias)
        return h

    def pooled(self, char_ids: torch.Tensor) -> torch.Tensor:
        """The activation of each filter's maximum over positions, float32: ``[N, max_chars]`` ->
        ``[N, n_filters]`` (what the highways read). At float32 inference on the CPU the
        convolutions run as table lookups (:mod:`..kernels.char_table`; the same values to float
        rounding)."""
        by_tables = self.table_pooled(char_ids)
        if by_tables is not None:
            return _ACTIVATIONS[self.activation](by_tables)
        x = self.char_embedding(char_ids).transpose(1, 2)  # [N, char_dim, max_chars]
        pooled: List[torch.Tensor] = [conv(x).amax(dim=-1) for conv in self.convs]
        return _ACTIVATIONS[self.activation](torch.cat(pooled, dim=-1))

    def table_pooled(self, char_ids: torch.Tensor) -> Optional[torch.Tensor]:
        """Each filter's maximum over positions (bias included, before the activation) by the
        float32 tables of :mod:`..kernels.char_table`, or ``None`` where they do not apply (autograd
        on, no compiled kernels, not on the CPU, weights not float32 or not finite)."""
        return char_table.pooled(self, self.char_tables, char_ids)

    def _pool_mixed(self, convs: Sequence[nn.Conv1d], dtype: torch.dtype, char_ids: torch.Tensor) -> torch.Tensor:
        """Each filter's maximum over positions (bias included) of ``char_ids`` ``[n, positions]``, products in ``dtype``."""
        return char_conv_train.conv_max_pool(self.char_embedding(char_ids), convs, dtype)

    def _encode_mixed(self, char_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Training in ``dtype``: the convolutions as one product per chunk of tokens of similar
        length (:mod:`.char_conv_train`), each chunk cut to the character positions its maxima
        need (:mod:`.char_trim`: the same maxima, hence the same gradients up to float rounding),
        and every other product in ``dtype`` (weights cast once per call); the highway gates'
        elementwise maths in float32; float32 out."""
        act = _ACTIVATIONS[self.activation]
        acc = self.char_embedding.weight.dtype  # float32: the elementwise maths and the output
        convs = cast(Sequence[nn.Conv1d], self.convs)  # a ModuleList types its items as Module
        h = act(char_trim.encode_trimmed(char_ids, self.widest_filter, self.train_chunk, partial(self._pool_mixed, convs, dtype)))
        for highway in cast(Sequence[Highway], self.highways):
            low = h.to(dtype)
            transformed = torch.relu(F.linear(low, highway.transform.weight.to(dtype), highway.transform.bias.to(dtype)))
            gate = torch.sigmoid(F.linear(low, highway.carry.weight.to(dtype), highway.carry.bias.to(dtype)).to(acc))
            h = torch.lerp(h, transformed.to(acc), gate)  # gate * transformed + (1 - gate) * h
        if isinstance(self.projection, nn.Linear):
            return F.linear(h.to(dtype), self.projection.weight.to(dtype), self.projection.bias.to(dtype)).to(acc)
        return h
