"""A transformer biLM written in AllenNLP's transformer ELMo archive format.

The inverse of :mod:`.trf_folder`: ``config.json`` (allennlp-models 2.x's ``language_model`` with
``bidirectional: true``, or 2019's ``bidirectional-language-model``), ``weights.th`` under
AllenNLP's module names (the highways fused back into one ``Linear(F, 2F)`` with the gate rows
negated, the positions as ``[1, 5000, P]``) and, with an LM head, the sampled softmax's tensors and
``vocabulary/``. :func:`.trf_folder.load_trf` reads the result back to the same outputs, bit for bit.

AllenNLP's transformer has 8 heads fixed in its code and a table of 5000 positions, so a model with
other heads is refused, and a sinusoidal table of another length is written at 5000 rows (the same
function: every row it had is unchanged). Their vocabulary keeps id 0 for padding and names the
unknown word ``@@UNKNOWN@@``: our ``<UNK>`` is written under that name, and the softmax gets one
row more than the vocabulary (the padding id's, which their loss never targets: zeros, bias -1e4).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch

from .errors import WeightsError
from .model import BiLMConfig
from .transformer import HEADS, TRANSFORMER_KEY, TransformerBiLM, sinusoidal_positions
from .trf_folder import CONFIG_JSON, CONTEXTUALIZER, POSITIONS, VOCABULARY, WEIGHTS_TH, _names, highway_names

CONFIG_SHAPES = ("2.x", "2019")
#: the character embedder's name in the archives AllenNLP's training writes
EMBEDDER = "token_characters"
UNKNOWN = "@@UNKNOWN@@"


def archive_settings_for(config: BiLMConfig, config_shape: str = "2.x", num_samples: int = 8192) -> Dict[str, Any]:
    """A ``config.json`` as AllenNLP's training writes it, for the architecture ``config``."""
    if config_shape not in CONFIG_SHAPES:
        raise ValueError(f"config_shape must be one of {list(CONFIG_SHAPES)}, got {config_shape!r}")
    width = config.projection_dim
    characters = {
        "type": "character_encoding",
        "embedding": {"num_embeddings": config.n_characters, "embedding_dim": config.char_dim},
        "encoder": {
            "type": "cnn-highway",
            "activation": config.activation,
            "embedding_dim": config.char_dim,
            "filters": [list(f) for f in config.filters],
            "num_highway": config.n_highway,
            "projection_dim": width,
            "projection_location": "after_highway",
            "do_layer_norm": True,
        },
    }
    model: Dict[str, Any] = (
        {"type": "language_model", "bidirectional": True} if config_shape == "2.x" else {"type": "bidirectional-language-model"}
    )
    model.update(
        num_samples=num_samples,
        sparse_embeddings=False,
        text_field_embedder={"token_embedders": {"tokens": {"type": "empty"}, EMBEDDER: characters}},
        contextualizer={
            "type": CONTEXTUALIZER,
            "input_dim": width,
            "hidden_dim": config.lstm_dim,
            "num_layers": config.n_layers,
            "dropout": 0.1,
            "input_dropout": 0.1,
        },
    )
    if config_shape == "2019":
        model["text_field_embedder"]["allow_unmatched_keys"] = True
    reader = {
        "type": "simple_language_modeling",
        "tokenizer": {"type": "just_spaces"},
        "token_indexers": {"tokens": {"type": "single_id"}, EMBEDDER: {"type": "elmo_characters"}},
        "max_sequence_length": 400,
        "start_tokens": ["<S>"],
        "end_tokens": ["</S>"],
    }
    trainer = {"num_epochs": 10, "optimizer": {"type": "dense_sparse_adam"}}
    loader = {"data_loader": {"batch_size": 32}} if config_shape == "2.x" else {"iterator": {"type": "bucket", "batch_size": 32}}
    return {"dataset_reader": reader, "train_data_path": "train/*", "model": model, "trainer": trainer, **loader}


def archive_state(model: TransformerBiLM) -> "OrderedDict[str, torch.Tensor]":
    """The biLM's tensors under AllenNLP's names (float32, the softmax not included)."""
    config = model.config
    heads = config.extra.get(TRANSFORMER_KEY, {}).get("heads")
    if heads != HEADS:
        raise WeightsError(
            f"AllenNLP's transformer ELMo has {HEADS} attention heads (fixed in its code); this model has {heads}: not writable"
        )
    ours = {k: v.detach().cpu().float() for k, v in model.state_dict().items()}
    state: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, theirs in _names(config, EMBEDDER).items():
        state[theirs] = ours[name].clone()
    for k, theirs in enumerate(highway_names(config, EMBEDDER)):
        layer, kind = divmod(k, 2)
        part = ("weight", "bias")[kind]
        transform, carry = ours[f"token_encoder.highways.{layer}.transform.{part}"], ours[f"token_encoder.highways.{layer}.carry.{part}"]
        state[theirs] = torch.cat([transform, -carry])  # their gate keeps the input: our carry rows negated
    table = ours["transformer.positions"]
    if table.shape[0] != POSITIONS:
        if not torch.equal(table, sinusoidal_positions(table.shape[0], config.projection_dim)):
            raise WeightsError(
                f"this model's {table.shape[0]} positions are not the sinusoidal table: AllenNLP's format holds {POSITIONS} rows"
            )
        table = sinusoidal_positions(POSITIONS, config.projection_dim)
    state["_contextualizer._position.positional_encoding"] = table.unsqueeze(0)
    return state


def write_archive_files(out: Path, files: Dict[str, bytes]) -> Path:
    """``files`` (archive path -> bytes) as a ``.tar.gz`` when ``out`` ends so, else as a folder."""
    out = Path(out)
    if out.name.endswith(".tar.gz"):
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:gz") as handle:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                handle.addfile(info, io.BytesIO(data))
        partial.replace(out)
        return out
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    return out


def archive_files(
    state: Dict[str, torch.Tensor], settings: Dict[str, Any], tokens: Sequence[str], legacy: bool = False
) -> Dict[str, bytes]:
    """The archive's files from its tensors, its configuration and its vocabulary's lines."""
    buffer = io.BytesIO()
    torch.save(state, buffer, _use_new_zipfile_serialization=not legacy)
    return {
        CONFIG_JSON: json.dumps(settings, indent=2).encode("utf-8"),
        WEIGHTS_TH: buffer.getvalue(),
        f"{VOCABULARY}/tokens.txt": "".join(t + "\n" for t in tokens).encode("utf-8"),
        f"{VOCABULARY}/non_padded_namespaces.txt": b"*tags\n*labels\n",
    }


def write_trf_archive(
    model: TransformerBiLM,
    out: Path,
    head: Optional[tuple] = None,
    config_shape: str = "2.x",
    num_samples: int = 8192,
) -> Path:
    """Write ``model`` in AllenNLP's transformer ELMo format: ``out`` ending in ``.tar.gz`` is the
    archive, anything else its unpacked folder. ``head``: the LM head ``(tokens, weight [V, P],
    bias [V])`` to write as their softmax and vocabulary (without one, the vocabulary is the unknown
    word alone and no softmax is written: every reader here takes it, while allennlp-models' own
    loader wants a softmax). Returns ``out``."""
    if not isinstance(model, TransformerBiLM):
        raise WeightsError(f"only a transformer biLM has AllenNLP's transformer ELMo format, not a {type(model).__name__}")
    state = archive_state(model)
    lines = [UNKNOWN]
    if head is not None:
        tokens, weight, bias = head
        if weight.shape != (len(tokens), model.config.projection_dim) or bias.shape != (len(tokens),):
            raise WeightsError(
                f"the LM head {tuple(weight.shape)} does not fit {len(tokens):,} tokens of width {model.config.projection_dim}"
            )
        if UNKNOWN in tokens:
            raise WeightsError(f"the vocabulary holds {UNKNOWN!r}, AllenNLP's name for the unknown word: not writable")
        lines = [UNKNOWN if t == "<UNK>" else t for t in tokens]
        state["_softmax_loss.softmax_w"] = torch.cat([weight.float(), weight.new_zeros(1, weight.shape[1])])
        state["_softmax_loss.softmax_b"] = torch.cat([bias.float(), bias.new_full((1,), -1e4)])
    state["_last_average_loss"] = torch.zeros(1)  # a buffer of their LanguageModel, which their loader expects
    # their sampled softmax asserts fewer samples than words (the padding id counted)
    settings = archive_settings_for(model.config, config_shape, min(num_samples, len(lines)))
    return write_archive_files(Path(out), archive_files(state, settings, lines))


__all__ = ["CONFIG_SHAPES", "archive_files", "archive_settings_for", "archive_state", "write_archive_files", "write_trf_archive"]
