"""A random LM head in the published layout: an HDF5 file with ``softmax/W`` [V, dim] and
``softmax/b`` [V] (float32, contiguous, like the authors' file) and a vocabulary of V lines."""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np


def write_random_head(softmax: Path, vocab: Path, vocab_size: int, dim: int, seed: int = 0) -> Tuple[List[str], np.ndarray, np.ndarray]:
    """Write the two files and return (words, W, b)."""
    import h5py

    rng = np.random.default_rng(seed)
    weight = rng.normal(size=(vocab_size, dim)).astype(np.float32)
    bias = rng.normal(size=vocab_size).astype(np.float32)
    words = ["</S>", "<S>", "<UNK>"] + [f"w{i}\u00e9" for i in range(vocab_size - 3)]
    softmax.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(softmax, "w") as handle:
        handle.create_dataset("softmax/W", data=weight)
        handle.create_dataset("softmax/b", data=bias)
    vocab.write_text("".join(w + "\n" for w in words), encoding="utf-8")
    return words, weight, bias
