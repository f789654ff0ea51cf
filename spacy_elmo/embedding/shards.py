"""Shard files and the manifest: the crash-safe unit of a corpus run.

Chunk ``k`` (corpus lines ``k*chunk_lines`` up to the next chunk) becomes ``shard-{k:06d}.npz``,
an uncompressed NumPy archive (no pickles) holding, for the chunk's embedded lines:

* ``line``    int64 ``[n]``: corpus line numbers (0-based, across all input files)
* ``offsets`` int64 ``[n+1]``: line ``i``'s tokens are rows ``offsets[i]:offsets[i+1]``
* ``vectors`` float32 ``[n_tokens, L+1, dim]`` (``--layers all``) or ``[n_tokens, dim]``
* ``text``    uint8: the lines' UTF-8 text joined by ``\\n``
* ``tokens``  uint8: the tokens' UTF-8 text joined by ``\\n`` (in ``offsets`` order)

A shard is written to a temporary name, flushed to disk and renamed into place, so it either
exists whole or not at all: after a crash its presence alone says the chunk is done. Two writers
of the same chunk (a retried task, a duplicate) write identical content and the last rename
wins, so a line can never appear twice. ``manifest.json`` (also replaced atomically) records the
configuration and input fingerprint that the shards belong to, and at the end the shard list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Set, Tuple

import numpy as np

from .. import files

MANIFEST = "manifest.json"
FORMAT = "spacy-elmo-corpus-embeddings"
VERSION = 1
_SHARD = re.compile(r"^shard-(\d{6,})\.npz$")


def shard_name(index: int) -> str:
    return f"shard-{index:06d}.npz"


def write_json(path: Path, data: Dict[str, Any]) -> None:
    files.write_json(path, data)


def read_manifest(folder: Path) -> Dict[str, Any]:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def _joined(strings: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(strings).encode("utf-8"), dtype=np.uint8)


def write_shard(path: Path, lines: Sequence[int], tokens: Sequence[Sequence[str]], texts: Sequence[str], vectors: np.ndarray) -> None:
    """Write one chunk's shard atomically (see the module docstring for the layout)."""
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokens], out=offsets[1:])
    if vectors.shape[0] != offsets[-1]:
        raise ValueError(f"{len(vectors)} vectors for {offsets[-1]} tokens")
    arrays: Dict[str, Any] = {  # Any: numpy's savez types its keyword arguments with its own flags
        "line": np.asarray(lines, dtype=np.int64),
        "offsets": offsets,
        "vectors": np.ascontiguousarray(vectors, dtype=np.float32),
        "text": _joined(texts),
        "tokens": _joined([token for line in tokens for token in line]),
    }
    files.write_atomic(path, lambda handle: np.savez(handle, **arrays))


@dataclass
class Shard:
    """One shard read back: ``vectors_of(i)``, ``tokens[i]``, ``texts[i]`` for its ``i``-th line."""

    line: np.ndarray
    offsets: np.ndarray
    vectors: np.ndarray
    texts: List[str]
    tokens: List[List[str]]

    def __len__(self) -> int:
        return len(self.line)

    def vectors_of(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]

    def items(self) -> Iterator[Tuple[int, str, List[str], np.ndarray]]:
        """``(corpus line, text, tokens, vectors)`` for each line of the shard."""
        for i in range(len(self)):
            yield int(self.line[i]), self.texts[i], self.tokens[i], self.vectors_of(i)


def _split(data: np.ndarray, n: int) -> List[str]:
    if n == 0:
        return []
    return data.tobytes().decode("utf-8").split("\n")


def read_shard(path: Path) -> Shard:
    """Load a shard file (see the module docstring)."""
    with np.load(path, allow_pickle=False) as data:
        line, offsets = data["line"], data["offsets"]
        flat = _split(data["tokens"], int(offsets[-1]))
        tokens = [flat[offsets[i] : offsets[i + 1]] for i in range(len(line))]
        return Shard(line, offsets, data["vectors"], _split(data["text"], len(line)), tokens)


def shard_summary(path: Path) -> Dict[str, Any]:
    """File name, first and last corpus line, lines and tokens of a shard (reads only its small arrays)."""
    with np.load(path, allow_pickle=False) as data:
        line, offsets = data["line"], data["offsets"]
        return {
            "file": path.name,
            "lines": int(len(line)),
            "first_line": int(line[0]) if len(line) else None,
            "last_line": int(line[-1]) if len(line) else None,
            "tokens": int(offsets[-1]),
        }


def finished_chunks(folder: Path) -> Set[int]:
    """Indices of the chunks whose shard exists in ``folder``."""
    found = set()
    for path in folder.iterdir():
        match = _SHARD.match(path.name)
        if match:
            found.add(int(match.group(1)))
    return found


remove_temporary = files.remove_temporary


def iter_shard_dir(folder: Path) -> Iterator[Tuple[int, str, List[str], np.ndarray]]:
    """``(corpus line, text, tokens, vectors)`` for every line of a finished ``--format shards``
    output, in corpus order (one shard in memory at a time)."""
    manifest = read_manifest(folder)
    if not manifest.get("complete"):
        raise ValueError(f"{folder} is not complete yet: resume the run that writes it first")
    for entry in manifest["shards"]:
        yield from read_shard(folder / entry["file"]).items()
