"""Compiled C kernels for the CPU: each LSTM time step's elementwise work (bfloat16 training,
forward and backward; bfloat16 and float32 inference), the char CNN's max-pooling in bfloat16
training, and the sampled softmax's rows in bfloat16 training (each row's log-sum-exp; the
softmax rounded to bfloat16 and its sums over rows).

:mod:`.fused_train` runs each time step as a few matrix products plus elementwise work: the
gates' nonlinearities, the cell update, clipping, their gradients and the bfloat16 <-> float32
conversions around the products. In eager PyTorch that is ~10 passes over the gate tensors per
step and direction, and it costs more than the products. ``csrc/train_kernels.c`` does the
same maths in one pass each (forward, the hidden state's gradient, the cell's backward),
vectorised by the compiler (``-O3 -ffast-math``, ``-march=native`` on an identified x86 CPU, glibc's vector
``expf``/``tanhf``), and the max over positions of :mod:`.char_conv_train` in one pass over the
bfloat16 convolutions (``torch.max`` along a strided dimension of bfloat16 is several times
slower). Inference uses the same kind of one-pass step: bfloat16 (:mod:`.bf16`) and float32
(``bilm/lstm.py``, on the CPU without gradients). The float32 step computes the eager step's
maths, but in another order and with the compiler's vector ``expf``/``tanhf``: its outputs agree
with the eager code's to float rounding (about 1e-6), not bit for bit.

The library is compiled on first use with the system's C compiler into a private folder of the
cache (``SPACY_ELMO_CACHE`` or the user's cache, ``native/``), verified and loaded with
:mod:`ctypes` by :mod:`.build` (no build step at install, no dependency). Where there is no
compiler, or it fails, or the folder is not private, or ``SPACY_ELMO_NATIVE_KERNELS=0``,
:func:`library` returns ``None`` and the callers run the eager code (same maths, slower; but for
``SPACY_ELMO_NATIVE_KERNELS=0``, a warning says why, once per loader). Every entry point checks its arguments (dtype, device,
shape, layout, overlap, value ranges) before the C code, which trusts them, runs: an output
may share memory with nothing else, its own two directions included (a direction stride of 0).
"""

from __future__ import annotations

import ctypes
import operator
import os
import threading
import warnings
from numbers import Real
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from ..cache import cache_root
from . import build
from .build import SOURCE

__all__ = ["ENV", "SOURCE", "KernelLoader", "NativeKernels", "enabled", "library"]

ENV = "SPACY_ELMO_NATIVE_KERNELS"  # "0" turns the compiled kernels off
#: the largest cell, projection or filter count the kernels take (ELMo's largest is 4,096); a
#: row's scratch comes from the heap (at most 4 x 65,536 floats per thread), never a thread's stack
MAX_WIDTH = 65536
#: values (rows x width) of elementwise work that pay for one more thread: starting and joining
#: one costs about as much as one thread's pass over this many (measured: bench/kernel_threads.py,
#: removed since: git show 6025c3d:bench/kernel_threads.py)
PARALLEL_GRAIN = 1 << 20


def threads_for(values: int, threads: Optional[int] = None) -> int:
    """How many threads a kernel runs ``values`` of work on: ``threads`` when given, else
    ``torch.get_num_threads()``, fewer when the work is too small to pay for starting them."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
        return threads
    return max(1, min(torch.get_num_threads(), values // PARALLEL_GRAIN))


def enabled() -> bool:
    """False when ``SPACY_ELMO_NATIVE_KERNELS`` is ``0``/``false``/``off``/``no``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


class KernelLoader:
    """A process's compiled kernels: built or verified, and loaded, on the first :meth:`get`, then
    kept (or, when that failed, ``None`` with one warning). Threads calling :meth:`get` during
    the build wait for it. The state is this object's: tests make a fresh loader on a temporary
    ``root`` (see :data:`LOADER`)."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = root  # the cache root; None: cache_root() when first needed
        self._lock = threading.Lock()
        self._decided = False
        self._kernels: Optional[NativeKernels] = None

    def get(self) -> Optional["NativeKernels"]:
        """The kernels, or ``None`` when turned off or unavailable."""
        if not enabled():
            return None
        if self._decided:  # the hot path: no lock once decided
            return self._kernels
        with self._lock:  # held across the build: other threads wait here, then read the result
            if not self._decided:
                try:
                    self._kernels = build.load(self.root or cache_root(), NativeKernels)
                except Exception as err:  # any failure: the eager code runs, as documented
                    warnings.warn(
                        f"the compiled kernels are unavailable ({err}): bfloat16 training, bfloat16 inference and "
                        "float32 inference's LSTM step run the slower eager code (the same maths)",
                        stacklevel=3,
                    )
                self._decided = True  # only now: a thread arriving during the build waited above
        return self._kernels


#: the process's loader; a test replaces it (``monkeypatch.setattr(native, "LOADER", KernelLoader(tmp_path))``)
LOADER = KernelLoader()


def library() -> Optional["NativeKernels"]:
    """The compiled kernels of this process (:data:`LOADER`); ``None`` when turned off or unavailable."""
    return LOADER.get()


_I64, _F32, _P = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_PAIR = ctypes.POINTER(ctypes.c_void_p)  # one pointer per direction (a 2-array of pointers, or NULL)
F32 = torch.float32


def _tensor(x: Any, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a tensor, got {type(x).__name__}")
    if x.device.type != "cpu" or x.layout != torch.strided:
        raise ValueError(f"{name}: the compiled kernels take dense CPU tensors, got {x.layout} on {x.device}")
    return x


def _rows_width(x: Any, name: str) -> Tuple[int, int]:
    """``(rows, width)`` of a ``[2, rows, width]`` tensor, the sizes the others are checked against."""
    x = _tensor(x, name)
    if x.dim() != 3 or x.shape[0] != 2:
        raise ValueError(f"{name}: expected [2, rows, width] (two directions), got shape {tuple(x.shape)}")
    return x.shape[1], x.shape[2]


def _width(width: int, name: str) -> int:
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"{name}: width {width} is outside 1..{MAX_WIDTH}")
    return width


def _arg(x: Any, width: int, dtype: torch.dtype, rows: int, name: str, fewer: bool = False) -> Tuple[int, int]:
    """``(pointer, elements between the two directions)`` of a ``[2, rows, width]`` tensor (at most
    ``rows`` rows when ``fewer``), after checking its dtype, device, shape and contiguous rows: the
    C code trusts them, so a mismatch here would read or write out of bounds."""
    x = _tensor(x, name)
    if x.dtype != dtype:
        raise ValueError(f"{name}: expected a {dtype} tensor, got {x.dtype}")
    if x.dim() != 3 or x.shape[0] != 2 or x.shape[2] != width or x.stride(2) != 1 or (x.shape[1] > 1 and x.stride(1) != width):
        raise ValueError(f"{name}: expected [2, n, {width}] with contiguous rows, got shape {tuple(x.shape)} strides {x.stride()}")
    if x.shape[1] > rows or (not fewer and x.shape[1] != rows):
        raise ValueError(f"{name}: expected {'at most ' if fewer else ''}{rows} rows, got shape {tuple(x.shape)}")
    return x.data_ptr(), x.stride(0)


def _optional_arg(x: Optional[torch.Tensor], width: int, dtype: torch.dtype, rows: int, name: str) -> Tuple[int, int, int]:
    """``(rows, pointer, direction stride)`` of an optional tensor of at most ``rows`` rows; zeros for ``None``."""
    if x is None:
        return 0, 0, 0
    return (x.shape[1], *_arg(x, width, dtype, rows, name, fewer=True))


def _vector(x: Any, width: int, name: str) -> int:
    """Pointer of a contiguous float32 ``[2, width]`` tensor (a bias or its gradient)."""
    x = _tensor(x, name)
    if x.shape != (2, width) or x.dtype != F32 or not x.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous float32 CPU [2, {width}] tensor, got {x.dtype} {tuple(x.shape)}")
    return x.data_ptr()


def _clip(value: Optional[float], name: str) -> float:
    """A clip for the C code: ``None`` or 0 is no clip (as the eager ``if clip:``); else a number >= 0."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, Real) or not float(value) >= 0.0:
        raise ValueError(f"{name}: expected None or a number >= 0, got {value!r}")
    return float(value)


def _spans(x: torch.Tensor) -> List[Tuple[int, int]]:
    """The byte ranges a checked argument covers: per direction for ``[2, n, w]``, else one."""
    size = x.element_size()
    if x.numel() == 0:
        return []
    if x.dim() == 3:
        return [(x.data_ptr() + d * x.stride(0) * size, x.data_ptr() + (d * x.stride(0) + x.shape[1] * x.shape[2]) * size) for d in (0, 1)]
    extent = 1 + sum((n - 1) * abs(stride) for n, stride in zip(x.shape, x.stride()))  # from the first element to the last
    return [(x.data_ptr(), x.data_ptr() + extent * size)]


def _no_overlap(outputs: Dict[str, torch.Tensor], others: Dict[str, Optional[torch.Tensor]]) -> None:
    """Refuse an output sharing memory with another argument, or whose two directions share memory
    (a direction stride of 0, or smaller than a direction): the C code (``restrict``, one thread
    per row) assumes none."""
    spans = {name: _spans(x) for name, x in {**others, **outputs}.items() if x is not None}
    for out_name, out in outputs.items():
        own = spans[out_name]
        if len(own) == 2 and own[0][0] < own[1][1] and own[1][0] < own[0][1]:
            raise ValueError(
                f"{out_name}: its two directions share memory (direction stride {out.stride(0)}, shape {tuple(out.shape)}): "
                "the kernel would write the same rows twice"
            )
        for a, b in own:
            for name, theirs in spans.items():
                if name != out_name and any(a < d and c < b for c, d in theirs):
                    raise ValueError(f"{out_name} overlaps {name} in memory: the kernel writes one while reading the other")


class NativeKernels:
    """Typed entry points of the compiled library; tensors are checked, then passed as pointers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        for suffix in ("bf16", "f32"):  # the last argument of each: the number of threads
            getattr(lib, f"cell_forward_{suffix}").argtypes = [_I64, _I64] + [_P, _I64] * 6 + [_F32, _I64]
            getattr(lib, f"hidden_grad_{suffix}").argtypes = [_I64, _I64, _I64] + [_P, _I64] * 3 + [_F32, _P, _I64, _I64]
            backward = getattr(lib, f"cell_backward_{suffix}")
            backward.argtypes = [_I64, _I64, _I64] + [_P, _I64] * 6 + [_F32, _P, _I64, _P, _I64, _P, _I64]
            backward.restype = ctypes.c_int
            infer = getattr(lib, f"lstm_step_infer_{suffix}")
            infer.argtypes = [_I64, _I64, _P, _PAIR, _PAIR, _PAIR, _PAIR, _PAIR, _F32, _I64]
            infer.restype = ctypes.c_int
        lib.max_pool_bf16.argtypes = [_I64, _I64, _I64, _P, _I64, _P, _P, _P, _P, _P, _I64]
        lib.max_pool_bf16.restype = ctypes.c_int
        for name in ("softmax_lse_bf16", "softmax_grad_bf16"):
            getattr(lib, name).argtypes = [_I64, _I64, _P, _P, _P, _I64]
            getattr(lib, name).restype = ctypes.c_int
        lib.quantize_rows_u8.argtypes = [_I64, _I64, _P, _I64, _I64, _P, _P, _I64]
        lib.quantize_rows_u8.restype = None
        lib.char_table_max_f32.argtypes = [_I64, _I64, _P, _I64, _I64, _P, _P, _P, _P, _P, _I64, _P, _I64, _P, _I64]
        lib.char_table_max_f32.restype = None

    @staticmethod
    def _suffix(low: Any, name: str) -> str:
        low = _tensor(low, name)
        if low.dtype == torch.bfloat16:
            return "bf16"
        if low.dtype == torch.float32:
            return "f32"
        raise ValueError(f"{name}: the compiled kernels handle bfloat16 or float32 products, not {low.dtype}")

    def forward(
        self,
        z: torch.Tensor,
        c_prev: torch.Tensor,
        gates: torch.Tensor,
        c_new: torch.Tensor,
        tanh_c: torch.Tensor,
        m: torch.Tensor,
        cell_clip: Optional[float],
        threads: Optional[int] = None,
    ) -> None:
        """From the gate pre-activations ``z`` ``[2, n, 4H]``: activated ``gates``, ``c_new``
        (clipped), ``tanh_c`` and ``m = o * tanh(c_new)`` (the projection's input), written in place.
        ``threads``: see :func:`threads_for` (every entry point takes it)."""
        fn = getattr(self.lib, f"cell_forward_{self._suffix(z, 'z')}")
        n, hid = _rows_width(z, "z")[0], _width(_rows_width(c_prev, "c_prev")[1], "c_prev")
        low, clip = z.dtype, _clip(cell_clip, "cell_clip")
        args = {"z": (z, 4 * hid, low), "c_prev": (c_prev, hid, F32), "gates": (gates, 4 * hid, F32)}
        args.update({"c_new": (c_new, hid, F32), "tanh_c": (tanh_c, hid, F32), "m": (m, hid, low)})
        pointers = [v for name, (x, w, t) in args.items() for v in _arg(x, w, t, n, name)]
        _no_overlap({"gates": gates, "c_new": c_new, "tanh_c": tanh_c, "m": m}, {"z": z, "c_prev": c_prev})
        fn(n, hid, *pointers, clip, threads_for(2 * n * 4 * hid, threads))

    def hidden_grad(
        self,
        grad_out: torch.Tensor,
        dh_next: Optional[torch.Tensor],
        hidden: torch.Tensor,
        proj_clip: Optional[float],
        out: torch.Tensor,
        threads: Optional[int] = None,
    ) -> None:
        """``out = grad_out + dh_next`` (its rows only), zero where ``hidden`` was clipped."""
        fn = getattr(self.lib, f"hidden_grad_{self._suffix(out, 'out')}")
        n, proj = _rows_width(grad_out, "grad_out")
        low, clip = out.dtype, _clip(proj_clip, "proj_clip")
        _width(proj, "grad_out")
        n_next, *nxt = _optional_arg(dh_next, proj, low, n, "dh_next")
        head = _arg(grad_out, proj, F32, n, "grad_out")
        tail = [*_arg(hidden, proj, low, n, "hidden"), clip, *_arg(out, proj, low, n, "out")]
        _no_overlap({"out": out}, {"grad_out": grad_out, "dh_next": dh_next, "hidden": hidden})
        fn(n, n_next, proj, *head, *nxt, *tail, threads_for(2 * n * proj, threads))

    def backward(
        self,
        dm: torch.Tensor,
        gates: torch.Tensor,
        c_new: torch.Tensor,
        c_prev: torch.Tensor,
        tanh_c: torch.Tensor,
        dc_next: Optional[torch.Tensor],
        cell_clip: Optional[float],
        dz: torch.Tensor,
        dc_out: torch.Tensor,
        grad_bias: torch.Tensor,
        threads: Optional[int] = None,
    ) -> None:
        """From ``dm`` (the gradient of ``m``): ``dz`` (the gate pre-activations') and
        ``dc_out`` (the cell gradient reaching ``c_{t-1}``), written in place; ``grad_bias``
        (float32 ``[2, 4H]``, contiguous) accumulates ``dz`` summed over rows."""
        fn = getattr(self.lib, f"cell_backward_{self._suffix(dm, 'dm')}")
        n, hid = _rows_width(dm, "dm")
        low, clip = dm.dtype, _clip(cell_clip, "cell_clip")
        _width(hid, "dm")
        head = {"dm": (dm, hid, low), "gates": (gates, 4 * hid, F32), "c_new": (c_new, hid, F32), "c_prev": (c_prev, hid, F32)}
        head["tanh_c"] = (tanh_c, hid, F32)
        pointers = [v for name, (x, w, t) in head.items() for v in _arg(x, w, t, n, name)]
        n_next, *nxt = _optional_arg(dc_next, hid, F32, n, "dc_next")
        outs = [*_arg(dz, 4 * hid, low, n, "dz"), *_arg(dc_out, hid, F32, n, "dc_out"), _vector(grad_bias, 4 * hid, "grad_bias")]
        inputs = {"dm": dm, "gates": gates, "c_new": c_new, "c_prev": c_prev, "tanh_c": tanh_c, "dc_next": dc_next}
        _no_overlap({"dz": dz, "dc_out": dc_out, "grad_bias": grad_bias}, inputs)
        if fn(n, n_next, hid, *pointers, *nxt, clip, *outs, threads_for(2 * n * 4 * hid, threads)) != 0:
            raise MemoryError("cell_backward: no memory for the threads' scratch")

    def max_pool(
        self, conv: torch.Tensor, widths: Sequence[int], counts: Sequence[int], threads: Optional[int] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``conv`` ``[tokens, positions, filters]`` bfloat16, filters grouped by width (``counts[g]``
        filters of width ``widths[g]``, in order) -> ``(values, index)`` ``[tokens, filters]``: each
        filter's maximum over its valid positions (float32) and the first position reaching it
        (a NaN is the maximum, as in ``torch.max``)."""
        conv = _tensor(conv, "conv")
        if conv.dtype != torch.bfloat16 or conv.dim() != 3 or not conv.is_contiguous():
            raise ValueError(
                f"conv: expected a contiguous bfloat16 CPU [tokens, positions, filters] tensor, got {conv.dtype} {tuple(conv.shape)}"
            )
        tokens, positions, n_filters = conv.shape
        _width(n_filters, "conv (filters)")
        if not 1 <= positions < 2**31:
            raise ValueError(f"conv: expected 1 to 2**31 - 1 positions, got {positions}")
        widths, counts = [_integer(w, "widths") for w in widths], [_integer(c, "counts") for c in counts]
        if not widths or len(widths) != len(counts):
            raise ValueError(
                f"widths and counts: expected one count per width (at least one), got {len(widths)} widths and {len(counts)} counts"
            )
        if any(not 1 <= w <= positions for w in widths):
            raise ValueError(f"widths: each must be 1..{positions} (the positions of conv), got {widths}")
        if any(c < 0 for c in counts) or sum(counts) != n_filters:
            raise ValueError(f"counts: filter counts {counts} must be >= 0 and add up to the {n_filters} filters of conv")
        starts = torch.tensor([sum(counts[:g]) for g in range(len(counts))], dtype=torch.int64)
        counts_t, widths_t = torch.tensor(counts, dtype=torch.int64), torch.tensor(widths, dtype=torch.int64)
        values = torch.empty(tokens, n_filters, dtype=torch.float32)
        index = torch.empty(tokens, n_filters, dtype=torch.int64)
        pointers = [t.data_ptr() for t in (starts, counts_t, widths_t, values, index)]
        threads = threads_for(tokens * positions * n_filters // 4, threads)  # a compare per value: cheaper than a step's
        if self.lib.max_pool_bf16(tokens, positions, n_filters, conv.data_ptr(), len(counts), *pointers, threads) != 0:
            raise MemoryError("max_pool: no memory for the threads' scratch")
        return values, index

    def softmax_lse(self, first: torch.Tensor, logits: torch.Tensor, threads: Optional[int] = None) -> torch.Tensor:
        """Each row's log-sum-exp over ``first`` ``[rows]`` (float32) and ``logits`` ``[rows,
        cols]`` (bfloat16, ``-inf`` for a left-out entry) -> ``[rows]`` float32 (NaN for a row
        holding a NaN, as ``log_softmax``)."""
        rows, cols = _softmax_rows(logits, "logits")
        _row_vector(first, rows, "first")
        lse = torch.empty(rows, dtype=F32)
        self.lib.softmax_lse_bf16(rows, cols, first.data_ptr(), logits.data_ptr(), lse.data_ptr(), threads_for(rows * cols, threads))
        return lse

    def softmax_grad_(self, logits: torch.Tensor, lse: torch.Tensor, threads: Optional[int] = None) -> torch.Tensor:
        """``logits`` ``[rows, cols]`` (bfloat16) overwritten with ``exp(logits - lse[:, None])``
        rounded to bfloat16 (the softmax against each row's log-sum-exp ``lse``, float32); returns
        the rounded values' sums over rows, ``[cols]`` float32."""
        rows, cols = _softmax_rows(logits, "logits")
        _row_vector(lse, rows, "lse")
        _no_overlap({"logits": logits}, {"lse": lse})
        sums = torch.empty(cols, dtype=F32)
        if (
            self.lib.softmax_grad_bf16(rows, cols, lse.data_ptr(), logits.data_ptr(), sums.data_ptr(), threads_for(rows * cols, threads))
            != 0
        ):
            raise MemoryError("softmax_grad_: no memory for the threads' scratch")
        return sums

    def quantize_rows(self, x: torch.Tensor, levels: int, threads: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``[n, in]`` float32 (rows contiguous, any row stride) quantized per row for the int8
        products: ``(q, scale)``, ``q`` ``[n, in]`` uint8 at zero point ``levels + 1``, ``scale``
        ``[n, 1]`` float32 (``max |x| / levels`` per row; 1 for an all-zero row, NaN for a row
        holding a NaN or an infinity), as :func:`~.int8.quantize_rows` computes it."""
        x = _tensor(x, "x")
        if x.dtype != F32 or x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1) or x.shape[1] < 1:
            raise ValueError(f"x: expected float32 [rows, width >= 1] with contiguous rows, got {x.dtype} {tuple(x.shape)}")
        levels = _integer(levels, "levels")
        if not 1 <= levels <= 127:
            raise ValueError(f"levels: expected 1 to 127, got {levels}")
        rows, cols = x.shape
        q = torch.empty(rows, cols, dtype=torch.uint8)
        scale = torch.empty(rows, 1, dtype=F32)
        stride = x.stride(0) if rows > 1 else cols
        self.lib.quantize_rows_u8(
            rows, cols, x.data_ptr(), stride, levels, q.data_ptr(), scale.data_ptr(), threads_for(rows * cols, threads)
        )
        return q, scale

    def char_table_max(
        self,
        char_ids: torch.Tensor,
        tables: torch.Tensor,
        vocab: int,
        widths: Sequence[int],
        counts: Sequence[int],
        bias: torch.Tensor,
        threads: Optional[int] = None,
    ) -> torch.Tensor:
        """Each filter's maximum over positions (bias included, before the activation) of a char
        CNN whose convolutions are tables (:mod:`.char_table`): ``tables`` is one flat float32
        vector holding, group after group (``counts[g]`` filters of width ``widths[g]``), the
        group's ``widths[g]`` tables ``[vocab, counts[g]]``; ``bias`` ``[n_filters]``.
        ``char_ids`` ``[N, positions]`` (ids below ``vocab``, at least as many positions as the
        widest filter) -> ``[N, n_filters]`` float32."""
        char_ids = _tensor(char_ids, "char_ids")
        if char_ids.dim() != 2 or char_ids.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"char_ids: expected integer [tokens, positions], got {char_ids.dtype} {tuple(char_ids.shape)}")
        vocab = _integer(vocab, "vocab")
        widths_, counts_ = [_integer(w, "widths") for w in widths], [_integer(c, "counts") for c in counts]
        if not widths_ or len(widths_) != len(counts_) or min(widths_ + counts_) < 1 or vocab < 1:
            raise ValueError(f"widths and counts: one entry >= 1 per group of filters (and vocab >= 1), got {widths_}, {counts_}, {vocab}")
        sizes = [w * c * vocab for w, c in zip(widths_, counts_)]
        tables = _tensor(tables, "tables")
        if tables.dtype != F32 or tables.dim() != 1 or not tables.is_contiguous() or len(tables) != sum(sizes):
            raise ValueError(
                f"tables: expected a contiguous float32 vector of {sum(sizes)} values, got {tables.dtype} {tuple(tables.shape)}"
            )
        n_filters = sum(counts_)
        bias = _tensor(bias, "bias")
        if bias.dtype != F32 or tuple(bias.shape) != (n_filters,) or not bias.is_contiguous():
            raise ValueError(f"bias: expected a contiguous float32 [{n_filters}] vector, got {bias.dtype} {tuple(bias.shape)}")
        tokens, positions = char_ids.shape
        widest = max(widths_)
        if positions < widest:
            raise ValueError(f"char_ids: {positions} positions, fewer than the widest filter ({widest})")
        ids = char_ids.to(torch.int32).contiguous()
        if tokens and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"char_ids: ids must be in 0..{vocab - 1}, got {int(ids.min())}..{int(ids.max())}")
        groups = torch.tensor(
            [[sum(sizes[:g]) for g in range(len(sizes))], [sum(counts_[:g]) for g in range(len(sizes))], counts_, widths_],
            dtype=torch.int64,
        )  # offsets, starts, counts, widths
        out = torch.empty(tokens, n_filters, dtype=F32)
        self.lib.char_table_max_f32(
            tokens,
            positions,
            ids.data_ptr(),
            vocab,
            len(sizes),
            tables.data_ptr(),
            groups[0].data_ptr(),
            groups[1].data_ptr(),
            groups[2].data_ptr(),
            groups[3].data_ptr(),
            widest,
            bias.data_ptr(),
            n_filters,
            out.data_ptr(),
            threads_for(tokens * positions * n_filters * widest // 8, threads),
        )
        return out

    def infer_step(
        self,
        bias: torch.Tensor,
        step: Pair,
        rec: Pair,
        c: Pair,
        m: Pair,
        cell_clip: Optional[float],
        step_rows: Optional[Pair] = None,
        threads: Optional[int] = None,
    ) -> None:
        """One inference step, both directions: gates from ``bias`` ``[2, 4H]`` (float32) +
        ``step`` (``x W_x``) + ``rec`` (``h W_h``), ``n`` rows of ``4H`` each, bfloat16 or float32
        (the same); ``c`` (``n`` rows of ``H``, float32) updated in place; ``m = o * tanh(c)``
        written to ``m`` (``n`` rows of ``H``) in the products' dtype. Each argument is a
        ``[2, rows, width]`` tensor or a pair of ``[rows, width]`` tensors (one per direction).
        With ``step_rows`` (int64, ``n`` per direction), row ``r`` of direction ``d`` reads row
        ``step_rows[d][r]`` of ``step``, which may then hold any number of rows."""
        pairs = {"step": _pair(step, "step"), "rec": _pair(rec, "rec"), "c": _pair(c, "c"), "m": _pair(m, "m")}
        if pairs["c"][0].dim() != 2:
            raise ValueError(f"c: expected [rows, width] per direction, got shape {tuple(pairs['c'][0].shape)}")
        n, hid = pairs["c"][0].shape[0], _width(pairs["c"][0].shape[1], "c")
        low = pairs["step"][0].dtype
        if low not in (torch.bfloat16, F32):
            raise ValueError(f"step: expected bfloat16 or float32 tensors, got {low}")
        clip = _clip(cell_clip, "cell_clip")
        index = None if step_rows is None else _pair(step_rows, "step_rows")
        widths = {
            "step": (4 * hid, low, None if index is not None else n),
            "rec": (4 * hid, low, n),
            "c": (hid, F32, n),
            "m": (hid, low, n),
        }
        pointers = {name: _rows(pairs[name], *widths[name], name) for name in pairs}
        index_pointers = None if index is None else _row_index(index, n, pairs["step"])
        bias_pointer = _vector(bias, 4 * hid, "bias")
        named = {f"{name}[{d}]": x for name, pair in pairs.items() for d, x in enumerate(pair)}
        if index is not None:
            named.update({f"step_rows[{d}]": x for d, x in enumerate(index)})
        outputs = {name: named.pop(name) for name in ("c[0]", "c[1]", "m[0]", "m[1]")}
        _no_overlap(outputs, {"bias": bias, **named})  # c: read and written in place, by design
        pointers_in_order = [pointers["step"], index_pointers, pointers["rec"], pointers["c"], pointers["m"]]
        fn = self.lib.lstm_step_infer_bf16 if low == torch.bfloat16 else self.lib.lstm_step_infer_f32
        if fn(n, hid, bias_pointer, *pointers_in_order, clip, threads_for(2 * n * 4 * hid, threads)) != 0:
            raise MemoryError("infer_step: no memory for the threads' scratch")


def _softmax_rows(logits: Any, name: str) -> Tuple[int, int]:
    """``(rows, cols)`` of a contiguous bfloat16 ``[rows, cols]`` tensor (cols >= 1)."""
    logits = _tensor(logits, name)
    if logits.dtype != torch.bfloat16 or logits.dim() != 2 or not logits.is_contiguous() or logits.shape[1] < 1:
        raise ValueError(
            f"{name}: expected a contiguous bfloat16 [rows, cols] tensor (cols >= 1), got {logits.dtype} {tuple(logits.shape)}"
        )
    return logits.shape[0], logits.shape[1]


def _row_vector(x: Any, rows: int, name: str) -> None:
    """Refuse anything but a contiguous float32 ``[rows]`` tensor."""
    x = _tensor(x, name)
    if x.dtype != F32 or x.shape != (rows,) or not x.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous float32 [{rows}] tensor, got {x.dtype} {tuple(x.shape)}")


#: a per-direction argument: ``[2, rows, width]`` or two ``[rows, width]`` tensors
Pair = Union[torch.Tensor, Sequence[torch.Tensor]]


def _pair(x: Any, name: str) -> List[torch.Tensor]:
    """The two directions' tensors of a :data:`Pair` argument (not yet checked beyond that)."""
    if isinstance(x, torch.Tensor):
        if x.dim() < 1 or x.shape[0] != 2:
            raise ValueError(f"{name}: expected two directions, got shape {tuple(x.shape)}")
        return [_tensor(x[0], name), _tensor(x[1], name)]
    if not isinstance(x, (list, tuple)) or len(x) != 2:
        raise ValueError(f"{name}: expected a [2, rows, width] tensor or a pair of tensors, got {type(x).__name__}")
    return [_tensor(part, f"{name}[{d}]") for d, part in enumerate(x)]


def _rows(pair: List[torch.Tensor], width: int, dtype: torch.dtype, rows: Optional[int], name: str) -> Any:
    """The two directions' pointers (for a ``_PAIR`` argument) after checking that each is
    ``[rows, width]`` (any number of rows >= 1 when ``rows`` is None) with contiguous rows."""
    pointers = []
    for d, x in enumerate(pair):
        if x.dtype != dtype:
            raise ValueError(f"{name}[{d}]: expected a {dtype} tensor, got {x.dtype}")
        if x.dim() != 2 or x.shape[1] != width or (x.shape[1] > 1 and x.stride(1) != 1) or (x.shape[0] > 1 and x.stride(0) != width):
            raise ValueError(f"{name}[{d}]: expected [rows, {width}] with contiguous rows, got shape {tuple(x.shape)} strides {x.stride()}")
        if (rows is None and x.shape[0] < 1) or (rows is not None and x.shape[0] != rows):
            raise ValueError(f"{name}[{d}]: expected {rows if rows is not None else 'at least 1'} rows, got shape {tuple(x.shape)}")
        pointers.append(x.data_ptr())
    return (ctypes.c_void_p * 2)(*pointers)


def _row_index(index: List[torch.Tensor], n: int, step: List[torch.Tensor]) -> Any:
    """The two directions' pointers of an int64 row index (``n`` contiguous values each) whose
    values all lie within that direction's ``step`` rows: checked, because the C code reads
    ``step`` through it."""
    pointers = []
    for d, x in enumerate(index):
        if x.dtype != torch.int64 or x.dim() != 1 or x.shape[0] != n or (n > 1 and x.stride(0) != 1):
            raise ValueError(f"step_rows[{d}]: expected {n} contiguous int64 values, got {x.dtype} {tuple(x.shape)}")
        limit = step[d].shape[0] if step[d].dim() == 2 else 0
        if n and (int(x.min()) < 0 or int(x.max()) >= limit):
            raise ValueError(
                f"step_rows[{d}]: every row index must be in 0..{limit - 1} (the rows of step), got {int(x.min())}..{int(x.max())}"
            )
        pointers.append(x.data_ptr())
    return (ctypes.c_void_p * 2)(*pointers)


def _integer(value: Any, name: str) -> int:
    """``value`` as an int (an int, NumPy or tensor integer), else a ValueError naming ``name``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: expected integers, got {value!r}") from None
