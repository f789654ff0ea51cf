"""AllenNLP's transformer ELMo as it is published: its unpacked archive folder, read and converted.

The folder holds ``config.json`` (the training configuration), ``weights.th`` (a torch state dict,
in the zip format or the one before PyTorch 1.6) and ``vocabulary/`` (the training vocabulary,
which only the softmax used). The configuration is read as data, never run: both shapes occur,
allennlp-models 2.x's ``language_model`` with ``bidirectional: true`` and 2019's
``bidirectional-language-model``; a key this reader does not know, in a section that shapes the
model, is refused with one line (so is a value that would change the outputs, such as a
projection before the highways). The weights are read with ``torch.load(weights_only=True)``
(tensors only); the softmax becomes the converted model's LM head. :func:`convert_trf` writes the model in our
native format with a record of its source (:data:`.efml_folder.RECORD_NAME`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from ..files import write_atomic, write_json
from .characters import MAX_CHARS, N_CHARACTERS
from .efml_folder import RECORD_NAME, load_tensors, sha256_file
from .errors import WeightsError
from .model import BiLMConfig, OptionsError
from .transformer import HEADS, TRANSFORMER_KEY, TransformerBiLM
from .weights import model_from_state, save_native

PathLike = Union[str, "os.PathLike[str]"]
CONFIG_JSON, WEIGHTS_TH, VOCABULARY = "config.json", "weights.th", "vocabulary"
RECORD_FORMAT = "spacy-elmo.trf-source"
SOURCE_FORMAT = "allennlp-transformer-elmo"
MODEL_TYPES = ("language_model", "bidirectional-language-model")
CONTEXTUALIZER = "bidirectional_language_model_transformer"
#: AllenNLP's fixed table of positions (``PositionalEncoding``'s ``max_len``)
POSITIONS = 5000
#: the LM head beside a converted model, in the layout of a model trained here
HEAD_SOFTMAX, HEAD_VOCAB = "softmax.pt", "vocab.txt"

# the keys each section may hold; those that only training reads are accepted and not used
_TOP = {
    "dataset_reader", "validation_dataset_reader", "train_data_path", "validation_data_path", "test_data_path",
    "evaluate_on_test", "vocabulary", "iterator", "validation_iterator", "data_loader", "validation_data_loader",
    "trainer", "model", "distributed", "random_seed", "numpy_seed", "pytorch_seed", "datasets_for_vocab_creation",
}  # fmt: skip
_READER = {
    "type", "tokenizer", "token_indexers", "max_sequence_length", "start_tokens", "end_tokens", "lazy",
    "max_instances", "manual_distributed_sharding", "manual_multiprocess_sharding", "serialization_dir",
}  # fmt: skip
_INDEXER = {"type", "namespace", "token_min_padding_length"}
_MODEL = {
    "type",
    "bidirectional",
    "text_field_embedder",
    "contextualizer",
    "dropout",
    "num_samples",
    "sparse_embeddings",
    "initializer",
    "regularizer",
}
_EMBEDDERS = {"type", "token_embedders", "allow_unmatched_keys"}
_CHARACTERS = {"type", "embedding", "encoder", "dropout"}
_EMBEDDING = {
    "type",
    "num_embeddings",
    "embedding_dim",
    "vocab_namespace",
    "trainable",
    "sparse",
    "padding_index",
    "scale_grad_by_freq",
    "norm_type",
}
_ENCODER = {"type", "embedding_dim", "filters", "num_highway", "projection_dim", "activation", "projection_location", "do_layer_norm"}
_CONTEXT = {"type", "input_dim", "hidden_dim", "num_layers", "dropout", "input_dropout", "return_all_layers"}
#: tensors of the archive that the embedder does not use
_UNUSED = ("_softmax_loss.", "_last_average_loss")


def _section(parent: Dict[str, Any], key: str, known: set, where: str, source: str) -> Dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise WeightsError(f"{source}: {where} must be an object, got {type(value).__name__}")
    _known(value, known, where, source)
    return value


def _known(section: Dict[str, Any], known: set, where: str, source: str) -> None:
    unknown = sorted(k for k in section if k not in known)
    if unknown:
        raise WeightsError(f"{source}: {where} holds {', '.join(map(repr, unknown[:4]))}, which this reader does not know: refused")


def _whole(section: Dict[str, Any], key: str, where: str, source: str) -> int:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WeightsError(f"{source}: {where}.{key} must be a whole number >= 1, got {value!r}")
    return value


def _require(value: Any, expected: Any, where: str, source: str, why: str = "") -> None:
    if value != expected:
        raise WeightsError(f"{source}: {where} is {value!r}, this reader reads {expected!r}{' (' + why + ')' if why else ''}: refused")


def trf_options(settings: Any, source: str = CONFIG_JSON) -> Tuple[Dict[str, Any], str]:
    """Our options (see :mod:`.transformer`) and the character embedder's name, from an
    archive's ``config.json`` read as data (one-line :class:`WeightsError` for what it refuses)."""
    if not isinstance(settings, dict):
        raise WeightsError(f"{source}: expected a JSON object, got {type(settings).__name__}")
    _known(settings, _TOP, "the configuration", source)
    model = _section(settings, "model", _MODEL, "model", source)
    if model.get("type") not in MODEL_TYPES:
        raise WeightsError(f"{source}: model.type is {model.get('type')!r}, not a transformer ELMo ({' or '.join(MODEL_TYPES)})")
    if model["type"] == "language_model":
        _require(model.get("bidirectional"), True, "model.bidirectional", source, "a biLM")
    elif "bidirectional" in model:
        raise WeightsError(f"{source}: model.bidirectional is not a setting of bidirectional-language-model: refused")
    embedders = _section(model, "text_field_embedder", _EMBEDDERS, "model.text_field_embedder", source)
    if embedders.get("type", "basic") != "basic":
        raise WeightsError(f"{source}: model.text_field_embedder.type is {embedders['type']!r}, this reader reads 'basic': refused")
    table = embedders.get("token_embedders")
    if not isinstance(table, dict):
        raise WeightsError(f"{source}: model.text_field_embedder.token_embedders must be an object")
    used = [name for name, e in table.items() if not (isinstance(e, dict) and e.get("type") == "empty" and len(e) == 1)]
    if len(used) != 1:
        raise WeightsError(f"{source}: the embedder needs exactly one non-empty token embedder, found {len(used)} ({', '.join(used)})")
    name = used[0]
    where = f"model.text_field_embedder.token_embedders.{name}"
    chars = _section(table, name, _CHARACTERS, where, source)
    _require(chars.get("type"), "character_encoding", f"{where}.type", source)
    embedding = _section(chars, "embedding", _EMBEDDING, f"{where}.embedding", source)
    _require(embedding.get("type", "embedding"), "embedding", f"{where}.embedding.type", source)
    _require(embedding.get("num_embeddings"), N_CHARACTERS, f"{where}.embedding.num_embeddings", source, "ELMo's character ids")
    encoder = _section(chars, "encoder", _ENCODER, f"{where}.encoder", source)
    _require(encoder.get("type"), "cnn-highway", f"{where}.encoder.type", source)
    _require(encoder.get("projection_location", "after_highway"), "after_highway", f"{where}.encoder.projection_location", source)
    _require(encoder.get("do_layer_norm", False), True, f"{where}.encoder.do_layer_norm", source, "the transformer ELMo's token layer norm")
    char_dim = _whole(embedding, "embedding_dim", f"{where}.embedding", source)
    _require(encoder.get("embedding_dim"), char_dim, f"{where}.encoder.embedding_dim", source, "the character embedding's width")
    context = _section(model, "contextualizer", _CONTEXT, "model.contextualizer", source)
    _require(context.get("type"), CONTEXTUALIZER, "model.contextualizer.type", source)
    width = _whole(context, "input_dim", "model.contextualizer", source)
    _require(
        _whole(encoder, "projection_dim", f"{where}.encoder", source),
        width,
        f"{where}.encoder.projection_dim",
        source,
        "the contextualizer's input_dim",
    )
    if width % HEADS:
        raise WeightsError(f"{source}: model.contextualizer.input_dim {width} is not a multiple of the {HEADS} attention heads")
    _indexer(settings, name, source)
    options = {
        "lstm": {
            "dim": _whole(context, "hidden_dim", "model.contextualizer", source),
            "projection_dim": width,
            "n_layers": _whole(context, "num_layers", "model.contextualizer", source),
            "cell_clip": None,
            "proj_clip": None,
            "use_skip_connections": False,
        },
        "char_cnn": {
            "embedding": {"dim": char_dim},
            "filters": encoder.get("filters"),
            "n_highway": encoder.get("num_highway"),
            "n_characters": N_CHARACTERS,
            "max_characters_per_token": MAX_CHARS,
            "activation": encoder.get("activation", "relu"),
        },
        TRANSFORMER_KEY: {"heads": HEADS, "positions": POSITIONS, "token_layer_norm": True},
    }
    highway = options["char_cnn"]["n_highway"]
    if isinstance(highway, bool) or not isinstance(highway, int) or highway < 0:
        raise WeightsError(f"{source}: {where}.encoder.num_highway must be a whole number >= 0, got {highway!r}")
    try:
        BiLMConfig.from_options(options, source=source)
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    return options, name


def _indexer(settings: Dict[str, Any], name: str, source: str) -> None:
    """The character embedder's token indexer must be ELMo's, as the embedder reads its ids."""
    reader = _section(settings, "dataset_reader", _READER, "dataset_reader", source)
    indexers = reader.get("token_indexers")
    if not isinstance(indexers, dict) or not isinstance(indexers.get(name), dict):
        raise WeightsError(f"{source}: dataset_reader.token_indexers.{name} (the character indexer) is missing")
    indexer = _section(indexers, name, _INDEXER, f"dataset_reader.token_indexers.{name}", source)
    _require(indexer.get("type"), "elmo_characters", f"dataset_reader.token_indexers.{name}.type", source, "ELMo's characters")


def read_settings(folder: PathLike) -> Dict[str, Any]:
    """The archive's ``config.json`` as data."""
    path = Path(folder) / CONFIG_JSON
    if not path.is_file():
        raise WeightsError(f"{folder}: {CONFIG_JSON} is missing: not a transformer ELMo archive folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise WeightsError(f"{path} is not valid JSON: {err}") from None


def is_trf_folder(path: PathLike) -> bool:
    """True for a folder that holds ``config.json`` and ``weights.th`` and whose model is a
    transformer biLM (cheap: the configuration's model type and contextualizer only)."""
    path = Path(path)
    if not (path / CONFIG_JSON).is_file() or not (path / WEIGHTS_TH).is_file():
        return False
    try:
        model = json.loads((path / CONFIG_JSON).read_text(encoding="utf-8")).get("model", {})
        return model.get("type") in MODEL_TYPES and model.get("contextualizer", {}).get("type") == CONTEXTUALIZER
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


def trf_config(folder: PathLike) -> BiLMConfig:
    """The architecture of the transformer ELMo in ``folder`` (its configuration only)."""
    options, _ = trf_options(read_settings(folder), str(Path(folder) / CONFIG_JSON))
    return BiLMConfig.from_options(options)


def _names(config: BiLMConfig, embedder: str) -> Dict[str, str]:
    """Our state dict's names -> the archive's."""
    chars = f"_text_field_embedder.token_embedder_{embedder}."
    names = {"token_encoder.char_embedding.weight": chars + "_embedding._module.weight"}
    enc = chars + "_encoder._module."
    for i in range(len(config.filters)):
        for kind in ("weight", "bias"):
            names[f"token_encoder.convs.{i}.{kind}"] = f"{enc}char_conv_{i}.{kind}"
    for kind in ("weight", "bias"):
        names[f"token_encoder.projection.{kind}"] = f"{enc}_projection.{kind}"
    for kind in ("gamma", "beta"):
        names[f"token_encoder.layer_norm.{kind}"] = f"{enc}_layer_norm.{kind}"
    for ours, theirs in (("forward_stack", "_forward_transformer"), ("backward_stack", "_backward_transformer")):
        stack, source = f"transformer.{ours}.", f"_contextualizer.{theirs}."
        for kind in ("gamma", "beta"):
            names[f"{stack}final_norm.{kind}"] = f"{source}norm.{kind}"
        for i in range(config.n_layers):
            block, layer = f"{stack}blocks.{i}.", f"{source}layers.{i}."
            for kind in ("weight", "bias"):
                for j in range(4):
                    names[f"{block}attention.projections.{j}.{kind}"] = f"{layer}self_attn.linears.{j}.{kind}"
                names[f"{block}ff_in.{kind}"] = f"{layer}feed_forward.w_1.{kind}"
                names[f"{block}ff_out.{kind}"] = f"{layer}feed_forward.w_2.{kind}"
            for kind in ("gamma", "beta"):
                names[f"{block}attention_norm.{kind}"] = f"{layer}sublayer.0.norm.{kind}"
                names[f"{block}ff_norm.{kind}"] = f"{layer}sublayer.1.norm.{kind}"
    return names


def highway_names(config: BiLMConfig, embedder: str) -> List[str]:
    """The archive's fused highway tensors (``Linear(F, 2F)``: the transform rows, then the gate rows)."""
    enc = f"_text_field_embedder.token_embedder_{embedder}._encoder._module._highways._layers."
    return [f"{enc}{k}.{kind}" for k in range(config.n_highway) for kind in ("weight", "bias")]


def state_from_trf(found: Dict[str, torch.Tensor], config: BiLMConfig, embedder: str, source: Path) -> Dict[str, torch.Tensor]:
    """Our state dict from the archive's tensors: renamed, the fused highways split (gates negated), the
    positions' ``[1, N, P]`` table as ``[N, P]``; a missing or unexpected tensor is refused."""
    names = _names(config, embedder)
    position = "_contextualizer._position.positional_encoding"
    wanted = set(names.values()) | set(highway_names(config, embedder)) | {position}
    missing = sorted(wanted - set(found))
    extra = sorted(k for k in found if k not in wanted and not k.startswith(_UNUSED))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing[:4])}"] if missing else []) + ([f"holds unexpected {', '.join(extra[:4])}"] if extra else [])
        raise WeightsError(f"{source} does not match its configuration: it {' and '.join(parts)}")
    state = {ours: found[theirs] for ours, theirs in names.items()}
    width = config.n_filters
    for k in range(config.n_highway):
        enc = f"_text_field_embedder.token_embedder_{embedder}._encoder._module._highways._layers.{k}."
        weight, bias = found[enc + "weight"], found[enc + "bias"]
        if tuple(weight.shape) != (2 * width, width) or tuple(bias.shape) != (2 * width,):
            raise WeightsError(
                f"{source}: highway layer {k} has shape {tuple(weight.shape)}, the configuration implies {(2 * width, width)}"
            )
        # their gate g keeps the input (g * x + (1 - g) * relu(A x)); ours keeps the transform: the gate rows negated
        state[f"token_encoder.highways.{k}.transform.weight"], state[f"token_encoder.highways.{k}.carry.weight"] = (
            weight[:width],
            -weight[width:],
        )
        state[f"token_encoder.highways.{k}.transform.bias"], state[f"token_encoder.highways.{k}.carry.bias"] = bias[:width], -bias[width:]
    table = found[position]
    if table.dim() != 3 or table.shape[0] != 1 or table.shape[2] != config.projection_dim:
        raise WeightsError(f"{source}: {position} has shape {tuple(table.shape)}, expected (1, positions, {config.projection_dim})")
    state["transformer.positions"] = table[0]
    return state


def _read(folder: Path) -> Tuple[Dict[str, Any], str, Dict[str, torch.Tensor]]:
    """The options, the character embedder's name and the tensors of ``weights.th``."""
    options, embedder = trf_options(read_settings(folder), str(folder / CONFIG_JSON))
    weights = folder / WEIGHTS_TH
    if not weights.is_file():
        raise WeightsError(f"{folder}: {WEIGHTS_TH} is missing: not a transformer ELMo archive folder")
    found = load_tensors(weights)
    positions = found.get("_contextualizer._position.positional_encoding")
    if isinstance(positions, torch.Tensor) and positions.dim() == 3:
        options[TRANSFORMER_KEY]["positions"] = int(positions.shape[1])  # the table the archive holds
    return options, embedder, found


def _model(folder: Path, options: Dict[str, Any], embedder: str, found: Dict[str, torch.Tensor]) -> TransformerBiLM:
    config = BiLMConfig.from_options(options, source=str(folder / CONFIG_JSON))
    weights = folder / WEIGHTS_TH
    model = model_from_state(config, state_from_trf(found, config, embedder, weights), weights)
    assert isinstance(model, TransformerBiLM)  # the options' transformer section chooses the class
    return model


def load_trf(folder: PathLike) -> TransformerBiLM:
    """A :class:`TransformerBiLM` (eval mode, float32) straight from an unpacked archive folder."""
    folder = Path(folder)
    return _model(folder, *_read(folder))


def lm_head_of(folder: Path, found: Dict[str, torch.Tensor], width: int) -> Optional[Tuple[List[str], torch.Tensor, torch.Tensor]]:
    """The archive's softmax as an LM head ``(tokens, weight [V, P], bias [V])``, or None when it
    holds none. Their loss reads row ``r`` for vocabulary id ``r + 1`` (id 0 is padding), which is
    line ``r`` of ``vocabulary/tokens.txt``; a dense (``softmax_w``) or sparse (``softmax_w.weight``)
    softmax, as ``sparse_embeddings`` stored it."""
    weight = found.get("_softmax_loss.softmax_w", found.get("_softmax_loss.softmax_w.weight"))
    bias = found.get("_softmax_loss.softmax_b", found.get("_softmax_loss.softmax_b.weight"))
    tokens_file = folder / VOCABULARY / "tokens.txt"
    if weight is None or bias is None or not tokens_file.is_file():
        return None
    bias = bias.reshape(-1)
    tokens = tokens_file.read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    if weight.dim() != 2 or weight.shape[1] != width or len(bias) != weight.shape[0] or weight.shape[0] < len(tokens):
        raise WeightsError(f"{folder}: the softmax {tuple(weight.shape)} does not fit {len(tokens):,} vocabulary tokens of width {width}")
    return tokens, weight[: len(tokens)].float().contiguous(), bias[: len(tokens)].float().contiguous()


def source_files(folder: PathLike) -> List[Path]:
    """The files a model is read from."""
    return [Path(folder) / CONFIG_JSON, Path(folder) / WEIGHTS_TH]


def describe_source(folder: PathLike, label: Optional[str] = None) -> Dict[str, Any]:
    """The record of a source folder: its path (or ``label``) and each file's size, change time and SHA-256."""
    folder = Path(folder).resolve()
    files = {}
    for path in source_files(folder):
        stat = path.stat()
        files[path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
    return {"format": RECORD_FORMAT, "version": 1, "source_format": SOURCE_FORMAT, "source": label or str(folder), "files": files}


def convert_trf(folder: PathLike, out_dir: PathLike, label: Optional[str] = None) -> Path:
    """Write the transformer ELMo of an archive folder in our native format into ``out_dir``, its
    softmax as an LM head (:data:`HEAD_SOFTMAX`, :data:`HEAD_VOCAB`: :func:`lm_head_of`) and
    :data:`RECORD_NAME` naming its source and its files' digests. Returns ``out_dir``."""
    folder = Path(folder)
    record = describe_source(folder, label)
    options, embedder, found = _read(folder)
    model = _model(folder, options, embedder, found)
    head = lm_head_of(folder, found, model.config.projection_dim)
    out = save_native(model, out_dir)
    if head is not None:  # the LM head, in the layout of a model trained here
        tokens, weight, bias = head
        write_atomic(out / HEAD_SOFTMAX, lambda handle: torch.save({"weight": weight, "bias": bias}, handle))
        write_atomic(out / HEAD_VOCAB, lambda handle: handle.write("".join(t + "\n" for t in tokens).encode("utf-8")))
    write_json(out / RECORD_NAME, record)
    return out


__all__ = [
    "CONFIG_JSON",
    "POSITIONS",
    "WEIGHTS_TH",
    "convert_trf",
    "describe_source",
    "is_trf_folder",
    "lm_head_of",
    "load_trf",
    "read_settings",
    "source_files",
    "state_from_trf",
    "trf_config",
    "trf_options",
]
