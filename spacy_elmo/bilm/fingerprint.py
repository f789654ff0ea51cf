"""A biLM's content fingerprint: which model made a cache, an index or a sense inventory.

SHA-256 over the model's options (canonical JSON) and every tensor of its state dict (name,
shape and float32 bytes, in state-dict order). It depends on the content only: the same weights
read from the original HDF5 layout or from our native format give the same fingerprint, and a
model retrained at the same path gives another. Recomputed on every call: no cache could see a
write through ``param.data`` (it bumps no version counter), and hashing costs 0.02 to 0.05 s for
the embedded default and 0.7 to 2 s for the Original's shape (93.6M values; one thread, a busy
2-core machine), once per check.
"""

from __future__ import annotations

import hashlib
import json

import torch

from .model import BiLM


class FingerprintError(ValueError):
    """A cache, index or sense inventory used with another biLM than the one that built it."""


def bilm_fingerprint(model: BiLM) -> str:
    """The hex SHA-256 fingerprint of ``model``'s config and weights (see the module docstring)."""
    state = model.state_dict()
    digest = hashlib.sha256()
    digest.update(json.dumps(model.config.to_options(), sort_keys=True).encode("utf-8"))
    for name, tensor in state.items():
        data = tensor.detach().to("cpu", torch.float32).contiguous()
        digest.update(f"\0{name}\0{tuple(data.shape)}\0".encode("utf-8"))
        digest.update(memoryview(data.numpy()).cast("B"))  # no copy of the bytes
    return digest.hexdigest()


def short(fingerprint: str) -> str:
    """The first 12 hex digits, for messages."""
    return fingerprint[:12]
