"""The ``precision`` training option: which dtype the training step's matrix products use."""

from __future__ import annotations

from typing import Optional

import torch

PRECISIONS = ("fp32", "bf16", "auto")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` runs bfloat16 products natively (AMX or AVX512-BF16 on a CPU; a GPU
    that supports bf16). Without them torch emulates bf16 on the CPU, slower than float32."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and _cpu_has_bf16_instructions()
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the torch build
        return False


def _cpu_has_bf16_instructions() -> bool:
    try:
        flags = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:  # not Linux: trust oneDNN's answer
        return True
    return "amx_bf16" in flags or "avx512_bf16" in flags


def train_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """``torch.bfloat16`` for ``bf16`` (and for ``auto`` where :func:`native_bf16`), else None (float32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "bf16" or (precision == "auto" and native_bf16(device)):
        return torch.bfloat16
    return None
