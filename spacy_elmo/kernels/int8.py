"""int8 inference: the LSTM stack's matrix products on the CPU's integer units, float32 everything else.

``BiLM.set_inference_precision("int8")`` routes inference (no autograd) through this module:

* each LSTM layer's three products (input ``x W_x``, recurrent ``h W_h``, output projection
  ``m W_p``) multiply int8 weights, quantized once per output channel (symmetric, scale
  ``max |w| / 127``), by activations quantized per row at run time (symmetric, scale
  ``max |x| / levels``), accumulate in int32 and scale the sums back to float32;
* a wide char-CNN token encoder (:data:`ENCODER_MIN_FILTERS` filters or more: every published
  shape) runs its highway products (transform and carry as one) and its projection in int8 too
  (:func:`encode_tokens`): measured on the original shapes at 1.15x the tokens per CPU-second with
  the token cache off, the layer-0 vectors at cosine 0.9999 to float32's at the 1st percentile; a
  narrower one (the embedded default's 512) gains nothing measurable and stays float32;
* biases, gates, the cell and hidden state, clipping, residuals, the encoder's convolutions,
  max-pooling and highway gates stay float32;
* the product is oneDNN's int8 inner product (``torch.ops.onednn.qlinear_pointwise``, plain int8
  and uint8 tensors: not the quantized-tensor API, which torch deprecates), given a row scale of
  1 so that each row's own scale is applied afterwards: a row's result never depends on the
  other rows of its batch;
* :func:`~.cpu.int8_path` picks the activations' levels from the CPU flags: 127 (8 bits) where an
  integer dot-product unit (AMX-INT8, AVX512-VNNI, AVX-VNNI) sums into int32 directly, 63
  (7 bits) on AVX2 alone, whose ``vpmaddubsw`` sums pairs in 16 bits and would saturate on
  8-bit activations (``63 * 127 * 2 < 2**15``); the int32 sums are then exact on either path;
* the quantized weights are made once (:class:`Int8WeightCache`) and remade only when a weight
  changes, never per call.

The error is stated and measured in ``docs/benchmarks.md`` ("int8 inference").
"""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from . import bf16, char_trim, cpu, matmul, native

#: the LSTM stack's parameters whose products run in int8 (``[2, in, out]`` each)
INT8_PRODUCTS = ("w_input", "w_state", "w_proj")
#: the char CNN's filter count from which its highway and projection products run in int8 as well
#: (bench/int8_encoder.py: 2,048 filters 1.15x tokens per CPU-second, 512 filters 1.03x)
ENCODER_MIN_FILTERS = 2048


class FloatWeightsReleased(RuntimeError):
    """The biLM freed its float32 LSTM weights for int8-only inference (``BiLM.release_float_products``)."""


class Int8Unavailable(ValueError):
    """This machine has no int8 product path (no AVX2, or a torch without oneDNN's int8 linear)."""


def activation_levels() -> int:
    """The largest magnitude a quantized activation takes on this CPU (see the module docstring)."""
    path = cpu.int8_path()
    if path is None:
        raise Int8Unavailable("int8 inference needs an x86 CPU with AVX2 (or AVX-VNNI/AVX512-VNNI/AMX); this CPU's flags show none")
    if not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        raise Int8Unavailable(
            f"int8 inference needs torch's oneDNN int8 linear (torch.ops.onednn.qlinear_pointwise), absent in torch {torch.__version__}"
        )
    return 127 if path == "vnni" else 63


class QuantizedWeight:
    """A weight ``[in, out]`` as int8 per output channel: oneDNN's packed layout and the scales.

    Only the packed copy is kept (the plain int8 values would double the quantized weights'
    memory: 72 MB more for the original model's LSTM); ``keep_values=True`` keeps them too, for
    :meth:`dequantized` and exact-product checks.
    """

    def __init__(self, weight: torch.Tensor, keep_values: bool = False) -> None:
        if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"int8: expected a float32 CPU [in, out] weight, got {weight.dtype} {tuple(weight.shape)} on {weight.device}")
        rows = weight.t()  # [out, in]: one scale per output channel
        amax = rows.abs().amax(dim=1)
        self.scales = torch.where(amax > 0, amax / 127, torch.ones_like(amax)).contiguous()
        values = torch.round(rows / self.scales[:, None]).clamp_(-127, 127).to(torch.int8).contiguous()
        self.zero_points = torch.zeros(len(amax), dtype=torch.long)
        self.packed = torch.ops.onednn.qlinear_prepack(values, None)
        self.values: Optional[torch.Tensor] = values if keep_values else None
        self.in_features, self.out_features = weight.shape

    def dequantized(self) -> torch.Tensor:
        """The float32 weight ``[in, out]`` these int8 values stand for (for error checks; needs ``keep_values=True``)."""
        if self.values is None:
            raise ValueError("this QuantizedWeight kept only its packed copy: build it with keep_values=True to read its values")
        return (self.values.float() * self.scales[:, None]).t()


def quantize_rows(x: torch.Tensor, levels: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``x`` ``[n, in]`` float32 as uint8 (zero point ``levels + 1``) and each row's scale ``[n, 1]``
    (``max |x| / levels``; 1 for an all-zero row): ``round(x * levels / max |x|)``, half to even.
    The compiled kernel (:meth:`.native.NativeKernels.quantize_rows`: two passes over a row, where
    these are eight) computes the same, but for a value at a rounding tie that the compiler's
    reciprocal may move by one step; a row with a NaN or an infinity there gets scale NaN."""
    amax = torch.maximum(x.amax(dim=1, keepdim=True), x.amin(dim=1, keepdim=True).neg_())  # max |x| without a copy of |x|
    positive = amax > 0
    scale = torch.where(positive, amax / levels, torch.ones_like(amax))
    inverse = torch.where(positive, levels / amax, torch.ones_like(amax))
    q = torch.mul(x, inverse).round_().clamp_(-levels, levels).add_(levels + 1)
    return q.to(torch.uint8), scale


def quantize(x: torch.Tensor, levels: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize_rows` by the compiled kernel where there is one (rows contiguous), else eagerly."""
    compiled = native.library()
    if compiled is not None and x.dtype == torch.float32 and x.dim() == 2 and x.shape[1] > 0 and (x.shape[1] == 1 or x.stride(1) == 1):
        return compiled.quantize_rows(x, levels)
    return quantize_rows(x, levels)


def linear(x: torch.Tensor, weight: QuantizedWeight, levels: Optional[int] = None) -> torch.Tensor:
    """``x @ weight`` in int8 with int32 accumulation: ``x`` ``[n, in]`` float32 -> ``[n, out]`` float32."""
    if x.dim() != 2 or x.shape[1] != weight.in_features:
        raise ValueError(f"int8 linear: expected x [n, {weight.in_features}], got {tuple(x.shape)}")
    if x.shape[0] == 0:
        return x.new_zeros(0, weight.out_features)
    levels = activation_levels() if levels is None else levels
    q, scale = quantize(x.float(), levels)
    out = torch.ops.onednn.qlinear_pointwise(
        q, 1.0, levels + 1, weight.packed, weight.scales, weight.zero_points, None, 1.0, 0, torch.float32, "none", [], ""
    )
    return out.mul_(scale)


class Int8WeightCache(bf16.Bf16WeightCache):
    """The LSTM stack's :data:`INT8_PRODUCTS` as :class:`QuantizedWeight`, one per layer, parameter
    and direction (``"layers.0.w_state.1"``), remade when a weight changes (the same key as
    :class:`~.bf16.Bf16WeightCache`: identity, storage and in-place version of every parameter).

    :meth:`freeze` makes the current copies final (the float32 weights they came from may then be
    freed): they are served as they are, kept through :meth:`clear`, and refuse to be pickled."""

    frozen = False

    def freeze(self, module: nn.Module) -> Dict[str, Any]:
        """Quantize ``module``'s products now and keep these copies for good; returns them."""
        copies = self.weights(module)
        with self._lock:
            self.frozen, self._key, self._held = True, (), []  # the float32 storages are no longer held here
        return copies

    def weights(self, module: nn.Module) -> Dict[str, Any]:
        if self.frozen:
            return self._copies
        return super().weights(module)

    def clear(self) -> None:
        if not self.frozen:  # frozen copies are the only weights left
            super().clear()

    def __getstate__(self) -> Dict:
        if self.frozen:
            raise FloatWeightsReleased(
                "this biLM released its float32 LSTM weights (int8 inference only): its int8 copies cannot be pickled or "
                "copied; load the model again where it is needed and release there"
            )
        return super().__getstate__()

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        copies: Dict[str, Any] = {}
        for name, p in named:
            if name.rsplit(".", 1)[-1] in INT8_PRODUCTS:
                for d in range(p.shape[0]):
                    copies[f"{name}.{d}"] = QuantizedWeight(p.detach()[d].float())
        return copies


class Int8LinearCache(bf16.Bf16WeightCache):
    """Every ``nn.Linear`` weight ``[out, in]`` of a module as :class:`QuantizedWeight`
    (:func:`~.bf16.linear_copies`: keyed by the linear's name, an attention's query, key and value
    joined into one weight with their biases), all remade when a weight changes."""

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        return bf16.linear_copies(named, QuantizedWeight)


class QuantizedLinears(bf16.LinearProducts):
    """The int8 weights of a module's linears (:class:`Int8LinearCache`) and the activations'
    levels: what a transformer block's products read in int8 mode (each row of activations
    quantized on its own, the bias in float32)."""

    def __init__(self, module: nn.Module, cache: Int8LinearCache, levels: int) -> None:
        super().__init__(module, cache)
        self.levels = levels

    def product(self, x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
        return linear(x, weight, self.levels)


class Int8EncoderCache(bf16.Bf16WeightCache):
    """A char-CNN token encoder's highway products (``"highways.K"``: transform and carry joined
    into one ``[dim, 2 dim]`` weight, each output channel with its own scale, so joining changes
    no value) and its projection (``"projection"``) as :class:`QuantizedWeight`, remade when a
    weight changes."""

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        params = dict(named)
        copies: Dict[str, Any] = {}
        k = 0
        while f"highways.{k}.transform.weight" in params:
            joined = torch.cat([params[f"highways.{k}.transform.weight"], params[f"highways.{k}.carry.weight"]])  # [2 dim, dim]
            copies[f"highways.{k}"] = QuantizedWeight(joined.detach().t().float())
            k += 1
        if "projection.weight" in params:
            copies["projection"] = QuantizedWeight(params["projection.weight"].detach().t().float())
        return copies


def quantizes_encoder(encoder: nn.Module) -> bool:
    """Whether int8 mode runs ``encoder``'s highway and projection products in int8 (a char CNN
    of :data:`ENCODER_MIN_FILTERS` filters or more)."""
    return int(getattr(encoder, "n_filters", 0)) >= ENCODER_MIN_FILTERS and hasattr(encoder, "highways")


def encode_tokens(encoder: Any, weights: Dict[str, Any], levels: int, char_ids: torch.Tensor) -> torch.Tensor:
    """:meth:`CharCnnEncoder.forward` at inference with int8 highway and projection products
    (``weights`` from :class:`Int8EncoderCache`): ``[N, max_chars]`` -> ``[N, P]`` float32."""
    return char_trim.encode_trimmed(char_ids, encoder.widest_filter, encoder.inference_chunk, partial(_encode, encoder, weights, levels))


def _encode(encoder: Any, weights: Dict[str, Any], levels: int, char_ids: torch.Tensor) -> torch.Tensor:
    h = encoder.pooled(char_ids)  # the convolutions and max-pooling in float32
    for k, highway in enumerate(encoder.highways):
        both = linear(h, weights[f"highways.{k}"], levels)  # [N, 2 dim]: one product, rows quantized once
        transformed = torch.relu_(both[:, : highway.dim].add_(highway.transform.bias))
        gate = torch.sigmoid_(both[:, highway.dim :].add_(highway.carry.bias))
        h = torch.lerp(h, transformed, gate)  # gate * transformed + (1 - gate) * h
    if "projection" in weights:
        return linear(h, weights["projection"], levels).add_(encoder.projection.bias)
    return h


class Int8Products:
    """What a biLM in int8 mode holds: the quantized weights of its LSTM stack (or of its
    transformer blocks' linears) and, where ``encoder`` is true, of its token encoder's highway
    and projection products (:func:`quantizes_encoder` decides, once, at
    ``set_inference_precision``)."""

    def __init__(self, encoder: bool = False) -> None:
        self.levels = activation_levels()  # fails early, at set_inference_precision, on a CPU without a path
        self.lstm = Int8WeightCache()
        self.linears = Int8LinearCache()
        self.encoder: Optional[Int8EncoderCache] = Int8EncoderCache() if encoder else None

    def clear(self) -> None:
        self.lstm.clear()
        self.linears.clear()
        if self.encoder is not None:
            self.encoder.clear()

    def token_encoder(self, encoder: nn.Module) -> Any:
        """``encoder``'s int8 inference path (:func:`encode_tokens`), or ``None`` where it stays float32."""
        if self.encoder is None:
            return None
        return partial(encode_tokens, encoder, self.encoder.weights(encoder), self.levels)


def run_layer(
    stack: Any,
    layer: Any,
    weights: Dict[str, Any],
    prefix: str,
    inputs: torch.Tensor,
    active: List[int],
    n_steps: int,
    h: torch.Tensor,
    c: torch.Tensor,
    levels: int,
    types: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """One LSTM layer, both directions, as :func:`.bf16.run_layer` runs it but with int8 products
    and float32 between them; ``weights`` from :class:`Int8WeightCache`. inputs ``[2, B, T, D]``
    -> outputs ``[2, B, T, P]``, ``(h, c)``."""
    w_input, w_state, w_proj = ([weights[f"{prefix}{name}.{d}"] for d in (0, 1)] for name in INT8_PRODUCTS)
    batch, width = h.shape[1], inputs.shape[2]
    h, c = h.clone(), c.clone()
    out = h.new_zeros(width, 2, batch, stack.proj_dim)
    proj_clip = stack.proj_clip
    bias = layer.bias.unsqueeze(1)
    compiled = native.library() if h.device.type == "cpu" and h.dtype == torch.float32 and layer.bias.is_contiguous() else None
    m = torch.empty(2, batch, stack.cell_dim, device=h.device)
    for t, (step, step_rows) in enumerate(_step_inputs(stack, w_input, inputs, active, n_steps, levels, types)):
        n = active[t]
        recurrent = [linear(h[d, :n], w_state[d], levels) for d in (0, 1)]
        if compiled is not None:
            compiled.infer_step(layer.bias, step, recurrent, c[:, :n], m[:, :n], stack.cell_clip, step_rows=step_rows)
        else:
            bf16.eager_step(bias, step, step_rows, recurrent, c[:, :n], m[:, :n], stack.cell_clip)
        for d in (0, 1):
            h_new = linear(m[d, :n], w_proj[d], levels)
            if proj_clip:
                h_new.clamp_(-proj_clip, proj_clip)
            h[d, :n] = h_new
            out[t, d, :n] = h_new
        del step, step_rows, recurrent
    return out.permute(1, 2, 0, 3), (h, c)


def _step_inputs(
    stack: Any,
    w_input: List[QuantizedWeight],
    inputs: torch.Tensor,
    active: List[int],
    n_steps: int,
    levels: int,
    types: Optional[Tuple[torch.Tensor, torch.Tensor]],
) -> Iterator[Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]]:
    """Each step's ``x_t W_x`` per direction (float32 from int8 products), as :func:`.bf16._step_inputs`."""
    width = w_input[0].out_features
    if types is not None and not stack.uses_token_types(len(types[0]), sum(active[:n_steps]), width):
        types = None
    max_rows = max(1, stack.projection_chunk_values // (2 * width))

    def product(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
        return linear(x.contiguous(), weight, levels)

    yield from matmul.step_input_products(inputs, w_input, active, n_steps, max_rows, product, types)
