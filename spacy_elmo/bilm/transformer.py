"""The transformer biLM (AllenNLP's transformer ELMo) behind the same interface as the LSTM biLM.

AllenNLP publishes a biLM whose contextualizer is a pair of Transformer stacks
(``bidirectional_language_model_transformer``). :class:`TransformerBiLM` computes what
allennlp-models' ``BidirectionalLanguageModelTokenEmbedder`` reads from it, layer by layer:

* characters are ELMo's (:mod:`.characters`, ``<S>``/``</S>`` around every sentence); the character
  CNN max-pools over every position, padding included, then the activation, the highway layers,
  a projection that is always there, and a layer norm (:class:`TransformerTokenEncoder`);
* layer norm is AllenNLP's own: ``gamma * (x - mean) / (population std + eps) + beta`` with
  ``eps = 1e-13`` (1e-4 in half precision), not ``torch.nn.LayerNorm``;
* layer 0 is the token encoder's output duplicated ``[x; x]``, without positions; the sinusoidal
  positions (a tensor of the weights, row 0 for ``<S>``) are added once, before both directions;
* each direction is a stack of pre-norm blocks (``x + attn(LN(x))``, then ``x + W2 relu(W1 LN(x))``)
  with :data:`HEADS` heads (fixed in their code, absent from their config); the final layer norm
  applies to the last layer's output only;
* the forward direction attends to positions ``<= i``, the backward one to positions ``>= i`` of
  the same left-to-right sequence (the transposed mask; nothing is reversed); padding is never
  attended to by a real position. Layer ``k > 0`` is ``[forward_k; backward_k]``;
* no dropout (this is inference); the default mix, the mean of the layers, is the scalar mix's own.

The architecture travels in the options like any biLM's: ``lstm.n_layers`` is the number of
blocks per direction, ``lstm.projection_dim`` the model width, ``lstm.dim`` the feed-forward width
(the clips are null), ``char_cnn`` the token encoder, plus a section ``transformer``
(:data:`TRANSFORMER_KEY`) with the heads, the number of positions and the token layer norm.
:mod:`.trf_folder` reads AllenNLP's archive folder.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import torch
from torch import nn
from torch.nn import functional as F

from ..kernels import int8, matmul
from ..kernels.bf16 import Bf16Linears, LinearProducts
from ..kernels.int8 import QuantizedLinears
from .characters import TokenBatch
from .model import BiLM, BiLMConfig, OptionsError
from .token_encoder import CharCnnEncoder

TRANSFORMER_KEY = "transformer"
#: attention heads per block: fixed in AllenNLP's code (``make_model``), absent from its config
HEADS = 8


def layer_norm_eps(dtype: torch.dtype) -> float:
    """AllenNLP's ``tiny_value_of_dtype``: 1e-13 in float32/float64, 1e-4 in half precision."""
    return 1e-4 if dtype in (torch.float16, torch.bfloat16) else 1e-13


def sinusoidal_positions(rows: int, width: int) -> torch.Tensor:
    """The sinusoidal positions ``[rows, width]`` AllenNLP's ``PositionalEncoding`` computes (sines
    in the even columns, cosines in the odd ones): a new model's table (a read one keeps its own)."""
    position = torch.arange(rows, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(rows, width)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : width // 2]
    return table


class AllenLayerNorm(nn.Module):
    """AllenNLP's layer norm: ``gamma * (x - mean) / (population std + eps) + beta``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)
        std = centred.square().mean(-1, keepdim=True).sqrt_()  # the population std, two passes (torch's std is slow on the last axis)
        return self.gamma * centred / (std + layer_norm_eps(std.dtype)) + self.beta


class TransformerTokenEncoder(CharCnnEncoder):
    """AllenNLP's ``cnn-highway`` encoder with its projection after the highways and a layer norm:
    ELMo character ids ``[N, 50]`` -> ``[N, P]``. The id 0 row (a padded token) is an ordinary
    vector of the weights, as in their ``Embedding``."""

    def __init__(
        self, n_characters: int, char_dim: int, filters: Sequence[Tuple[int, int]], n_highway: int, output_dim: int, activation: str
    ) -> None:
        super().__init__(n_characters, char_dim, filters, n_highway, output_dim, activation)
        self.char_embedding.padding_idx = None
        self.projection = nn.Linear(self.n_filters, output_dim)  # always present in their encoder
        self.layer_norm = AllenLayerNorm(output_dim)

    def _encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(super()._encode(char_ids))


def apply_linear(x: torch.Tensor, module: nn.Linear, linears: Optional[LinearProducts] = None, relu: bool = False) -> torch.Tensor:
    """``module(x)`` (``relu(module(x))`` with ``relu``): from ``linears``' copies of the weights when
    given (int8 or bfloat16); under autocast as autocast casts it; otherwise routed to the CPU's
    fastest float kernel (:func:`~spacy_elmo.kernels.matmul.linear_t`, torch's own product under autograd)."""
    if linears is not None:
        return linears.apply(x, module, relu=relu)
    if torch.is_autocast_enabled(x.device.type):
        out = F.linear(x, module.weight, module.bias)
        return out.relu_() if relu else out
    return matmul.linear_t(x, module.weight, module.bias, relu=relu)


#: the attention's groups: a batch's sentences, longest first, attend in groups, each over its own
#: longest sentence's width (not the batch's); a group of at least ATTENTION_GROUP sentences closes
#: where the next sentence is at most GROUP_WIDTH_RATIO of its width, so a batch of similar lengths
#: (training's buckets) stays one group and a batch in input order splits where it pays
ATTENTION_GROUP = 8
GROUP_WIDTH_RATIO = 0.75


def attention_groups(lengths: Sequence[int]) -> List[range]:
    """Consecutive groups of ``lengths`` (longest first): see :data:`GROUP_WIDTH_RATIO`."""
    groups: List[range] = []
    start = 0
    for i in range(1, len(lengths)):
        if i - start >= ATTENTION_GROUP and lengths[i] <= GROUP_WIDTH_RATIO * lengths[start]:
            groups.append(range(start, i))
            start = i
    if len(lengths):
        groups.append(range(start, len(lengths)))
    return groups


class Rows:
    """Where a batch's real positions lie, and how the attention reads them.

    The blocks' products run over the real positions only, packed ``[N, D]`` (``N`` real positions,
    sentence by sentence, not ``B * T``): every product of a block is row by row, so skipping the
    padded rows changes no real position's arithmetic and saves the products' work on them (UD EWT
    test in batches of 64 in input order: 4,667 real positions in 14,168). The attention, the one
    step that mixes positions, runs in groups of sentences of similar length
    (:func:`attention_groups`), each padded only to its own longest (:meth:`gather`, :meth:`masks`,
    :meth:`scatter`)."""

    def __init__(self, lengths: Sequence[int], width: int, device: torch.device) -> None:
        self.batch, self.width = len(lengths), width
        steps = torch.arange(width, device=device)
        sizes = torch.tensor(list(lengths), dtype=torch.long, device=device)
        self.index = (steps.unsqueeze(0) < sizes.unsqueeze(1)).reshape(-1).nonzero().squeeze(1)  # packed row -> flat position
        self.n = int(sizes.sum())
        offsets = torch.cumsum(sizes, 0) - sizes  # each sentence's first packed row
        order = sorted(range(self.batch), key=lambda i: -lengths[i])
        #: per group: packed row of each (sentence, step), ``n`` (a zero row) at padding, flat ``[g * t]``;
        #: which of them are real ``[g, t]``; the flat indices of the real ones
        self.groups: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        rows = []
        for group in attention_groups([lengths[i] for i in order]):
            members = torch.tensor(order[group[0] : group[-1] + 1], dtype=torch.long, device=device)
            span = torch.arange(int(sizes[members].max()), device=device)
            real = span.unsqueeze(0) < sizes[members].unsqueeze(1)
            gather = torch.where(real, offsets[members].unsqueeze(1) + span.unsqueeze(0), self.n).reshape(-1)
            flat_real = real.reshape(-1).nonzero().squeeze(1)
            self.groups.append((gather, real, flat_real))
            rows.append(gather.index_select(0, flat_real))
        self.order = torch.argsort(torch.cat(rows)) if rows else torch.zeros(0, dtype=torch.long, device=device)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D]`` -> ``[N, D]``."""
        return x.reshape(self.batch * self.width, x.shape[-1]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, D]`` -> ``[B, T, D]``, zeros at padding."""
        full = x.new_zeros(self.batch * self.width, x.shape[-1])
        return full.index_copy(0, self.index, x).view(self.batch, self.width, x.shape[-1])

    def gather(self, x: torch.Tensor) -> List[torch.Tensor]:
        """``[N, D]`` -> each group's ``[g, t, D]``, zeros at padding."""
        padded = torch.cat([x, x.new_zeros(1, x.shape[-1])])  # index_select, not indexing: its gradient is a plain index_add
        return [padded.index_select(0, gather).view(real.shape[0], real.shape[1], -1) for gather, real, _ in self.groups]

    def scatter(self, groups: List[torch.Tensor]) -> torch.Tensor:
        """Each group's ``[g, t, D]`` -> ``[N, D]`` (the real positions, in packed order)."""
        real_rows = [y.reshape(-1, y.shape[-1]).index_select(0, flat_real) for y, (_, _, flat_real) in zip(groups, self.groups)]
        return torch.cat(real_rows).index_select(0, self.order)

    def masks(self, backward: bool) -> List[torch.Tensor]:
        """Each group's ``[g, 1, t, t]`` (query, key): the keys a query sees, the forward direction
        the keys ``<=`` it, the backward one the real keys ``>=`` it; a padded query sees every key
        (no row of the attention is empty, and its output is never used)."""
        out = []
        for _, real, _ in self.groups:
            span = torch.arange(real.shape[1], device=real.device)
            causal = span.unsqueeze(1) >= span.unsqueeze(0)  # [t, t]: key <= query
            seen = (causal.t().unsqueeze(0) & real.unsqueeze(1)) if backward else causal.unsqueeze(0)
            out.append((seen | ~real.unsqueeze(-1)).unsqueeze(1))
        return out


class SelfAttention(nn.Module):
    """Multi-headed scaled dot-product self-attention; ``projections`` are query, key, value, output."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise OptionsError(f"the model width {dim} is not a multiple of the {heads} attention heads")
        self.heads = heads
        self.projections = nn.ModuleList(nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, masks: List[torch.Tensor], rows: Rows, linears: Optional[LinearProducts] = None) -> torch.Tensor:
        """``x`` ``[N, D]``, the real positions packed (``rows``); ``masks``: each attention group's
        ``[g, 1, t, t]`` (:meth:`Rows.masks`); ``linears``: the projections' products from copies of
        their weights (int8 or bfloat16; inference only)."""
        dim = x.shape[-1]
        projections = cast(Sequence[nn.Linear], self.projections)
        grouped: List[Sequence[torch.Tensor]]
        if linears is None:
            qkv = [rows.gather(apply_linear(x, p)) for p in projections[:3]]
            grouped = [list(group) for group in zip(*qkv)]
        else:  # one product for the three: the input quantized (or rounded) once
            grouped = [t.split(dim, -1) for t in rows.gather(linears.joined(x, self.projections))]
        mixed = []
        for group, mask in zip(grouped, masks):
            q, k, v = (self._heads(t) for t in group)
            mixed.append(self._attend(q, k, v, mask))
        return apply_linear(rows.scatter(mixed), projections[3], linears)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """``[g, t, D]`` -> ``[g, H, t, D / H]``."""
        return t.reshape(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One group's heads ``[g, H, t, d]`` -> ``[g, t, H * d]``."""
        if q.dtype in (torch.bfloat16, torch.float16):  # bf16 autocast or copies: the scores' softmax in float32
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            weights = torch.softmax(scores.float().masked_fill_(~mask, torch.finfo(torch.float32).min), dim=-1)
            mixed = torch.matmul(weights.to(v.dtype), v)
        else:  # softmax(q k^T / sqrt(d_head)) v fused: measured 2.2x the explicit products on one core in float32
            mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return mixed.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class Block(nn.Module):
    """A pre-norm block: ``x + attn(LN(x))``, then ``x + W2 relu(W1 LN(x))``; in training, each
    sublayer's output is dropped out at ``dropout`` before it joins the residual (as AllenNLP's
    ``SublayerConnection``)."""

    def __init__(self, dim: int, ff_dim: int, heads: int) -> None:
        super().__init__()
        self.dropout = 0.0
        self.attention_norm = AllenLayerNorm(dim)
        self.attention = SelfAttention(dim, heads)
        self.ff_norm = AllenLayerNorm(dim)
        self.ff_in = nn.Linear(dim, ff_dim)
        self.ff_out = nn.Linear(ff_dim, dim)

    def forward(self, x: torch.Tensor, masks: List[torch.Tensor], rows: Rows, linears: Optional[LinearProducts] = None) -> torch.Tensor:
        """``x`` ``[N, D]``: the real positions packed (:class:`Rows`)."""
        x = x + F.dropout(self.attention(self.attention_norm(x), masks, rows, linears), self.dropout, self.training)
        hidden = apply_linear(self.ff_norm(x), self.ff_in, linears, relu=True)
        return x + F.dropout(apply_linear(hidden, self.ff_out, linears), self.dropout, self.training)


class TransformerStack(nn.Module):
    """One direction: the blocks' outputs, the last one through the final layer norm."""

    def __init__(self, n_layers: int, dim: int, ff_dim: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, ff_dim, heads) for _ in range(n_layers))
        self.final_norm = AllenLayerNorm(dim)

    def forward(
        self, x: torch.Tensor, masks: List[torch.Tensor], rows: Rows, linears: Optional[LinearProducts] = None
    ) -> List[torch.Tensor]:
        """``x`` ``[N, D]`` packed -> each block's output ``[N, D]``."""
        outputs = []
        for block in self.blocks:
            x = block(x, masks, rows, linears)
            outputs.append(x)
        outputs[-1] = self.final_norm(outputs[-1])
        return outputs


class TransformerContext(nn.Module):
    """Both directions over token vectors ``[B, T, P]`` -> L layers ``[B, T, 2P]``.

    For training (:mod:`spacy_elmo.training`): :attr:`dropout` drops each sublayer's output, and
    with :attr:`train_dtype` ``torch.bfloat16`` the steps under autograd run their products in
    bfloat16 (autocast) while the residual stream, the layer norms and the attention weights'
    softmax stay float32. Inference in bfloat16 or int8 passes ``linears`` (copies of the weights)
    to :meth:`forward` instead."""

    def __init__(self, n_layers: int, dim: int, ff_dim: int, heads: int, positions: int) -> None:
        super().__init__()
        self.forward_stack = TransformerStack(n_layers, dim, ff_dim, heads)
        self.backward_stack = TransformerStack(n_layers, dim, ff_dim, heads)
        self.register_buffer("positions", sinusoidal_positions(positions, dim))
        self.train_dtype: Optional[torch.dtype] = None

    @property
    def dropout(self) -> float:
        """The sublayers' dropout in training (0 for a model read from an archive)."""
        return cast(Block, self.forward_stack.blocks[0]).dropout if len(self.forward_stack.blocks) else 0.0

    @dropout.setter
    def dropout(self, value: float) -> None:
        for stack in (self.forward_stack, self.backward_stack):
            for block in stack.blocks:
                cast(Block, block).dropout = float(value)

    @torch.no_grad()
    def init_for_training(self) -> None:
        """A new model's weights: every matrix Xavier-uniform and every bias zero (as AllenNLP's
        ``make_model``), the layer norms the identity."""
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
            elif name.endswith("gamma"):
                nn.init.ones_(parameter)
            else:
                nn.init.zeros_(parameter)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, linears: Optional[LinearProducts] = None) -> List[torch.Tensor]:
        """``tokens`` ``[B, T, P]`` -> L layers ``[B, T, 2P]`` (zeros at padding); ``linears`` (inference
        only): every linear's product from copies of the weights, int8
        (:class:`~spacy_elmo.kernels.int8.QuantizedLinears`) or bfloat16 (:class:`~spacy_elmo.kernels.bf16.Bf16Linears`)."""
        if linears is not None and torch.is_grad_enabled():
            raise ValueError("int8 and bfloat16 weight copies are for inference: run under torch.no_grad() or torch.inference_mode()")
        width = tokens.shape[1]
        positions = cast(torch.Tensor, self.positions)  # a registered buffer
        if width > positions.shape[0]:
            raise ValueError(
                f"a sentence of {width - 2} tokens is longer than this transformer biLM's {positions.shape[0] - 2} positions allow"
            )
        rows = Rows([int(n) for n in lengths.tolist()], width, tokens.device)
        x = rows.pack(tokens + positions[:width].to(tokens.dtype))
        mixed = torch.is_grad_enabled() and self.train_dtype == torch.bfloat16 and tokens.dtype == torch.float32
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=mixed):
            forward = self.forward_stack(x, rows.masks(backward=False), rows, linears)
            backward = self.backward_stack(x, rows.masks(backward=True), rows, linears)
        # the residual stream (float32), zeros at padding
        return [rows.unpack(torch.cat([f, b], dim=-1)) for f, b in zip(forward, backward)]


def transformer_section(config: BiLMConfig, source: str = "options") -> Dict[str, Any]:
    """The ``transformer`` section of the options, checked (one-line :class:`OptionsError`)."""
    section = config.extra.get(TRANSFORMER_KEY)
    if not isinstance(section, dict):
        raise OptionsError(f"{source}: the options have no '{TRANSFORMER_KEY}' section: not a transformer biLM")
    for key in ("heads", "positions"):
        value = section.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionsError(f"{source}: {TRANSFORMER_KEY}.{key} must be a whole number >= 1, got {value!r}")
    if section.get("token_layer_norm") is not True:
        raise OptionsError(
            f"{source}: {TRANSFORMER_KEY}.token_layer_norm must be true (the only token encoder AllenNLP's transformer ELMo has)"
        )
    return section


class TransformerBiLM(BiLM):
    """A biLM whose contextualizer is AllenNLP's pair of Transformer stacks (module docstring).

    Everything around it is :class:`BiLM`'s: :meth:`forward` ``[L+1, B, T, 2P]``, batching,
    ``embed_sentences``, the token cache. A Transformer carries no state between batches, so
    ``stateful=True`` is refused. Under bfloat16 inference the token encoder's products run in
    bfloat16 as the LSTM biLM's do, its layer norm in float32."""

    int8_token_encoder = False  # int8 runs the blocks' linears; the encoder (with its layer norm) stays float32

    def __init__(self, config: BiLMConfig, stateful: bool = False, token_cache_size: int = 0) -> None:
        if stateful:
            raise ValueError("a transformer biLM carries no state between batches: stateful=True does not apply")
        super().__init__(config, stateful=False, token_cache_size=token_cache_size)

    def set_inference_precision(self, precision: str) -> None:
        """As :meth:`BiLM.set_inference_precision`: ``"bfloat16"`` runs every linear of the blocks (the
        attention's four projections and the feed-forward pair) on bfloat16 copies of their weights
        made once (:class:`~spacy_elmo.kernels.bf16.Bf16Linears`; inputs rounded to bfloat16, float32
        out) and the token encoder's products in bfloat16 (its highway gates' maths and layer norm in
        float32). ``"int8"`` runs the same linears in int8, from int8 copies of their weights made
        once (:class:`~spacy_elmo.kernels.int8.QuantizedLinears`), each row of activations quantized
        on its own, and the token encoder in float32. Either way the attention's own products and
        softmax, the layer norms, biases and the residual stream stay float32."""
        super().set_inference_precision(precision)

    def _bf16_token_encoder(self, products: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        """The char CNN, highways and projection with bfloat16 products, then the encoder's layer norm in float32."""
        encode = super()._bf16_token_encoder(products)
        encoder = cast(TransformerTokenEncoder, self.token_encoder)
        return lambda char_ids: encoder.layer_norm(encode(char_ids))

    def _build_token_encoder(self, config: BiLMConfig) -> CharCnnEncoder:
        transformer_section(config)
        return TransformerTokenEncoder(
            config.n_characters, config.char_dim, config.filters, config.n_highway, config.projection_dim, config.activation
        )

    def _build_context(self, config: BiLMConfig) -> None:
        section = transformer_section(config)
        self.transformer = TransformerContext(
            config.n_layers, config.projection_dim, config.lstm_dim, section["heads"], section["positions"]
        )

    def _contextualize(
        self, batch: TokenBatch, vectors: torch.Tensor, tokens: torch.Tensor, skip_final: bool, products: Optional[Any]
    ) -> List[torch.Tensor]:
        quantized: Optional[int8.Int8Products] = getattr(self, "_int8", None)
        linears: Optional[LinearProducts] = None
        if not torch.is_grad_enabled() and tokens.dtype == torch.float32:
            if quantized is not None:
                linears = QuantizedLinears(self.transformer, quantized.linears, quantized.levels)
            elif products is not None:  # bfloat16 inference (BiLM._bf16_products)
                linears = Bf16Linears(self.transformer, products.linears)
        return self.transformer(tokens, batch.lengths, linears)


__all__ = [
    "ATTENTION_GROUP",
    "GROUP_WIDTH_RATIO",
    "HEADS",
    "Rows",
    "TRANSFORMER_KEY",
    "AllenLayerNorm",
    "TransformerBiLM",
    "TransformerContext",
    "TransformerTokenEncoder",
    "sinusoidal_positions",
    "transformer_section",
]
