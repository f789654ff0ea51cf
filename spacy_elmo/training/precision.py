"""The ``precision`` training option: which dtype the training step's matrix products use.

``fp32``: float32 throughout. ``bf16``: bfloat16 products with float32 master weights (the
hand-written training kernels). ``auto``: bf16 only on a CPU with native bf16 instructions (AMX
or AVX512-BF16), fp32 everywhere else, a CUDA GPU included (the bf16 training path is a CPU one).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels import cpu

PRECISIONS = ("fp32", "bf16", "auto")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bfloat16 products natively (AMX or AVX512-BF16, as oneDNN sees them).
    Without them torch emulates bf16, slower than float32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and _cpu_has_bf16_instructions()
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the torch build
        return False


def _cpu_has_bf16_instructions() -> bool:
    flags = cpu.features()
    if flags is None:  # no /proc/cpuinfo (not Linux): trust oneDNN's answer
        return True
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_precision(precision: str, device: torch.device) -> str:
    """``fp32`` or ``bf16``: what ``precision`` means on ``device`` (``auto``: bf16 only on a CPU
    with native bf16, see :func:`cpu_has_native_bf16`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "bf16" if device.type == "cpu" and cpu_has_native_bf16() else "fp32"
    return precision


def train_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """``torch.bfloat16`` where :func:`resolve_precision` gives bf16, else None (float32)."""
    return torch.bfloat16 if resolve_precision(precision, device) == "bf16" else None
