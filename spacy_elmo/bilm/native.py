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
compiler, or it fails, or ``SPACY_ELMO_NATIVE_CELL=0``, :func:`library` returns ``None`` and
training uses the eager code (same maths, slower; a warning says why, once).
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

from .cache import cache_root

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


def _ptr(x: torch.Tensor) -> int:
    return x.data_ptr()


def _dstride(x: torch.Tensor, width: int, dtype: Optional[torch.dtype] = torch.float32) -> int:
    """Elements between a ``[2, n, width]`` tensor's two directions; checks its dtype (``None``:
    the products' dtype, checked by the caller) and that its rows are contiguous."""
    if dtype is not None and x.dtype != dtype:
        raise ValueError(f"expected a {dtype} tensor, got {x.dtype}")
    if x.dim() != 3 or x.shape[0] != 2 or x.shape[2] != width or x.stride(2) != 1 or (x.shape[1] > 1 and x.stride(1) != width):
        raise ValueError(f"expected [2, n, {width}] with contiguous rows, got shape {tuple(x.shape)} strides {x.stride()}")
    if x.device.type != "cpu":
        raise ValueError("the compiled kernels run on CPU tensors only")
    return x.stride(0)


def _bias_buffer(x: torch.Tensor, hid: int) -> torch.Tensor:
    if x.shape != (2, 4 * hid) or x.dtype != F32 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous float32 [2, {4 * hid}] bias gradient, got {x.dtype} {tuple(x.shape)}")
    return x


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
        fn(n, hid, *[v for x, w, t in args for v in (_ptr(x), _dstride(x, w, t))], float(cell_clip or 0.0))

    def hidden_grad(
        self, grad_out: torch.Tensor, dh_next: Optional[torch.Tensor], hidden: torch.Tensor, proj_clip: Optional[float], out: torch.Tensor
    ) -> None:
        """``out = grad_out + dh_next`` (its rows only), zero where ``hidden`` was clipped."""
        n, proj, low = grad_out.shape[1], grad_out.shape[2], out.dtype
        fn = getattr(self.lib, f"hidden_grad_{self._suffix(out)}")
        n_next = 0 if dh_next is None else dh_next.shape[1]
        nxt = (0, 0) if dh_next is None else (_ptr(dh_next), _dstride(dh_next, proj, low))
        clip = float(proj_clip or 0.0)
        fn(
            n,
            n_next,
            proj,
            _ptr(grad_out),
            _dstride(grad_out, proj),
            *nxt,
            _ptr(hidden),
            _dstride(hidden, proj, low),
            clip,
            _ptr(out),
            _dstride(out, proj, low),
        )

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
        n_next = 0 if dc_next is None else dc_next.shape[1]
        nxt = (0, 0) if dc_next is None else (_ptr(dc_next), _dstride(dc_next, hid))
        head = [(dm, hid, low), (gates, 4 * hid, F32), (c_new, hid, F32), (c_prev, hid, F32), (tanh_c, hid, F32)]
        fn(
            n, n_next, hid, *[v for x, w, t in head for v in (_ptr(x), _dstride(x, w, t))], *nxt, float(cell_clip or 0.0),
            _ptr(dz), _dstride(dz, 4 * hid, low), _ptr(dc_out), _dstride(dc_out, hid), _ptr(_bias_buffer(grad_bias, hid)),
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
            tokens, positions, n_filters, _ptr(conv), len(counts), _ptr(starts), _ptr(counts_t), _ptr(widths_t), _ptr(values), _ptr(index)
        )
        return values, index

    def infer_step(
        self, bias: torch.Tensor, step: torch.Tensor, rec: torch.Tensor, c: torch.Tensor, m: torch.Tensor, cell_clip: Optional[float]
    ) -> None:
        """One bfloat16 inference step: gates from ``bias`` ``[2, 4H]`` (float32) + ``step``
        (``x W_x``) + ``rec`` (``h W_h``), both bfloat16 ``[2, n, 4H]``; ``c`` ``[2, n, H]``
        (float32) updated in place; ``m = o * tanh(c)`` written to bfloat16 ``[2, n, H]``."""
        n, hid = step.shape[1], c.shape[2]
        if bias.shape != (2, 4 * hid) or bias.dtype != F32 or not bias.is_contiguous():
            raise ValueError(f"expected a contiguous float32 [2, {4 * hid}] bias, got {bias.dtype} {tuple(bias.shape)}")
        args = [(step, 4 * hid, torch.bfloat16), (rec, 4 * hid, torch.bfloat16), (c, hid, F32), (m, hid, torch.bfloat16)]
        if any(x.shape[1] != n for x, _, _ in args):
            raise ValueError(f"step, rec, c and m must have the same rows, got {[tuple(x.shape) for x, _, _ in args]}")
        pointers = [v for x, w, t in args for v in (_ptr(x), _dstride(x, w, t))]
        self.lib.lstm_step_infer_bf16(n, hid, _ptr(bias), 4 * hid, *pointers, float(cell_clip or 0.0))
