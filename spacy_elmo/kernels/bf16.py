"""Mixed-precision inference: bfloat16 matrix products, float32 everything else.

``BiLM.set_inference_precision("bfloat16")`` routes inference (no autograd) through this module:

* every big product (the char CNN's convolutions, highway and projection layers, each LSTM
  layer's input, recurrent and output-projection products) runs on bfloat16 operands, which CPUs
  with bf16 matrix instructions (AMX, AVX512-BF16) and GPUs multiply 3-6x faster than float32;
  the kernels accumulate in float32 and round only their output to bfloat16;
* each product's output goes straight back to float32: biases, gates, the LSTM cell and hidden
  state, clipping, residuals and every layer output stay float32;
* each LSTM step's elementwise work (gate sums, nonlinearities, cell update, clipping, the
  rounding of the projection's input) runs in one pass of a compiled kernel (:mod:`.native`),
  or in eager PyTorch where there is no C compiler;
* the bfloat16 copies of the weights are made once (:class:`Bf16WeightCache`) and remade only when
  a weight changes (an optimizer step, ``load_state_dict``, ``.to()``), never per call.

The error is that of rounding each product's weights, inputs and result to 8 significant bits:
on a trained model the outputs stay within 1e-4 cosine of float32. Random weights of the
original shapes, scaled so that both clips fire, make a recurrence that amplifies any
perturbation geometrically with the number of steps: their longest sentences move far from
float32 whichever single product is rounded, and float32 weights perturbed by 0.2% move them
about as far (``bench/bf16_ablation.py``, ``bench/results/bf16-ablation.md``). See the README's
"bfloat16 inference" section for the measured distance and what it does to downstream results.
"""

from __future__ import annotations

import re
import threading
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from . import char_conv_train, char_trim, matmul, native

BF16 = torch.bfloat16


class Bf16Products:
    """What a biLM in bfloat16 mode holds: one weight cache for its token encoder, one for its
    LSTM stack and one for a transformer biLM's linears (each keyed on its own module's parameters)."""

    def __init__(self) -> None:
        self.encoder = Bf16WeightCache(derive_layouts)
        self.lstm = Bf16WeightCache()
        self.linears = Bf16LinearCache()

    def clear(self) -> None:
        self.encoder.clear()
        self.lstm.clear()
        self.linears.clear()


class Bf16WeightCache:
    """bfloat16 copies of a module's floating-point parameters, keyed on their identity.

    The key holds, per parameter, its identity, storage address and in-place version counter (as
    the token cache's does), so any update seen by autograd or any replaced tensor triggers one
    fresh conversion; the keyed storages are held so a freed address cannot be reused unseen.
    Writes that bypass the version counter (``param.data.add_()``) need :meth:`clear`.
    """

    def __init__(self, derive: Optional[Callable[[Dict[str, torch.Tensor]], None]] = None) -> None:
        self.derive = derive  # adds derived layouts to a fresh set of copies
        self._lock = threading.Lock()
        self._key: Tuple = ()
        self._held: List[torch.Tensor] = []
        self._copies: Dict[str, torch.Tensor] = {}
        self.conversions = 0  # how many times the copies were (re)made: for tests and benchmarks

    def clear(self) -> None:
        with self._lock:
            self._key, self._held, self._copies = (), [], {}

    def weights(self, module: nn.Module) -> Dict[str, torch.Tensor]:
        """``{parameter name: bfloat16 copy}`` of ``module``'s parameters, current with them."""
        named = list(module.named_parameters())
        key = tuple((id(p), p.data_ptr(), p._version, p.device) for _, p in named)
        with self._lock:
            if key != self._key:
                with torch.no_grad():
                    copies = self.convert(named)
                    if self.derive is not None:
                        self.derive(copies)
                self._copies = copies
                self._held = [p.detach() for _, p in named]
                self._key = key
                self.conversions += 1
            return self._copies

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        """The copies of ``named`` parameters (a subclass may hold another kind of copy)."""
        return {name: p.detach().to(BF16).contiguous() for name, p in named}

    # copies (deepcopy, pickle) start empty: the lock cannot be copied, the key names the
    # original's storages
    def __getstate__(self) -> Dict:
        return {"derive": self.derive}

    def __setstate__(self, state: Dict) -> None:
        self.__init__(state["derive"])  # type: ignore[misc]


_JOINED = re.compile(r"projections\.[012]\.weight$")  # an attention's query, key and value weights


def linear_copies(named: List[Tuple[str, nn.Parameter]], make: Callable[[torch.Tensor], Any]) -> Dict[str, Any]:
    """``make(weight [in, out] float32)`` for every ``nn.Linear`` weight among ``named``, keyed by the
    linear's name (``"forward_stack.blocks.0.ff_in"``), and for the first three linears of each
    ``projections`` list (an attention's query, key and value) joined into one weight, with their
    biases joined (``"....projections.qkv"``: ``(copy, bias)``; those three are copied only joined)."""
    params = dict(named)
    out: Dict[str, Any] = {}
    for name, p in named:
        if name.endswith(".weight") and p.dim() == 2 and not _JOINED.search(name):  # query, key, value: joined only
            out[name[: -len(".weight")]] = make(p.detach().t().float())
        if name.endswith("projections.0.weight"):
            prefix = name[: -len("0.weight")]
            weights = [params[f"{prefix}{i}.weight"].detach() for i in range(3)]
            biases = [params[f"{prefix}{i}.bias"].detach() for i in range(3)]
            out[f"{prefix}qkv"] = (make(torch.cat(weights).t().float().contiguous()), torch.cat(biases).float())
    return out


class Bf16LinearCache(Bf16WeightCache):
    """Every ``nn.Linear`` weight of a module in bfloat16, ``[in, out]`` (:func:`linear_copies`), remade
    when a weight changes."""

    def convert(self, named: List[Tuple[str, nn.Parameter]]) -> Dict[str, Any]:
        return linear_copies(named, lambda weight: weight.to(BF16).contiguous())


class LinearProducts:
    """A module's linears run from copies of their weights made once (a :class:`Bf16WeightCache`
    subclass whose copies :func:`linear_copies` keyed), looked up by the ``nn.Linear`` itself or by
    the ``projections`` list whose query, key and value run as one product; float32 in and out,
    the bias added in float32. Subclasses say how a copy multiplies (:meth:`product`)."""

    def __init__(self, module: nn.Module, cache: Bf16WeightCache) -> None:
        copies: Dict[str, Any] = cache.weights(module)
        self.by_module: Dict[nn.Module, Any] = {}
        for name, child in module.named_modules():
            if isinstance(child, nn.Linear) and name in copies:
                self.by_module[child] = copies[name]
            elif f"{name}.qkv" in copies:
                self.by_module[child] = copies[f"{name}.qkv"]

    def product(self, x: torch.Tensor, weight: Any) -> torch.Tensor:
        """``x @ weight`` for ``x`` ``[N, in]`` float32, float32 out."""
        raise NotImplementedError

    def _run(self, x: torch.Tensor, weight: Any, bias: Optional[torch.Tensor]) -> torch.Tensor:
        shape = x.shape
        out = self.product(x.reshape(-1, shape[-1]), weight)
        if bias is not None:
            out.add_(bias)
        return out.view(*shape[:-1], out.shape[-1])

    def apply(self, x: torch.Tensor, module: nn.Linear, relu: bool = False) -> torch.Tensor:
        """``module(x)`` with its product from the copy, its bias in float32; with ``relu``,
        ``relu(module(x))``, in whatever dtype the next product reads best (float32 here)."""
        out = self._run(x, self.by_module[module], module.bias)
        return out.relu_() if relu else out

    def joined(self, x: torch.Tensor, projections: nn.Module) -> torch.Tensor:
        """``cat([p(x) for p in projections[:3]], -1)`` as one product."""
        weight, bias = self.by_module[projections]
        return self._run(x, weight, bias)


class Bf16Linears(LinearProducts):
    """A module's linears with bfloat16 products (the inputs rounded to bfloat16, float32 sums, the
    result back to float32), from bfloat16 copies of the weights made once (:class:`Bf16LinearCache`)."""

    def product(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return _matmul(x, weight)

    def apply(self, x: torch.Tensor, module: nn.Linear, relu: bool = False) -> torch.Tensor:
        """As :meth:`LinearProducts.apply` (float32 out: it joins the residual stream); with ``relu``
        the bias and relu join the product's pass and the result stays bfloat16 (a feed-forward's
        hidden layer, read next by a bfloat16 product)."""
        if not relu:
            return super().apply(x, module)
        return self._bfloat16(x, self.by_module[module], module.bias, relu=True)

    def joined(self, x: torch.Tensor, projections: nn.Module) -> torch.Tensor:
        """As :meth:`LinearProducts.joined`, bias included in the product's pass, bfloat16 out (the
        attention's own products read it in bfloat16)."""
        weight, bias = self.by_module[projections]
        return self._bfloat16(x, weight, bias)

    @staticmethod
    def _bfloat16(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], relu: bool = False) -> torch.Tensor:
        shape = x.shape
        out = matmul.linear(x.reshape(-1, shape[-1]).to(BF16), weight, bias, relu=relu)
        return out.view(*shape[:-1], out.shape[-1])


def _matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` (``weight`` ``[in, out]`` bfloat16) with a float32 result."""
    return matmul.linear(x.to(BF16), weight).float()


#: products of more rows than this get their rows padded to a multiple of it: the bfloat16
#: kernels are compiled per shape on first use (tens of ms each), so shapes must repeat across
#: batches (up to it, each row count is its own shape: at most this many of them)
ROW_MULTIPLE = 64


def padded_rows(n: int) -> int:
    """``n`` up to :data:`ROW_MULTIPLE`, else ``n`` rounded up to a multiple of it."""
    return n if n <= ROW_MULTIPLE else -(-n // ROW_MULTIPLE) * ROW_MULTIPLE


def _pad_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with zero rows appended along ``dim`` (0 or 1) up to :func:`padded_rows`."""
    extra = padded_rows(x.shape[dim]) - x.shape[dim]
    if not extra:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim) + [0, extra]
    return F.pad(x, pad)


def encode_tokens(encoder: nn.Module, weights: Dict[str, torch.Tensor], char_ids: torch.Tensor) -> torch.Tensor:
    """:meth:`CharCnnEncoder.forward` with bfloat16 products: ``[N, max_chars]`` -> ``[N, P]``
    float32; ``weights`` are the encoder's bfloat16 copies (names relative to the encoder)."""
    widest = max(conv.kernel_size[0] for conv in encoder.convs)
    return char_trim.encode_trimmed(char_ids, widest, encoder.inference_chunk, partial(_encode_padded, encoder, weights))


def _encode_padded(encoder: nn.Module, weights: Dict[str, torch.Tensor], char_ids: torch.Tensor) -> torch.Tensor:
    """:func:`_encode` with the rows padded to :func:`padded_rows` (so shapes repeat)."""
    n = len(char_ids)
    if n == 0:
        return _encode(encoder, weights, char_ids)
    return _encode(encoder, weights, _pad_rows(char_ids, 0))[:n]  # padding rows: all-zero ids, dropped


def _encode(encoder: nn.Module, w: Dict[str, torch.Tensor], char_ids: torch.Tensor) -> torch.Tensor:
    h = encoder.table_pooled(char_ids) if hasattr(encoder, "table_pooled") else None  # float32 tables, faster
    if h is None:
        fits = "convs.stacked" in w and max(conv.kernel_size[0] for conv in encoder.convs) <= char_ids.shape[1]
        compiled = native.library() if fits and char_ids.device.type == "cpu" else None
        h = _pool_compiled(encoder, w, char_ids, compiled) if compiled is not None else _pool(encoder, w, char_ids)
    h = torch.relu_(h) if encoder.activation == "relu" else torch.tanh_(h)
    for k, highway in enumerate(encoder.highways):
        both = _matmul(h, w[f"highways.{k}.transform_carry"])  # [N, 2 * dim]: one product for both
        transformed = torch.relu_(both[:, : highway.dim].add_(highway.transform.bias))
        gate = torch.sigmoid_(both[:, highway.dim :].add_(highway.carry.bias))
        h = torch.lerp(h, transformed, gate)  # gate * transformed + (1 - gate) * h
    if isinstance(encoder.projection, nn.Linear):
        return _matmul(h, w["projection.weight_t"]).add_(encoder.projection.bias)
    return h


def _pool(encoder: nn.Module, w: Dict[str, torch.Tensor], char_ids: torch.Tensor) -> torch.Tensor:
    """Each filter's maximum over positions, one bfloat16 convolution per width -> ``[N, filters]`` float32."""
    x = F.embedding(char_ids, w["char_embedding.weight"]).transpose(1, 2)  # [N, char_dim, chars] bf16
    pooled = []
    for k, conv in enumerate(encoder.convs):
        # max over positions commutes with adding the per-filter bias: add it after pooling, in float32
        out = F.conv1d(x, w[f"convs.{k}.weight"]).amax(dim=-1).float()
        pooled.append(out.add_(conv.bias) if conv.bias is not None else out)
    return torch.cat(pooled, dim=-1)


def _pool_compiled(encoder: nn.Module, w: Dict[str, torch.Tensor], char_ids: torch.Tensor, compiled: native.NativeKernels) -> torch.Tensor:
    """:func:`_pool` as one bfloat16 product over windows of the widest filter (all widths at once)
    and one compiled pass for the maxima (``amax`` of bfloat16 is slow on CPUs)."""
    widths = [conv.kernel_size[0] for conv in encoder.convs]
    counts = [conv.out_channels for conv in encoder.convs]
    tokens, length = char_ids.shape
    windows = char_conv_train.char_windows(F.embedding(char_ids, w["char_embedding.weight"]), max(widths))
    out = torch.mm(windows.view(tokens * length, -1), w["convs.stacked"]).view(tokens, length, -1)
    values, _ = compiled.max_pool(out, widths, counts)
    biases = [conv.bias for conv in encoder.convs]
    return values.add_(torch.cat(biases)) if all(b is not None for b in biases) else values


def derive_layouts(copies: Dict[str, torch.Tensor], prefix: str = "") -> None:
    """Add the layouts :func:`encode_tokens` multiplies by: each highway's transform and carry
    weights side by side (``[in, 2 * dim]``, one product for both) and the projection ``[in, out]``."""
    if prefix + "projection.weight" in copies:
        copies[prefix + "projection.weight_t"] = copies[prefix + "projection.weight"].t().contiguous()
    convs = []
    while f"{prefix}convs.{len(convs)}.weight" in copies:
        convs.append(copies[f"{prefix}convs.{len(convs)}.weight"])
    if convs:  # every width in one product (see _pool_compiled)
        copies[prefix + "convs.stacked"] = char_conv_train.stack_filter_weights(convs).contiguous()
    k = 0
    while f"{prefix}highways.{k}.transform.weight" in copies:
        pair = [copies[f"{prefix}highways.{k}.{part}.weight"] for part in ("transform", "carry")]
        copies[f"{prefix}highways.{k}.transform_carry"] = torch.cat(pair).t().contiguous()
        k += 1


def run_layer(
    stack: nn.Module,
    layer: nn.Module,
    weights: Dict[str, torch.Tensor],
    prefix: str,
    inputs: torch.Tensor,
    active: List[int],
    n_steps: int,
    h: torch.Tensor,
    c: torch.Tensor,
    types: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """One LSTM layer, both directions, as :meth:`BiLstmStack._run_layer_inplace` computes it but
    with bfloat16 products; ``weights`` are the stack's bfloat16 copies, ``prefix`` the layer's
    parameter prefix (``"layers.0."``); ``types``: the distinct input vectors and each sorted
    row's index into them per step (``[T, 2, B]``), for the first layer (see
    :meth:`BiLstmStack._step_inputs`). inputs ``[2, B, T, D]`` -> outputs ``[2, B, T, P]``, ``(h, c)``."""
    w_input, w_state, w_proj = (weights[prefix + name] for name in ("w_input", "w_state", "w_proj"))
    batch, width = h.shape[1], inputs.shape[2]
    h, c = h.clone(), c.clone()
    out = h.new_zeros(width, 2, batch, stack.proj_dim)
    cell_clip, proj_clip, cell = stack.cell_clip, stack.proj_clip, stack.cell_dim
    bias = layer.bias.unsqueeze(1)
    compiled = native.library() if h.device.type == "cpu" and h.dtype == torch.float32 and layer.bias.is_contiguous() else None
    m = torch.empty(2, batch, cell, dtype=BF16, device=h.device)
    for t, (step, step_rows) in enumerate(_step_inputs(stack, w_input, inputs, active, n_steps, types)):
        n = active[t]
        recurrent = [_linear_rows(h[d, :n].to(BF16), w_state[d]) for d in (0, 1)]
        if compiled is not None:  # the elementwise work below in one compiled pass
            compiled.infer_step(layer.bias, step, recurrent, c[:, :n], m[:, :n], cell_clip, step_rows=step_rows)
        else:
            eager_step(bias, step, step_rows, recurrent, c[:, :n], m[:, :n], cell_clip)
        for d in (0, 1):
            h_new = _linear_rows(m[d, :n], w_proj[d]).float()
            if proj_clip:
                h_new.clamp_(-proj_clip, proj_clip)
            h[d, :n] = h_new
            out[t, d, :n] = h_new
        del step, step_rows, recurrent
    return out.permute(1, 2, 0, 3), (h, c)


def eager_step(
    bias: torch.Tensor,
    step: List[torch.Tensor],
    step_rows: Optional[List[torch.Tensor]],
    recurrent: List[torch.Tensor],
    c: torch.Tensor,
    m: torch.Tensor,
    cell_clip: Optional[float],
) -> None:
    """One LSTM step's elementwise work in eager PyTorch (where there is no compiled kernel):
    ``bias`` ``[2, 1, 4H]``, ``step``/``recurrent`` one ``[n, 4H]`` product per direction,
    ``c`` ``[2, n, H]`` float32 updated in place, ``m = o * tanh(c)`` written to ``m`` ``[2, n, H]``."""
    cell = c.shape[-1]
    if step_rows is not None:
        step = [part[rows] for part, rows in zip(step, step_rows)]
    # gates = x_t W_x + h_{t-1} W_h + b, summed in float32
    gates = torch.add(bias, torch.stack(step)).add_(torch.stack(recurrent))
    gates[..., :cell].sigmoid_()  # i
    matmul.tanh_(gates[..., cell : 2 * cell])  # j
    gates[..., 2 * cell :].sigmoid_()  # f, o
    i, j, f, o = gates.chunk(4, dim=-1)
    c.mul_(f).addcmul_(i, j)
    if cell_clip:
        c.clamp_(-cell_clip, cell_clip)
    m.copy_(matmul.tanh_(c.clone()).mul_(o))


def _linear_rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight``, bfloat16 in and out, ``x`` ``[n, in]`` with its rows padded (see :func:`padded_rows`)."""
    n = x.shape[0]
    return matmul.linear(_pad_rows(x, 0), weight)[:n]


def _step_inputs(
    stack: nn.Module,
    w_input: torch.Tensor,
    inputs: torch.Tensor,
    active: List[int],
    n_steps: int,
    types: Optional[Tuple[torch.Tensor, torch.Tensor]],
) -> Iterator[Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]]:
    """Each step's ``x_t W_x`` (bfloat16) per direction and each row's index into it, or
    ``None``: per distinct token when :meth:`BiLstmStack.uses_token_types` says so, else packed
    in groups of steps like the float32 path."""
    if types is not None and stack.uses_token_types(len(types[0]), sum(active[:n_steps]), w_input.shape[2]):
        types = (types[0].to(BF16), types[1])
    else:
        types = None
    max_rows = max(1, stack.projection_chunk_values // (2 * w_input.shape[2]))
    yield from matmul.step_input_products(inputs.to(BF16), w_input, active, n_steps, max_rows, _linear_rows, types)
