"""The ``precision`` training option: which dtype the training step's matrix products use.

``fp32``: float32 throughout, through autograd's own graph of every step. ``fp32-fused``: the same
float32 maths through the hand-written training kernels that ``bf16`` uses (whole-sequence input
products, one autograd node per LSTM layer, the fused sampled softmax and char CNN), about 1.5x
the tokens per CPU-second of ``fp32`` on a CPU without native bf16 (an AVX2-only AMD EPYC: 1,550-1,660
against 1,080), equal to it up to the order of float32 sums (not bit-for-bit). ``bf16``: bfloat16
products with float32 master weights (the same kernels). ``auto``: bf16 only on a CPU with native bf16 instructions (AMX
or AVX512-BF16), fp32 everywhere else, a CUDA GPU included (the bf16 training path is a CPU one).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels.cpu import native_bf16 as cpu_has_native_bf16  # resolve_precision reads it here (tests patch it)

PRECISIONS = ("fp32", "fp32-fused", "bf16", "auto")
RESOLVED = ("fp32", "fp32-fused", "bf16")  # what a run trains in, as checkpoints record it


def resolve_precision(precision: str, device: torch.device) -> str:
    """``fp32``, ``fp32-fused`` or ``bf16``: what ``precision`` means on ``device`` (``auto``: bf16 only on a CPU
    with native bf16, see :func:`cpu_has_native_bf16`; fp32-fused on other CPUs; fp32 on a GPU)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        if device.type != "cpu":
            return "fp32"
        return "bf16" if cpu_has_native_bf16() else "fp32-fused"
    return precision


def train_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """The products' dtype in the training kernels: ``torch.bfloat16`` for bf16, ``torch.float32``
    for fp32-fused, None (autograd's float32 graph, no training kernels) for fp32."""
    resolved = resolve_precision(precision, device)
    if resolved == "fp32-fused" and device.type != "cpu":
        raise ValueError("precision fp32-fused is a CPU path (its kernels run on the CPU): use fp32 or amp on a GPU")
    return {"bf16": torch.bfloat16, "fp32-fused": torch.float32}.get(resolved)
