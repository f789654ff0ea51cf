"""AllenNLP's HDF5 layout, assembled from finished shards.

``allennlp elmo`` writes one float32 dataset per input line, named by the line's index
(``"0"``, ``"1"``, ...): ``[3, n_tokens, dim]`` with all layers, ``[n_tokens, dim]`` for the top
layer or an average; and a dataset ``"sentence_to_index"`` of shape ``(1,)`` holding one JSON
string that maps each line's text to its dataset name (a repeated line maps to its last index).

Memory: one shard at a time, plus, at the very end, the ``sentence_to_index`` JSON text (it is one
string in the file, so h5py needs it whole): about the corpus's text size plus 10 bytes a line.
While the line datasets are written, that JSON goes to a temporary file, not to memory; a
repeated line appears there once per occurrence, and JSON readers (Python's, AllenNLP's) keep
the last one, which is AllenNLP's "last index".

HDF5 files are not crash-safe (a process killed mid-write can leave the whole file unreadable),
so the file is only ever written from finished shards, to a temporary name that is renamed to
the output at the end: the output either does not exist or is complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .. import files
from . import shards


def require_h5py() -> Any:
    try:
        import h5py
    except ImportError:
        from .reader import CorpusError

        raise CorpusError('--format hdf5 needs h5py: pip install "spacy-elmo[hdf5]" (or use --format shards).') from None
    return h5py


def assemble(shard_paths: Iterable[Path], output: Path) -> int:
    """Write ``output`` from the shards (in corpus order); returns the number of line datasets."""
    h5py = require_h5py()
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        index_text = files.temporary_name(output)  # the sentence_to_index JSON, streamed to disk
        try:
            with h5py.File(tmp, "w") as out:
                with open(index_text, "w", encoding="utf-8") as json_out:
                    json_out.write("{")
                    for path in shard_paths:
                        for line, text, _tokens, vectors in shards.read_shard(path).items():
                            key = str(line)
                            data = vectors.transpose(1, 0, 2) if vectors.ndim == 3 else vectors  # [n, L+1, d] -> [L+1, n, d]
                            out.create_dataset(key, data.shape, dtype="float32", data=data)
                            json_out.write(("" if count == 0 else ", ") + json.dumps(text) + ": " + json.dumps(key))
                            count += 1
                    json_out.write("}")
                index = out.create_dataset("sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str))
                index[0] = index_text.read_bytes()
        finally:
            if index_text.exists():
                index_text.unlink()

    files.write_atomic(output, write, by_path=True)
    return count
