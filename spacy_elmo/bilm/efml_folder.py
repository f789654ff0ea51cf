"""An ELMoForManyLangs model folder as its authors ship it: reading it, and converting it once.

The folder holds ``config.json`` (the training settings; its ``config_path`` names the model
config), ``char.dic`` and ``word.dic`` (one ``entry<TAB>id`` a line), ``token_embedder.pkl`` and
``encoder.pkl`` (torch state dicts). Everything is read as their ``Embedder`` reads it: the model
config at ``config_path`` (relative to the folder), else under its file name in the folder, else
the sample config their package ships under that name (:data:`SAMPLE_CONFIGS`); a lexicon line
stripped of surrounding whitespace and split at tabs, an entry that stripping empties read as
``\\u3000`` (the ideographic space), a later line winning over an earlier one.

The ``.pkl`` files are read with ``torch.load(weights_only=True)``, PyTorch's restricted unpickler
(tensors and plain containers; no other object is built and no code runs), and must hold only
named tensors: a file that holds anything else is refused with one line. :func:`convert_efml`
writes the model once in our native format (:func:`.weights.save_native`) with a record of its
source (:data:`RECORD_NAME`: the source folder and each file's size and SHA-256).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from ..files import write_json
from .efml import EFML_KEY, MIN_CHARS, EfmlBiLM, vocab_from_options
from .errors import WeightsError
from .model import BiLMConfig, OptionsError
from .weights import model_from_state, save_native

PathLike = Union[str, "os.PathLike[str]"]
SETTINGS_NAME, CHAR_DIC, WORD_DIC = "config.json", "char.dic", "word.dic"
ENCODER_PKL, TOKEN_EMBEDDER_PKL = "encoder.pkl", "token_embedder.pkl"
RECORD_NAME = "source.json"
RECORD_FORMAT = "spacy-elmo.efml-source"
SOURCE_FORMAT = "elmoformanylangs"

# The model config their package ships (both names hold the same shape): the published models'
# config_path names one of them, and their folders do not always hold it.
_SAMPLE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
SAMPLE_CONFIGS: Dict[str, Dict[str, Any]] = {"cnn_0_100_512_4096_sample.json": _SAMPLE, "cnn_50_100_512_4096_sample.json": _SAMPLE}


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise WeightsError(f"{what} {path} cannot be read as JSON: {err}") from None


def is_efml_folder(path: PathLike) -> bool:
    """True for a folder whose ``config.json`` is ELMoForManyLangs' (it names a ``config_path``)."""
    settings = Path(path) / SETTINGS_NAME
    if not settings.is_file():
        return False
    try:
        data = json.loads(settings.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "config_path" in data and "format" not in data


def find_model_config(folder: PathLike, within: Optional[PathLike] = None) -> Tuple[Dict[str, Any], Optional[Path], str]:
    """The model config of ``folder``: ``(config, its file or None for a shipped sample, a label)``.
    ``within``: a folder (an unpacked archive) that ``config_path`` may not lead out of: a path
    that resolves outside it is never read (the file of its name in ``folder``, or the sample
    config of that name, is used instead; neither there: refused)."""
    folder = Path(folder)
    settings = _read_json(folder / SETTINGS_NAME, "ELMoForManyLangs settings")
    named = settings.get("config_path") if isinstance(settings, dict) else None
    if not isinstance(named, str) or not named:
        raise WeightsError(f"{folder / SETTINGS_NAME}: 'config_path' (the model config's file name) is missing or not a string")
    joined = Path(os.path.join(folder, named))
    outside = within is not None and not joined.resolve().is_relative_to(Path(within).resolve())
    for candidate in ([] if outside else [joined]) + [folder / os.path.basename(named)]:
        if candidate.is_file():
            config = _read_json(candidate, "ELMoForManyLangs model config")
            if not isinstance(config, dict):
                raise WeightsError(f"ELMoForManyLangs model config {candidate} must hold a JSON object")
            return config, candidate, str(candidate)
    sample = SAMPLE_CONFIGS.get(os.path.basename(named))
    if sample is None and outside:
        raise WeightsError(f"{folder}: config_path {named!r} in {SETTINGS_NAME} resolves outside the archive: refused, nothing read there")
    if sample is None:
        raise WeightsError(
            f"{folder}: the model config {named!r} (config_path in {SETTINGS_NAME}) is neither in the folder nor a sample config"
        )
    return json.loads(json.dumps(sample)), None, f"the sample config {os.path.basename(named)}"


def read_lexicon(path: Path) -> Dict[str, int]:
    """``entry -> id`` from a ``.dic`` file, read as their ``Embedder`` reads it (module docstring)."""
    if not path.is_file():
        raise WeightsError(f"ELMoForManyLangs lexicon not found: {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise WeightsError(f"{path} is not UTF-8 text: {err}") from None
    table: Dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):  # the line breaks their codecs reader splits at
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            entry, value = fields
            table[entry] = int(value)
        except ValueError:
            raise WeightsError(f"{path} line {number}: expected 'entry<TAB>id', got {line[:60]!r}") from None
    return table


def load_tensors(path: Path) -> Dict[str, torch.Tensor]:
    """The named tensors of a ``.pkl`` file, unpickled with PyTorch's restricted unpickler; a file
    that holds anything but named floating-point tensors is refused (one-line :class:`WeightsError`)."""
    if not path.is_file():
        raise WeightsError(f"ELMoForManyLangs weights not found: {path}")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # the restricted unpickler's verdict, a long text: its one telling line
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        objects = [line for line in lines if "GLOBAL" in line]
        if objects:
            raise WeightsError(f"{path} holds more than tensors, refused (only tensors are read from model files): {objects[0]}") from None
        why = next((line for line in lines if "Unsupported" in line), lines[0] if lines else "")
        raise WeightsError(f"{path} cannot be read as a torch file of tensors (truncated or another format?): {why}") from None
    except Exception as err:  # torch raises several types for a damaged or foreign file
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise WeightsError(f"{path} cannot be read as a torch file of tensors (truncated or another format?): {why}") from None
    if not isinstance(loaded, dict):
        raise WeightsError(f"{path} holds a {type(loaded).__name__}, not a state dict of named tensors: refused")
    for name, value in loaded.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise WeightsError(f"{path} holds {type(value).__name__} {name!r} beside its tensors: refused (only tensors are read)")
        if not value.is_floating_point():
            raise WeightsError(f"{path}: tensor {name!r} holds {value.dtype} values, not floating-point weights: refused")
    return dict(loaded)


def _number(section: Dict[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise WeightsError(f"{where}: '{key}' is missing")
    return section[key]


def model_options(model_config: Dict[str, Any], label: str) -> Dict[str, Any]:
    """Our options (``lstm``, ``char_cnn`` and the architecture part of ``efml``) for their model config."""
    encoder, embedder = model_config.get("encoder"), model_config.get("token_embedder")
    if not isinstance(encoder, dict) or not isinstance(embedder, dict):
        raise WeightsError(f"{label}: the 'encoder' and 'token_embedder' sections are required")
    if str(encoder.get("name", "")).lower() != "elmo":
        raise WeightsError(f"{label}: encoder {encoder.get('name')!r} is not supported (only their 'elmo' biLM encoder)")
    if str(embedder.get("name", "")).lower() != "cnn":
        raise WeightsError(f"{label}: token_embedder {embedder.get('name')!r} is not supported (only their 'cnn' token embedder)")
    char_dim = _number(embedder, "char_dim", f"{label} token_embedder")
    if not isinstance(char_dim, int) or isinstance(char_dim, bool) or char_dim <= 0:
        raise WeightsError(f"{label}: token_embedder.char_dim is {char_dim!r}: models without the character CNN are not supported")
    where = f"{label} encoder"
    return {
        "lstm": {
            "dim": _number(encoder, "dim", where),
            "projection_dim": _number(encoder, "projection_dim", where),
            "n_layers": _number(encoder, "n_layers", where),
            "cell_clip": encoder.get("cell_clip"),
            "proj_clip": encoder.get("proj_clip"),
            "use_skip_connections": True,  # their biLM adds each layer's input from the second layer on
        },
        "char_cnn": {
            "embedding": {"dim": char_dim},
            "filters": _number(embedder, "filters", f"{label} token_embedder"),
            "n_highway": embedder.get("n_highway", 0),
            "activation": embedder.get("activation", "relu"),
        },
        EFML_KEY: {
            "format": SOURCE_FORMAT,
            "max_characters_per_token": _number(embedder, "max_characters_per_token", f"{label} token_embedder"),
            "word_dim": embedder.get("word_dim", 0),
        },
    }


def _config(options: Dict[str, Any], label: str) -> BiLMConfig:
    try:
        config = BiLMConfig.from_options(options, source=label)
        if options[EFML_KEY].get("chars") is not None:
            vocab_from_options(options[EFML_KEY], source=label)
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    widest = max(width for width, _ in config.filters)
    max_chars = options[EFML_KEY]["max_characters_per_token"]
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < MIN_CHARS:
        raise WeightsError(f"{label}: max_characters_per_token must be a whole number >= {MIN_CHARS}, got {max_chars!r}")
    if max_chars < widest:
        raise WeightsError(f"{label}: max_characters_per_token ({max_chars}) is narrower than the widest filter ({widest})")
    return config


def efml_architecture(model_config: Dict[str, Any], label: str) -> BiLMConfig:
    """The :class:`BiLMConfig` of their ``model_config`` without lexicons: the architecture a model
    of that config has, whatever its lexicons hold (a published model's, known by name)."""
    return _config(model_options(model_config, label), label)


def efml_config(folder: PathLike, lexicons: bool = True, within: Optional[PathLike] = None) -> BiLMConfig:
    """The :class:`BiLMConfig` of an ELMoForManyLangs folder: with ``lexicons`` (to build the
    model) the two ``.dic`` files are read into its ``efml`` section; without, the architecture
    only. ``within``: see :func:`find_model_config`."""
    folder = Path(folder)
    model_config, _, label = find_model_config(folder, within)
    options = model_options(model_config, label)
    if lexicons:
        section = options[EFML_KEY]
        chars = read_lexicon(folder / CHAR_DIC)
        section.update(chars=chars, char_rows=len(chars))  # their embedding has one row per entry
        if isinstance(section["word_dim"], int) and section["word_dim"] > 0:
            words = read_lexicon(folder / WORD_DIC)
            section.update(words=words, word_rows=len(words))
    return _config(options, label)


def check_efml_folder(folder: PathLike, within: Optional[PathLike] = None) -> None:
    """Check an ELMoForManyLangs folder without reading its weights: the configs, and that the
    lexicons and both ``.pkl`` files are there (one-line :class:`WeightsError`). ``within``: see
    :func:`find_model_config`."""
    folder = Path(folder)
    config = efml_config(folder, lexicons=False, within=within)
    names = [CHAR_DIC, TOKEN_EMBEDDER_PKL, ENCODER_PKL] + ([WORD_DIC] if config.extra[EFML_KEY]["word_dim"] > 0 else [])
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise WeightsError(f"{folder}: an ELMoForManyLangs model folder lacks {', '.join(missing)}")


def _reorder_gates(t: torch.Tensor, cell: int) -> torch.Tensor:
    """Their gate blocks (input, forget, cell input, output) in our order (i, j, f, o) along dim 0."""
    return torch.cat([t[:cell], t[2 * cell : 3 * cell], t[cell : 2 * cell], t[3 * cell :]])


def state_from_efml(
    embedder: Dict[str, torch.Tensor], encoder: Dict[str, torch.Tensor], config: BiLMConfig, folder: Path
) -> Dict[str, torch.Tensor]:
    """Our state dict for :class:`EfmlBiLM` from their two state dicts (names mapped, the LSTM's
    ``y = x W^T`` weights transposed to our ``x W`` and its gate blocks reordered)."""
    section = config.extra[EFML_KEY]
    cell, proj = config.lstm_dim, config.projection_dim
    names = {
        "char_emb_layer.embedding.weight": "char_embedding.weight",
        "projection.weight": "projection.weight",
        "projection.bias": "projection.bias",
    }
    if section["word_dim"] > 0:
        names["word_emb_layer.embedding.weight"] = "word_embedding.weight"
    for i in range(len(config.filters)):
        names.update({f"convolutions.{i}.weight": f"convs.{i}.weight", f"convolutions.{i}.bias": f"convs.{i}.bias"})
    for k in range(config.n_highway):
        names.update({f"highways._layers.{k}.weight": f"highways.{k}.weight", f"highways._layers.{k}.bias": f"highways.{k}.bias"})
    _same_names(embedder, names, folder / TOKEN_EMBEDDER_PKL)
    for theirs, dic, rows in (("char_emb_layer", CHAR_DIC, "char_rows"), ("word_emb_layer", WORD_DIC, "word_rows")):
        tensor = embedder.get(f"{theirs}.embedding.weight")
        if tensor is not None and tensor.shape[0] != section[rows]:
            raise WeightsError(
                f"{folder / TOKEN_EMBEDDER_PKL}: {theirs}.embedding.weight has {tensor.shape[0]} rows, but {dic} names {section[rows]} entries"
            )
    state = {f"token_encoder.{ours}": embedder[theirs] for theirs, ours in names.items()}

    expected: Dict[str, Tuple[int, ...]] = {}
    for layer in range(config.n_layers):
        for name in ("forward", "backward"):
            prefix = f"{name}_layer_{layer}"
            expected[f"{prefix}.input_linearity.weight"] = (4 * cell, proj)
            expected[f"{prefix}.state_linearity.weight"] = (4 * cell, proj)
            expected[f"{prefix}.state_linearity.bias"] = (4 * cell,)
            expected[f"{prefix}.state_projection.weight"] = (proj, cell)
    _same_names(encoder, {name: name for name in expected}, folder / ENCODER_PKL)
    for name, shape in expected.items():
        if tuple(encoder[name].shape) != shape:
            raise WeightsError(f"{folder / ENCODER_PKL}: '{name}' has shape {tuple(encoder[name].shape)}, the model config implies {shape}")
    for layer in range(config.n_layers):
        pairs = [f"{name}_layer_{layer}" for name in ("forward", "backward")]
        state[f"lstm.layers.{layer}.w_input"] = torch.stack(
            [_reorder_gates(encoder[f"{p}.input_linearity.weight"], cell).t() for p in pairs]
        )
        state[f"lstm.layers.{layer}.w_state"] = torch.stack(
            [_reorder_gates(encoder[f"{p}.state_linearity.weight"], cell).t() for p in pairs]
        )
        state[f"lstm.layers.{layer}.bias"] = torch.stack([_reorder_gates(encoder[f"{p}.state_linearity.bias"], cell) for p in pairs])
        state[f"lstm.layers.{layer}.w_proj"] = torch.stack([encoder[f"{p}.state_projection.weight"].t() for p in pairs])
    return {name: tensor.contiguous() for name, tensor in state.items()}


def _same_names(found: Dict[str, torch.Tensor], names: Dict[str, str], path: Path) -> None:
    missing = sorted(set(names) - set(found))
    extra = sorted(set(found) - set(names))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing[:4])}"] if missing else []) + ([f"holds unexpected {', '.join(extra[:4])}"] if extra else [])
        raise WeightsError(f"{path} does not match its model config: it {' and '.join(parts)}")


def load_efml(folder: PathLike, stateful: bool = False, within: Optional[PathLike] = None) -> EfmlBiLM:
    """An :class:`EfmlBiLM` (eval mode, float32) straight from the authors' folder (``within``:
    see :func:`find_model_config`)."""
    folder = Path(folder)
    check_efml_folder(folder, within)
    config = efml_config(folder, within=within)
    state = state_from_efml(load_tensors(folder / TOKEN_EMBEDDER_PKL), load_tensors(folder / ENCODER_PKL), config, folder)
    model = model_from_state(config, state, folder, stateful=stateful)
    assert isinstance(model, EfmlBiLM)  # the config's efml section chooses the class
    return model


def source_files(folder: PathLike, within: Optional[PathLike] = None) -> List[Path]:
    """The files a model is read from: settings, model config (when a file), lexicons, weights."""
    folder = Path(folder)
    _, config_file, _ = find_model_config(folder, within)
    config = efml_config(folder, lexicons=False, within=within)
    names = [SETTINGS_NAME, CHAR_DIC] + ([WORD_DIC] if config.extra[EFML_KEY]["word_dim"] > 0 else []) + [TOKEN_EMBEDDER_PKL, ENCODER_PKL]
    files = [folder / name for name in names]
    return files[:1] + ([config_file] if config_file is not None else []) + files[1:]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe_source(folder: PathLike, within: Optional[PathLike] = None) -> Dict[str, Any]:
    """The record of a source folder: its path and, per file read, its size, change time and SHA-256."""
    folder = Path(folder).resolve()
    files: Dict[str, Any] = {}
    for path in source_files(folder, within):
        stat = path.stat()
        key = os.path.relpath(path, folder) if path.is_relative_to(folder) else str(path)
        files[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
    _, config_file, label = find_model_config(folder, within)
    return {
        "format": RECORD_FORMAT,
        "version": 1,
        "source_format": SOURCE_FORMAT,
        "source": str(folder),
        "model_config": label,
        "files": files,
    }


def convert_efml(folder: PathLike, out_dir: PathLike, within: Optional[PathLike] = None) -> Path:
    """Write the model of an ELMoForManyLangs folder in our native format into ``out_dir``
    (``config.json`` + ``weights.pt``, read by :func:`.weights.load_native`), with
    :data:`RECORD_NAME` naming the source folder and its files' digests. ``within``: the unpacked
    archive ``config_path`` may not lead out of (:func:`find_model_config`). Returns ``out_dir``."""
    record = describe_source(folder, within)
    out = save_native(load_efml(folder, within=within), out_dir)
    write_json(out / RECORD_NAME, record)
    return out


__all__ = [
    "RECORD_NAME",
    "SAMPLE_CONFIGS",
    "check_efml_folder",
    "convert_efml",
    "describe_source",
    "efml_architecture",
    "efml_config",
    "find_model_config",
    "is_efml_folder",
    "load_efml",
    "load_tensors",
    "read_lexicon",
    "source_files",
    "state_from_efml",
]
