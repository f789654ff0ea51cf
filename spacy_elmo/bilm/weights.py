"""Reading and writing biLM weights.

Two formats:

* the published original: ``options.json`` + an HDF5 weights file (the layout bilm-tf writes
  and AllenNLP reads; needs ``h5py``, the ``hdf5`` extra);
* our native format: a directory with ``config.json`` (format tag + the original options) and
  ``weights.pt`` (a plain torch state dict, loaded with ``weights_only=True``).

TensorFlow stores ``y = x W + b`` matrices, TF ``conv2d`` kernels ``[1, width, in, out]`` and the
LSTM bias *without* the forget-gate +1 that ``LSTMCell`` adds at run time; the conversions
below are the only place that knows.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, Tuple, Type, Union

import numpy as np
import srsly
import torch

from ..files import finish_folder, start_folder, write_atomic, write_json
from .efml import EFML_KEY, EfmlBiLM
from .errors import WeightsError
from .layout import lstm_prefix as _lstm_prefix
from .layout import read_options
from .model import BiLM, BiLMConfig, OptionsError
from .transformer import TRANSFORMER_KEY, TransformerBiLM

PathLike = Union[str, os.PathLike]
NATIVE_FORMAT = "spacy-elmo.bilm"
NATIVE_VERSION = 1
CONFIG_NAME, WEIGHTS_NAME = "config.json", "weights.pt"
HDF5_SUFFIXES = (".hdf5", ".h5")


def bilm_class(config: BiLMConfig) -> Type[BiLM]:
    """The biLM class that runs ``config``: its options' ``transformer`` or ``efml`` section names
    a subclass (AllenNLP's transformer ELMo, an ELMoForManyLangs model), else the LSTM biLM."""
    if TRANSFORMER_KEY in config.extra:
        return TransformerBiLM
    return EfmlBiLM if EFML_KEY in config.extra else BiLM


def _require_h5py() -> Any:
    try:
        import h5py
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "Reading or writing the original ELMo weight format (options.json + .hdf5) needs h5py: pip install 'spacy-elmo[hdf5]'"
        ) from None
    return h5py


# ----------------------------------------------------------------------------------------------
# original format
# ----------------------------------------------------------------------------------------------


def load_original(options_file: PathLike, weight_file: PathLike, stateful: bool = False) -> BiLM:
    """Build a :class:`BiLM` from the published ``options.json`` + ``weights.hdf5`` pair."""
    h5py = _require_h5py()
    options_file, weight_file = Path(options_file), Path(weight_file)
    try:
        config = BiLMConfig.from_options(read_options(options_file), source=f"options file {options_file}")
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    if not weight_file.is_file():
        raise WeightsError(f"weights file not found: {weight_file}")
    try:
        handle = h5py.File(weight_file, "r")
    except OSError as err:
        raise WeightsError(f"weights file {weight_file} is not a readable HDF5 file (truncated or another format?): {err}") from None
    with handle:
        state = _read_original_state(handle, config, weight_file)
    return model_from_state(config, state, weight_file, stateful=stateful)


def _read_original_state(handle: Any, config: BiLMConfig, weight_file: Path) -> Dict[str, torch.Tensor]:
    def read(name: str, shape: Tuple[int, ...]) -> np.ndarray:
        if name not in handle:
            raise WeightsError(f"weights file {weight_file}: dataset '{name}' is missing")
        try:
            array = np.asarray(handle[name][...], dtype=np.float32)
        except (OSError, TypeError, ValueError) as err:
            raise WeightsError(f"weights file {weight_file}: dataset '{name}' cannot be read ({err}); is the file truncated?") from None
        if array.shape != shape:
            raise WeightsError(f"weights file {weight_file}: dataset '{name}' has shape {array.shape}, but the options imply {shape}")
        if not np.isfinite(array).all():
            raise WeightsError(f"weights file {weight_file}: dataset '{name}' holds NaN or infinite values")
        return array

    t = torch.from_numpy
    state: Dict[str, torch.Tensor] = {}
    char_dim, n_filters, proj, cell = config.char_dim, config.n_filters, config.projection_dim, config.lstm_dim
    if "char_embed" in handle and handle["char_embed"].shape == (config.n_characters, char_dim):
        embed = read("char_embed", (config.n_characters, char_dim))  # already holds the padding row
    else:
        embed = np.concatenate([np.zeros((1, char_dim), np.float32), read("char_embed", (config.n_characters - 1, char_dim))])
    state["token_encoder.char_embedding.weight"] = t(embed)
    for i, (width, count) in enumerate(config.filters):
        kernel = read(f"CNN/W_cnn_{i}", (1, width, char_dim, count))
        state[f"token_encoder.convs.{i}.weight"] = t(np.ascontiguousarray(kernel[0].transpose(2, 1, 0)))
        state[f"token_encoder.convs.{i}.bias"] = t(read(f"CNN/b_cnn_{i}", (count,)))
    for k in range(config.n_highway):
        for ours, theirs in (("carry", "carry"), ("transform", "transform")):
            w = read(f"CNN_high_{k}/W_{theirs}", (n_filters, n_filters))
            state[f"token_encoder.highways.{k}.{ours}.weight"] = t(np.ascontiguousarray(w.T))
            state[f"token_encoder.highways.{k}.{ours}.bias"] = t(read(f"CNN_high_{k}/b_{theirs}", (n_filters,)))
    if n_filters != proj:
        state["token_encoder.projection.weight"] = t(np.ascontiguousarray(read("CNN_proj/W_proj", (n_filters, proj)).T))
        state["token_encoder.projection.bias"] = t(read("CNN_proj/b_proj", (proj,)))
    for layer in range(config.n_layers):
        w_in, w_state, bias, w_proj = [], [], [], []
        for direction in (0, 1):
            prefix = _lstm_prefix(direction, layer)
            kernel = read(f"{prefix}/W_0", (2 * proj, 4 * cell))  # rows: [x ; h_prev]
            w_in.append(kernel[:proj])
            w_state.append(kernel[proj:])
            b = read(f"{prefix}/B", (4 * cell,)).copy()
            b[2 * cell : 3 * cell] += 1.0  # TF LSTMCell's forget_bias, added at run time there
            bias.append(b)
            w_proj.append(read(f"{prefix}/W_P_0", (cell, proj)))
        state[f"lstm.layers.{layer}.w_input"] = t(np.stack(w_in))
        state[f"lstm.layers.{layer}.w_state"] = t(np.stack(w_state))
        state[f"lstm.layers.{layer}.bias"] = t(np.stack(bias))
        state[f"lstm.layers.{layer}.w_proj"] = t(np.stack(w_proj))
    return state


def save_original(model: BiLM, out_dir: PathLike, weights_name: str = "weights.hdf5") -> Tuple[Path, Path]:
    """Write ``options.json`` + an HDF5 file in the original layout (inverse of :func:`load_original`)."""
    if isinstance(model, TransformerBiLM):
        raise WeightsError("a transformer biLM has no options.json + weights.hdf5 layout: write it with trf_export.write_trf_archive")
    h5py = _require_h5py()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    sd = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}
    cell, proj = config.lstm_dim, config.projection_dim
    options_path, weights_path = out / "options.json", out / weights_name
    if options_path.exists():  # options.json is written last: until then the folder reads as incomplete
        options_path.unlink()

    def write(tmp: Path) -> None:
        with h5py.File(tmp, "w") as f:
            f["char_embed"] = sd["token_encoder.char_embedding.weight"][1:]
            for i in range(len(config.filters)):
                f[f"CNN/W_cnn_{i}"] = sd[f"token_encoder.convs.{i}.weight"].transpose(2, 1, 0)[None]
                f[f"CNN/b_cnn_{i}"] = sd[f"token_encoder.convs.{i}.bias"]
            for k in range(config.n_highway):
                for name in ("carry", "transform"):
                    f[f"CNN_high_{k}/W_{name}"] = sd[f"token_encoder.highways.{k}.{name}.weight"].T
                    f[f"CNN_high_{k}/b_{name}"] = sd[f"token_encoder.highways.{k}.{name}.bias"]
            if config.n_filters != proj:
                f["CNN_proj/W_proj"] = sd["token_encoder.projection.weight"].T
                f["CNN_proj/b_proj"] = sd["token_encoder.projection.bias"]
            for layer in range(config.n_layers):
                for direction in (0, 1):
                    prefix = _lstm_prefix(direction, layer)
                    key = f"lstm.layers.{layer}"
                    f[f"{prefix}/W_0"] = np.concatenate([sd[f"{key}.w_input"][direction], sd[f"{key}.w_state"][direction]])
                    b = sd[f"{key}.bias"][direction].copy()
                    b[2 * cell : 3 * cell] -= 1.0
                    f[f"{prefix}/B"] = b
                    f[f"{prefix}/W_P_0"] = sd[f"{key}.w_proj"][direction]

    write_atomic(weights_path, write, by_path=True)
    write_json(options_path, config.to_options())
    return options_path, weights_path


# ----------------------------------------------------------------------------------------------
# native format
# ----------------------------------------------------------------------------------------------


def save_native(model: BiLM, out_dir: PathLike) -> Path:
    """Write ``weights.pt`` then ``config.json`` into ``out_dir`` (created if needed), each
    atomically. ``config.json`` is the manifest: an old one is removed before the weights are
    replaced and the new one, with the weights file's size and SHA-256, is written last, so a
    folder is either a complete model or refused by :func:`load_native` as incomplete or damaged."""
    state = {k: v.detach().cpu().float().contiguous() for k, v in model.state_dict().items()}  # before the folder is touched
    out = start_folder(out_dir, CONFIG_NAME)
    write_atomic(out / WEIGHTS_NAME, lambda handle: torch.save(state, handle))
    manifest = {
        "format": NATIVE_FORMAT,
        "version": NATIVE_VERSION,
        "options": model.config.to_options(),
        "sha256": {WEIGHTS_NAME: file_sha256(out / WEIGHTS_NAME)},
    }
    finish_folder(out, CONFIG_NAME, manifest, [WEIGHTS_NAME])
    return out


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_saved_digest(weights_path: Path, meta: Dict[str, Any]) -> None:
    """``weights.pt`` has the SHA-256 its ``config.json`` recorded at the save (folders saved
    before the digest was recorded have only their size checked)."""
    digests = meta.get("sha256")
    expected = digests.get(WEIGHTS_NAME) if isinstance(digests, dict) else None
    if expected is not None and file_sha256(weights_path) != expected:
        raise WeightsError(
            f"{weights_path} has the size {CONFIG_NAME} records but not its SHA-256: its bytes were damaged or changed "
            f"after the save; save the model again, or restore the folder from a copy"
        )


def load_native(path: PathLike, stateful: bool = False) -> BiLM:
    """Load a directory written by :func:`save_native`."""
    path = Path(path)
    config_path, weights_path = path / CONFIG_NAME, path / WEIGHTS_NAME
    if not config_path.is_file():
        if weights_path.is_file():
            raise WeightsError(
                f"{path} is an incomplete spacy-elmo model: {WEIGHTS_NAME} is there but {CONFIG_NAME} (written last) is missing, so its save was interrupted; save it again"
            )
        raise WeightsError(f"{path} is not a spacy-elmo model directory: {CONFIG_NAME} is missing")
    try:
        meta = srsly.read_json(config_path)
    except ValueError as err:
        raise WeightsError(f"{config_path} is not valid JSON: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != NATIVE_FORMAT:
        raise WeightsError(f"{config_path} is not a spacy-elmo biLM config (expected format '{NATIVE_FORMAT}')")
    if meta.get("version") != NATIVE_VERSION:
        raise WeightsError(f"{config_path}: unsupported format version {meta.get('version')!r} (this release reads {NATIVE_VERSION})")
    try:
        config = BiLMConfig.from_options(meta.get("options"), source=str(config_path))
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    if not weights_path.is_file():
        raise WeightsError(f"weights file not found: {weights_path}")
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a damaged archive
        raise WeightsError(f"weights file {weights_path} cannot be read (truncated or not a torch state dict): {err}") from None
    size = (meta.get("files") or {}).get(WEIGHTS_NAME)
    if size is not None and weights_path.stat().st_size != size:
        raise WeightsError(
            f"{weights_path} has {weights_path.stat().st_size:,} bytes, {CONFIG_NAME} records {size:,}: the folder mixes two saves "
            f"(weights replaced after the config was written); save the model again"
        )
    check_saved_digest(weights_path, meta)
    return model_from_state(config, state, weights_path, stateful=stateful)


def _finite(tensor: torch.Tensor) -> bool:
    """No NaN or infinity in ``tensor``: a finite sum proves it in one pass without a mask; a
    non-finite sum (NaN, infinity, or overflow of huge finite values) is checked exactly."""
    if tensor.numel() == 0 or bool(torch.isfinite(tensor.sum())):
        return True
    return bool(torch.isfinite(tensor).all())


def model_from_state(config: BiLMConfig, state: Any, source: Union[str, Path], stateful: bool = False) -> BiLM:
    """A :class:`BiLM` (eval mode, float32) whose parameters *are* the tensors of ``state``.

    The model is built without allocating or initialising parameters of its own, so loading
    holds one copy of the weights, not two. Missing tensors, wrong shapes and NaN or infinite
    values raise :class:`WeightsError` naming ``source`` (and the tensors).
    """
    if not isinstance(state, dict):
        raise WeightsError(f"weights file {source} does not hold a state dict")
    with torch.device("meta"):
        model = bilm_class(config)(config, stateful=stateful)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise WeightsError(f"weights file {source}: tensors missing: {', '.join(missing[:5])}")
    for name, tensor in expected.items():
        if not isinstance(state[name], torch.Tensor) or tuple(state[name].shape) != tuple(tensor.shape):
            shape = tuple(state[name].shape) if isinstance(state[name], torch.Tensor) else type(state[name]).__name__
            raise WeightsError(f"weights file {source}: '{name}' has shape {shape}, config implies {tuple(tensor.shape)}")
    tensors = {k: state[k].float().contiguous() for k in expected}
    broken = [name for name, tensor in tensors.items() if not _finite(tensor)]
    if broken:
        names = ", ".join(f"'{name}'" for name in broken[:5]) + (f" and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise WeightsError(f"weights file {source}: {names} {'hold' if len(broken) > 1 else 'holds'} NaN or infinite values")
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval()
