"""Keep the training step's large buffers in the process's heap (glibc ``mallopt``).

glibc serves allocations above its mmap threshold (at most 32 MB) with ``mmap`` and returns them
to the OS with ``munmap`` when freed. A training step allocates and frees many such buffers
(activations, logits, gradients) and every step page-faults them in afresh: about 9% of a bf16
step on the default shape. :func:`tune_allocator` turns that off for the rest of the process:

* ``M_MMAP_MAX = 0``: no allocation is served by ``mmap``; large buffers come from the heap
  (the ``mmap`` threshold alone cannot do it, glibc caps it at 32 MB);
* ``M_TRIM_THRESHOLD = 1 GiB``: freed memory at the top of the heap is not handed back to the OS
  until that much is free, so the next step reuses pages that are already mapped.

The cost is memory: freed buffers stay in the process (its resident size stays near the peak of
the largest step instead of falling between steps), and an allocation pattern that fragments
the heap can keep more. Training sets it on by default (``TrainConfig.malloc_tuning``, the
``--no-malloc-tuning`` option, or ``SPACY_ELMO_MALLOC_TUNING=0`` switch it off); nothing calls
it at import time or on an inference path. Anywhere but glibc Linux it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import sys
from typing import Callable, Dict, Optional

logger = logging.getLogger(__name__)

ENV_VAR = "SPACY_ELMO_MALLOC_TUNING"
# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30  # bytes of free heap top kept before glibc trims it
SETTINGS: Dict[str, int] = {"M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": TRIM_THRESHOLD}
_PARAMETERS = {"M_MMAP_MAX": M_MMAP_MAX, "M_TRIM_THRESHOLD": M_TRIM_THRESHOLD}
_OFF = ("0", "false", "no", "off")

_applied = False


def env_allows() -> bool:
    """False when ``SPACY_ELMO_MALLOC_TUNING`` says off (``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in _OFF


def _mallopt() -> Optional[Callable[[int, int], int]]:
    """glibc's ``mallopt`` through ctypes, or None where the C library is not glibc on Linux."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallopt
    except (OSError, AttributeError):  # pragma: no cover - a Linux without glibc's mallopt
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def tune_allocator(enabled: bool = True) -> bool:
    """Apply :data:`SETTINGS` for the rest of the process when ``enabled`` and the environment
    variable allow it, on glibc Linux; True when they are in force (now or from an earlier call)."""
    global _applied
    if not enabled or not env_allows():
        logger.debug("malloc tuning off (%s)", "config" if not enabled else f"{ENV_VAR}={os.environ.get(ENV_VAR)}")
        return False
    if _applied:
        return True
    mallopt = _mallopt()
    if mallopt is None:
        logger.debug("malloc tuning skipped: not glibc on Linux (%s, %s)", sys.platform, platform.libc_ver()[0] or "unknown libc")
        return False
    for name, value in SETTINGS.items():
        if mallopt(_PARAMETERS[name], value) != 1:  # mallopt returns 1 on success
            logger.debug("malloc tuning: mallopt(%s, %d) refused", name, value)
            return False
    _applied = True
    logger.debug("malloc tuning on: %s", SETTINGS)
    return True
