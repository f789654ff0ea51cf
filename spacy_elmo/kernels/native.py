"""Compiled C kernels for bfloat16 on the CPU: each LSTM time step's elementwise work (training
forward and backward, and inference), and the char CNN's max-pooling in training.

:mod:`.fused_train` runs each time step as a few matrix products plus elementwise work: the
gates' nonlinearities, the cell update, clipping, their gradients and the bfloat16 <-> float32
conversions around the products. In eager PyTorch that is ~10 passes over the gate tensors per
step and direction, and it costs more than the products. ``csrc/train_kernels.c`` does the
same maths in one pass each (forward, the hidden state's gradient, the cell's backward),
vectorised by the compiler (``-O3 -march=native``, glibc's vector ``expf``/``tanhf``), and the
max over positions of :mod:`.char_conv_train` in one pass over the bfloat16 convolutions
(``torch.max`` along a strided dimension of bfloat16 is several times slower). bfloat16
inference (:mod:`.bf16`) uses the same kind of one-pass step. float32 inference, the exact
path, never uses them.

It is compiled on first use with the system's C compiler into the cache folder
(``SPACY_ELMO_CACHE`` or the user's cache, ``native/``), keyed on the source, the flags and the
CPU, and loaded with :mod:`ctypes` (no build step at install, no dependency). Where there is no
compiler, or it fails, or ``SPACY_ELMO_NATIVE_KERNELS=0``, :func:`library` returns ``None`` and
the callers run the eager code (same maths, slower; a warning says why, once).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..cache import cache_root

SOURCE = Path(__file__).with_name("csrc") / "train_kernels.c"
#: compile flags. -ffast-math lets the compiler vectorise expf/tanhf (glibc's vector versions);
#: it is given to the compile step only: linked with it, gcc adds a start-up object that turns on
#: flush-to-zero for the whole process, which would change every float computation after loading
COMPILE_FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-ffast-math", "-fPIC")
LINK_FLAGS = ("-shared",)
ENV = "SPACY_ELMO_NATIVE_KERNELS"  # "0" turns the compiled kernels off

_lock = threading.Lock()
_loaded: Optional["NativeKernels"] = None
_tried = False


def enabled() -> bool:
    """False when ``SPACY_ELMO_NATIVE_KERNELS`` is ``0``/``false``/``off``/``no``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def _cpu_key() -> str:
    """What ``-march=native`` depends on: the CPU model and its flags (Linux), else the machine name."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.machine() + platform.processor()
    wanted = [line for line in text.splitlines() if line.startswith(("model name", "flags"))][:2]
    return "\n".join(wanted)


def compiler() -> Optional[str]:
    """``CC`` or the first of cc / gcc / clang on ``PATH``."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build(target_dir: Optional[Path] = None) -> Path:
    """Compile :data:`SOURCE` (if not already built for this source, flags and CPU) and return the
    shared library's path. Raises ``RuntimeError`` naming the problem when it cannot."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    source = SOURCE.read_bytes()
    flags = " ".join(COMPILE_FLAGS + LINK_FLAGS)
    digest = hashlib.sha256(source + flags.encode() + _cpu_key().encode()).hexdigest()[:16]
    folder = target_dir or cache_root() / "native"
    path = folder / f"train_kernels-{digest}.so"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so.tmp")
    os.close(fd)
    obj = tmp[: -len(".so.tmp")] + ".o"
    try:
        for step in ([cc, *COMPILE_FLAGS, "-c", "-o", obj, str(SOURCE)], [cc, *LINK_FLAGS, "-o", tmp, obj, "-lm"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(step[:2])} ... failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, path)  # atomic: concurrent builders (DDP ranks) each publish a complete file
    finally:
        for leftover in (tmp, obj):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return path


def library() -> Optional["NativeKernels"]:
    """The compiled kernels, built and loaded once per process; ``None`` when turned off or unavailable."""
    global _loaded, _tried
    if not enabled():
        return None
    if _tried:  # the hot path: no lock once decided
        return _loaded
    with _lock:
        if not _tried:
            _tried = True
            try:
                _loaded = NativeKernels(ctypes.CDLL(str(build())))
            except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                warnings.warn(
                    f"bfloat16 training and inference use the slower eager code: the compiled kernels are unavailable ({err})", stacklevel=2
                )
        return _loaded


_I64, _F32, _P = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
F32 = torch.float32


def _arg(x: torch.Tensor, width: int, dtype: torch.dtype, rows: int, fewer: bool = False) -> Tuple[int, int]:
    """``(pointer, elements between the two directions)`` of a ``[2, rows, width]`` tensor (at most
    ``rows`` rows when ``fewer``), after checking its dtype, device, shape and contiguous rows: the
    C code trusts them, so a mismatch here would read or write out of bounds."""
    if x.dtype != dtype:
        raise ValueError(f"expected a {dtype} tensor, got {x.dtype}")
    if x.device.type != "cpu":
        raise ValueError("the compiled kernels run on CPU tensors only")
    if x.dim() != 3 or x.shape[0] != 2 or x.shape[2] != width or x.stride(2) != 1 or (x.shape[1] > 1 and x.stride(1) != width):
        raise ValueError(f"expected [2, n, {width}] with contiguous rows, got shape {tuple(x.shape)} strides {x.stride()}")
    if x.shape[1] > rows or (not fewer and x.shape[1] != rows):
        raise ValueError(f"expected {'at most ' if fewer else ''}{rows} rows, got shape {tuple(x.shape)}")
    return x.data_ptr(), x.stride(0)


def _optional_arg(x: Optional[torch.Tensor], width: int, dtype: torch.dtype, rows: int) -> Tuple[int, int, int]:
    """``(rows, pointer, direction stride)`` of an optional tensor of at most ``rows`` rows; zeros for ``None``."""
    if x is None:
        return 0, 0, 0
    return (x.shape[1], *_arg(x, width, dtype, rows, fewer=True))


def _vector(x: torch.Tensor, width: int, what: str) -> int:
    """Pointer of a contiguous float32 ``[2, width]`` tensor (a bias or its gradient)."""
    if x.shape != (2, width) or x.dtype != F32 or not x.is_contiguous() or x.device.type != "cpu":
        raise ValueError(f"expected a contiguous float32 CPU [2, {width}] {what}, got {x.dtype} {tuple(x.shape)}")
    return x.data_ptr()


class NativeKernels:
    """Typed entry points of the compiled library; tensors are checked, then passed as pointers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        for suffix in ("bf16", "f32"):
            getattr(lib, f"cell_forward_{suffix}").argtypes = [_I64, _I64] + [_P, _I64] * 6 + [_F32]
            getattr(lib, f"hidden_grad_{suffix}").argtypes = [_I64, _I64, _I64] + [_P, _I64] * 3 + [_F32, _P, _I64]
            getattr(lib, f"cell_backward_{suffix}").argtypes = [_I64, _I64, _I64] + [_P, _I64] * 6 + [_F32, _P, _I64, _P, _I64, _P]
        signatures: Dict[str, List[Any]] = {
            "max_pool_bf16": [_I64, _I64, _I64, _P, _I64, _P, _P, _P, _P, _P],
            "lstm_step_infer_bf16": [_I64, _I64] + [_P, _I64] * 5 + [_F32],
        }
        for name, argtypes in signatures.items():
            getattr(lib, name).argtypes = argtypes

    @staticmethod
    def _suffix(low: torch.Tensor) -> str:
        if low.dtype == torch.bfloat16:
            return "bf16"
        if low.dtype == torch.float32:
            return "f32"
        raise ValueError(f"the compiled kernels handle bfloat16 or float32 products, not {low.dtype}")

    def forward(
        self,
        z: torch.Tensor,
        c_prev: torch.Tensor,
        gates: torch.Tensor,
        c_new: torch.Tensor,
        tanh_c: torch.Tensor,
        m: torch.Tensor,
        cell_clip: Optional[float],
    ) -> None:
        """From the gate pre-activations ``z`` ``[2, n, 4H]``: activated ``gates``, ``c_new``
        (clipped), ``tanh_c`` and ``m = o * tanh(c_new)`` (the projection's input), written in place."""
        n, hid, low = z.shape[1], c_prev.shape[2], z.dtype
        fn = getattr(self.lib, f"cell_forward_{self._suffix(z)}")
        args = [(z, 4 * hid, low), (c_prev, hid, F32), (gates, 4 * hid, F32), (c_new, hid, F32), (tanh_c, hid, F32), (m, hid, low)]
        fn(n, hid, *[v for x, w, t in args for v in _arg(x, w, t, n)], float(cell_clip or 0.0))

    def hidden_grad(
        self, grad_out: torch.Tensor, dh_next: Optional[torch.Tensor], hidden: torch.Tensor, proj_clip: Optional[float], out: torch.Tensor
    ) -> None:
        """``out = grad_out + dh_next`` (its rows only), zero where ``hidden`` was clipped."""
        n, proj, low = grad_out.shape[1], grad_out.shape[2], out.dtype
        fn = getattr(self.lib, f"hidden_grad_{self._suffix(out)}")
        n_next, *nxt = _optional_arg(dh_next, proj, low, n)
        clip = float(proj_clip or 0.0)
        fn(n, n_next, proj, *_arg(grad_out, proj, F32, n), *nxt, *_arg(hidden, proj, low, n), clip, *_arg(out, proj, low, n))

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
    ) -> None:
        """From ``dm`` (the gradient of ``m``): ``dz`` (the gate pre-activations') and
        ``dc_out`` (the cell gradient reaching ``c_{t-1}``), written in place; ``grad_bias``
        (float32 ``[2, 4H]``, contiguous) accumulates ``dz`` summed over rows."""
        n, hid, low = dm.shape[1], dm.shape[2], dm.dtype
        fn = getattr(self.lib, f"cell_backward_{self._suffix(dm)}")
        n_next, *nxt = _optional_arg(dc_next, hid, F32, n)
        head = [(dm, hid, low), (gates, 4 * hid, F32), (c_new, hid, F32), (c_prev, hid, F32), (tanh_c, hid, F32)]
        fn(
            n, n_next, hid, *[v for x, w, t in head for v in _arg(x, w, t, n)], *nxt, float(cell_clip or 0.0),
            *_arg(dz, 4 * hid, low, n), *_arg(dc_out, hid, F32, n), _vector(grad_bias, 4 * hid, "bias gradient"),
        )  # fmt: skip

    def max_pool(self, conv: torch.Tensor, widths: List[int], counts: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        """``conv`` ``[tokens, positions, filters]`` bfloat16, filters grouped by width (``counts[g]``
        filters of width ``widths[g]``, in order) -> ``(values, index)`` ``[tokens, filters]``: each
        filter's maximum over its valid positions (float32) and the first position reaching it."""
        if conv.dtype != torch.bfloat16 or conv.dim() != 3 or not conv.is_contiguous() or conv.device.type != "cpu":
            raise ValueError(
                f"expected a contiguous bfloat16 CPU [tokens, positions, filters] tensor, got {conv.dtype} {tuple(conv.shape)}"
            )
        tokens, positions, n_filters = conv.shape
        if sum(counts) != n_filters or len(widths) != len(counts):
            raise ValueError(f"filter counts {counts} do not add up to the {n_filters} filters")
        starts = torch.tensor([sum(counts[:g]) for g in range(len(counts))], dtype=torch.int64)
        counts_t, widths_t = torch.tensor(counts, dtype=torch.int64), torch.tensor(widths, dtype=torch.int64)
        values = torch.empty(tokens, n_filters, dtype=torch.float32)
        index = torch.empty(tokens, n_filters, dtype=torch.int64)
        self.lib.max_pool_bf16(
            tokens,
            positions,
            n_filters,
            conv.data_ptr(),
            len(counts),
            starts.data_ptr(),
            counts_t.data_ptr(),
            widths_t.data_ptr(),
            values.data_ptr(),
            index.data_ptr(),
        )
        return values, index

    def infer_step(
        self, bias: torch.Tensor, step: torch.Tensor, rec: torch.Tensor, c: torch.Tensor, m: torch.Tensor, cell_clip: Optional[float]
    ) -> None:
        """One bfloat16 inference step: gates from ``bias`` ``[2, 4H]`` (float32) + ``step``
        (``x W_x``) + ``rec`` (``h W_h``), both bfloat16 ``[2, n, 4H]``; ``c`` ``[2, n, H]``
        (float32) updated in place; ``m = o * tanh(c)`` written to bfloat16 ``[2, n, H]``."""
        n, hid = step.shape[1], c.shape[2]
        args = [(step, 4 * hid, torch.bfloat16), (rec, 4 * hid, torch.bfloat16), (c, hid, F32), (m, hid, torch.bfloat16)]
        pointers = [v for x, w, t in args for v in _arg(x, w, t, n)]
        self.lib.lstm_step_infer_bf16(n, hid, _vector(bias, 4 * hid, "bias"), 4 * hid, *pointers, float(cell_clip or 0.0))
