"""Matrix products for inference, routed to the fastest CPU kernel for their shape.

PyTorch's default CPU GEMM (MKL) is slow for the skinny products of a recurrent step (a few
dozen rows times a 512 x 16384 weight): measured on a 2-core AVX-512 machine it reaches about
110 GFLOP/s at 64 rows, where oneDNN's matmul reaches about 160, and at 2-16 rows oneDNN is
1.3-1.6x faster again. At exactly one row MKL's path streams the weight faster. So:

* ``linear`` / ``directional_matmul`` / ``directional_addmm_`` compute ``x @ weight`` for
  weights stored ``[in, out]`` (the layout of every biLM weight) through oneDNN when it is
  available, the tensors are on the CPU, no gradient is being recorded and ``x`` has from 2 to
  ``MIN_ROWS_MKL - 1`` rows; through MKL writing straight into one output buffer from
  ``MIN_ROWS_MKL`` rows; through torch's batched product otherwise (one row, GPU, autograd).
* On Intel CPUs, float32 products with a narrow output (at most ``MKL_NARROW_OUT`` columns, such
  as the LSTM's 4096 -> 512 projection) go to MKL at any row count: on a 2-core Xeon with AMX it
  reaches ~175 GFLOP/s there against oneDNN's ~125, and the original-shape biLM gains 3-4%
  (interleaved A/B, 1 thread, UD sentences). The wide products (512 -> 16384) stay with oneDNN:
  MKL's rate there swung between 60 and 170 GFLOP/s from run to run on the same machine.
* ``SPACY_ELMO_NO_ONEDNN=1`` in the environment turns the oneDNN route off.

Both kernels compute in the tensors' own dtype (no implicit down-casting): outputs agree with
``torch.matmul`` to float rounding (about 1e-6 in float32).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch

from . import cpu

MIN_ROWS_ACCUMULATE = 2  # below: MKL's batched product streams one row's weight faster
MIN_ROWS_MKL = 512  # from here on MKL writing straight into one output buffer is fastest


def _onednn_linear():
    if os.environ.get("SPACY_ELMO_NO_ONEDNN"):
        return None
    if not torch.backends.mkldnn.is_available():
        return None
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if op is None:
        return None
    try:  # the op's schema is private: check it once on a tiny product
        # fixed values, not torch.randn: importing the package must not draw from the global RNG
        a = torch.arange(12, dtype=torch.float32).view(3, 4).sin()
        w = torch.arange(20, dtype=torch.float32).view(4, 5).cos()
        with torch.inference_mode():
            ok = torch.allclose(op(a, w.t(), None, "none", [], ""), a @ w, atol=1e-5)
    except Exception:  # pragma: no cover - depends on the torch build
        return None
    return op if ok else None


_ONEDNN = _onednn_linear()


def _onednn_takes_bfloat16() -> bool:
    """Whether oneDNN's product accepts bfloat16 here: without AVX512 (an AVX2-only CPU) it has no
    bf16 inner product and raises "could not create a primitive descriptor"; bfloat16 products then
    go to torch's own (emulated) kernels."""
    if _ONEDNN is None:
        return False
    a = torch.arange(12, dtype=torch.float32).view(3, 4).sin().to(torch.bfloat16)
    w = torch.arange(20, dtype=torch.float32).view(4, 5).cos().to(torch.bfloat16)
    try:
        with torch.inference_mode():
            return bool(torch.allclose(_ONEDNN(a, w.t(), None, "none", [], "").float(), (a.float() @ w.float()), atol=5e-2))
    except RuntimeError:
        return False


_ONEDNN_BF16 = _onednn_takes_bfloat16()
MKL_NARROW_OUT = 1024


_INTEL = cpu.vendor() == "GenuineIntel"


def onednn_available() -> bool:
    """Whether products are routed to oneDNN on this build of torch."""
    return _ONEDNN is not None


def _no_grad_cpu(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        x.device.type == "cpu" and x.dtype == weight.dtype and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    )


def _use_onednn(x: torch.Tensor, weight: torch.Tensor, min_rows: int = 2) -> bool:
    return (
        _ONEDNN is not None
        and x.dim() == 2
        and x.shape[0] >= min_rows
        and (x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and _ONEDNN_BF16))
        and not (_INTEL and x.dtype == torch.float32 and weight.shape[-1] <= MKL_NARROW_OUT)
        and _no_grad_cpu(x, weight)
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, relu: bool = False) -> torch.Tensor:
    """``x @ weight (+ bias)`` for ``x`` ``[N, in]`` and ``weight`` ``[in, out]``, in ``x``'s dtype;
    with ``relu``, ``relu(x @ weight + bias)`` (one pass in oneDNN's kernel)."""
    if _use_onednn(x, weight):
        return _ONEDNN(x.contiguous(), weight.t(), bias, "relu" if relu else "none", [], "")
    if bias is None:
        out = torch.matmul(x, weight)
    else:
        bias = bias.to(x.dtype)
        out = torch.addmm(bias, x, weight) if x.dim() == 2 else torch.matmul(x, weight) + bias
    return out.relu_() if relu else out


def linear_t(x: torch.Tensor, weight_out_in: torch.Tensor, bias: Optional[torch.Tensor] = None, relu: bool = False) -> torch.Tensor:
    """``F.linear`` semantics (``weight`` ``[out, in]``), routed like :func:`linear`."""
    return linear(x, weight_out_in.t(), bias, relu)


def directional_matmul(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x[d] @ weight[d] (+ bias[d])`` for each direction ``d``: ``x`` ``[D, N, in]``, ``weight``
    ``[D, in, out]``, ``bias`` ``[D, out]`` -> ``[D, N, out]``."""
    rows = x.shape[1]
    if rows >= MIN_ROWS_MKL and _no_grad_cpu(x, weight):  # big products: MKL, straight into one buffer
        out = x.new_empty(x.shape[0], rows, weight.shape[2])
        for d in range(x.shape[0]):
            if bias is None:
                torch.mm(x[d], weight[d], out=out[d])
            else:
                torch.addmm(bias[d], x[d], weight[d], out=out[d])
        return out
    if not _use_onednn(x[0], weight[0]):
        return torch.bmm(x, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight)
    out = torch.stack([_ONEDNN(x[d].contiguous(), weight[d].t(), None, "none", [], "") for d in range(x.shape[0])])
    return out if bias is None else out.add_(bias.unsqueeze(1))


def directional_addmm_(acc: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``acc[d] += x[d] @ weight[d] (+ bias[d])`` in place (``acc`` ``[D, N, out]``); returns ``acc``."""
    if not _use_onednn(x[0], weight[0], min_rows=MIN_ROWS_ACCUMULATE):
        if acc.device.type == "cpu":
            acc.copy_(torch.baddbmm(acc, x, weight))  # out of place is MKL's faster path
        else:
            acc.baddbmm_(x, weight)
        return acc if bias is None else acc.add_(bias.unsqueeze(1))
    for d in range(x.shape[0]):
        acc[d].add_(_ONEDNN(x[d].contiguous(), weight[d].t(), None if bias is None else bias[d], "none", [], ""))
    return acc


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """In-place ``tanh`` as ``2 sigmoid(2x) - 1``: within 2e-7 of ``torch.tanh`` and, on CPU,
    about 4x faster than its accurate-to-1-ulp kernel (the recurrent step calls it twice)."""
    return x.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)


def packed_step_groups(counts: List[int], max_rows: int, device: torch.device) -> Iterator[Tuple[List[int], torch.Tensor, torch.Tensor]]:
    """Consecutive time steps grouped so that each group holds at most ``max_rows`` valid rows
    (at least one step per group), as ``(rows per step, row indices, step indices)``: the
    positions to gather, time-major, for one input projection per group. ``counts[t]`` is the
    number of active (sorted, so prefix) rows at step ``t``."""
    start = 0
    while start < len(counts):
        stop, rows_in_group = start, 0
        while stop < len(counts) and (stop == start or rows_in_group + counts[stop] <= max_rows):
            rows_in_group += counts[stop]
            stop += 1
        group = counts[start:stop]
        rows = torch.cat([torch.arange(n) for n in group]).to(device)
        cols = torch.repeat_interleave(torch.arange(start, stop), torch.tensor(group)).to(device)
        yield group, rows, cols
        start = stop


def step_input_products(
    inputs: torch.Tensor,
    weight: Any,
    active: List[int],
    n_steps: int,
    max_rows: int,
    product: Callable[[torch.Tensor, Any], torch.Tensor],
    types: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
) -> Iterator[Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]]:
    """Each recurrent step's input products ``x_t W_x`` per direction, with each active row's
    index into them or ``None``: ``inputs`` ``[2, B, T, D]``, ``weight`` ``[2, D, G]`` (or a pair
    of weights in any form ``product`` takes),
    ``product(x, w)`` the routed product. With ``types`` (the distinct input vectors ``[U, D]``
    and each sorted row's index per step ``[T, 2, B]``) the products are made once per distinct
    vector; otherwise for groups of consecutive steps of at most ``max_rows`` valid rows."""
    if types is not None:
        vectors, rows_of = types
        table = [product(vectors, weight[d]) for d in (0, 1)]
        for t in range(n_steps):
            yield table, [rows_of[t, d, : active[t]] for d in (0, 1)]
        return
    for group, rows, cols in packed_step_groups(active[:n_steps], max_rows, inputs.device):
        gathered = inputs[:, rows, cols]  # [2, R, D]
        projected = [product(gathered[d], weight[d]) for d in (0, 1)]
        del gathered
        start = 0
        for n in group:
            yield [part[start : start + n] for part in projected], None
            start += n
        del projected
