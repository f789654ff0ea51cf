"""The published (bilm-tf) file layout: ``options.json`` and the HDF5 datasets its options require.

:mod:`.weights` converts these datasets to our modules; :mod:`.published` uses the same list to
check a download without reading its values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Tuple, Union

from .errors import WeightsError
from .model import BiLMConfig

PathLike = Union[str, os.PathLike]


def read_options(path: PathLike) -> Dict[str, Any]:
    """Parse an ``options.json`` file, with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"options file not found: {path}")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise WeightsError(f"options file {path} is not valid JSON: {err}") from None
    if not isinstance(options, dict):
        raise WeightsError(f"options file {path} must hold a JSON object")
    return options


def lstm_prefix(direction: int, layer: int) -> str:
    """HDF5 group of one LSTM layer (direction 0 = forward, 1 = backward)."""
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def hdf5_datasets(config: BiLMConfig) -> Dict[str, Tuple[int, ...]]:
    """Every dataset a weights file for ``config`` must hold, with its shape.

    ``char_embed`` is listed without the padding row (``n_characters - 1`` rows, as published);
    readers also accept a file that stores the padding row.
    """
    char_dim, n_filters, proj, cell = config.char_dim, config.n_filters, config.projection_dim, config.lstm_dim
    shapes: Dict[str, Tuple[int, ...]] = {"char_embed": (config.n_characters - 1, char_dim)}
    for i, (width, count) in enumerate(config.filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, char_dim, count)
        shapes[f"CNN/b_cnn_{i}"] = (count,)
    for k in range(config.n_highway):
        for name in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{name}"] = (n_filters, n_filters)
            shapes[f"CNN_high_{k}/b_{name}"] = (n_filters,)
    if n_filters != proj:
        shapes["CNN_proj/W_proj"] = (n_filters, proj)
        shapes["CNN_proj/b_proj"] = (proj,)
    for layer in range(config.n_layers):
        for direction in (0, 1):
            prefix = lstm_prefix(direction, layer)
            shapes[f"{prefix}/W_0"] = (2 * proj, 4 * cell)
            shapes[f"{prefix}/B"] = (4 * cell,)
            shapes[f"{prefix}/W_P_0"] = (cell, proj)
    return shapes


def check_hdf5(weight_file: PathLike, config: BiLMConfig) -> None:
    """Open ``weight_file`` and check that it holds every dataset ``config`` requires, with the
    right shape (metadata only: no values are read). Raises :class:`WeightsError` naming the file."""
    import h5py

    weight_file = Path(weight_file)
    try:
        handle = h5py.File(weight_file, "r")
    except OSError as err:
        raise WeightsError(f"weights file {weight_file} is not a readable HDF5 file (truncated or another format?): {err}") from None
    with handle:
        for name, shape in hdf5_datasets(config).items():
            if name not in handle:
                raise WeightsError(f"weights file {weight_file}: dataset '{name}' is missing")
            found = tuple(handle[name].shape)
            ok = found == shape or (name == "char_embed" and found == (shape[0] + 1, shape[1]))
            if not ok:
                raise WeightsError(f"weights file {weight_file}: dataset '{name}' has shape {found}, but the options imply {shape}")
