"""The one reader of the CPU's identity and features (Linux's ``/proc/cpuinfo``) for the package.

Four things depend on it: the routing of float32 products (:mod:`.matmul`: Intel or not), the
``auto`` training and inference precisions (``training/precision.py``, ``bilm/auto_precision.py``:
native bfloat16 instructions or not, an int8 path or not) and
the compiled kernels' build key (:mod:`.build`: a library built with ``-march=native`` is only
ever loaded on a CPU with the same identity). Where the CPU cannot be identified (no
``/proc/cpuinfo``, as on macOS, or none of the fields below in it), :func:`identity` is ``None``
and the kernels are built with generic flags instead of ``-march=native``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, FrozenSet, Optional

CPUINFO = "/proc/cpuinfo"
#: the fields that name a CPU and what it can run: x86 (vendor, family, model, stepping, flags)
#: and arm (implementer, architecture, variant, part, revision, features)
IDENTITY_FIELDS = (
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "flags",
    "CPU implementer",
    "CPU architecture",
    "CPU variant",
    "CPU part",
    "CPU revision",
    "Features",
)


def parse_cpuinfo(text: str) -> Dict[str, str]:
    """The first value of each field of ``/proc/cpuinfo``'s text (the first processor's, in effect)."""
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip():
            fields.setdefault(name.strip(), value.strip())
    return fields


@lru_cache(maxsize=1)
def cpuinfo() -> Dict[str, str]:
    """The fields of this machine's ``/proc/cpuinfo`` (read once); empty where it cannot be read."""
    try:
        with open(CPUINFO, encoding="ascii", errors="replace") as fh:
            return parse_cpuinfo(fh.read())
    except OSError:
        return {}


def vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or ``""`` when unknown."""
    return cpuinfo().get("vendor_id", "")


def features() -> Optional[FrozenSet[str]]:
    """The CPU's feature flags (x86 ``flags``, arm ``Features``), or ``None`` when unknown."""
    info = cpuinfo()
    text = info.get("flags", info.get("Features"))
    return None if text is None else frozenset(text.split())


def identity(info: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The CPU's identity for a build key: every field of :data:`IDENTITY_FIELDS` present, one per
    line; ``None`` when there are no features to tell it by (then nothing may assume this CPU)."""
    info = cpuinfo() if info is None else info
    if "flags" not in info and "Features" not in info:
        return None
    return "\n".join(f"{name}: {info[name]}" for name in IDENTITY_FIELDS if name in info)


#: flags of the integer dot-product units that accumulate u8 x s8 products straight into int32
#: (no 16-bit intermediate to saturate): AMX-INT8, AVX512-VNNI, AVX-VNNI
INT8_DOT_FLAGS = frozenset({"amx_int8", "avx512_vnni", "avx_vnni"})


def int8_path(flags: Optional[FrozenSet[str]] = None) -> Optional[str]:
    """Which int8 product path this CPU runs (see ``kernels/int8.py``): ``"vnni"`` with an integer
    dot-product unit (:data:`INT8_DOT_FLAGS`), ``"avx2"`` with AVX2 only (``vpmaddubsw``, whose
    16-bit pair sums saturate unless activations keep to 7 bits), ``None`` without either or when
    the flags are unknown."""
    flags = features() if flags is None else flags
    if flags is None:
        return None
    if flags & INT8_DOT_FLAGS:
        return "vnni"
    return "avx2" if "avx2" in flags else None


def native_bf16() -> bool:
    """Whether this CPU runs bfloat16 products natively (AMX or AVX512-BF16, as oneDNN sees them).
    Without them torch emulates bf16, slower than float32. Unknown flags (no ``/proc/cpuinfo``):
    oneDNN's answer alone."""
    import torch

    try:
        supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the torch build
        return False
    flags = features()
    return supported and (flags is None or "amx_bf16" in flags or "avx512_bf16" in flags)
