"""Random ELMoForManyLangs models in the authors' exact folder format, seeded.

For parity checks against their package, tests and benchmarks without downloading a model:
``config.json`` (the settings their training writes; ``config_path`` names the model config),
the model config (or, with ``ship_config=False``, only the name of the sample config their package
ships), ``char.dic`` and ``word.dic`` (``entry<TAB>id`` lines in id order, the special entries
after the others, as their training writes them), ``token_embedder.pkl`` and ``encoder.pkl``
(torch state dicts under their module names; ``legacy_pickle`` writes torch's pre-1.6 format,
which the published models use). Scales follow :mod:`.random_weights` (activations in a trained
model's range, LSTM cells that reach the clips now and then); the gates of their highway layers
start mostly open to the input, as their initialisation does.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from ..bilm.efml import CHAR_SPECIALS, EFML_KEY, WORD_SPECIALS
from ..bilm.efml_folder import (
    CHAR_DIC,
    ENCODER_PKL,
    SAMPLE_CONFIGS,
    SETTINGS_NAME,
    TOKEN_EMBEDDER_PKL,
    WORD_DIC,
    efml_config,
    model_options,
    read_lexicon,
)
from ..bilm.errors import WeightsError
from .random_weights import CNN_BIAS_MEAN, CNN_GAIN, FORGET_BIAS_MEAN, LSTM_GAIN, PROJECTION_GAIN

SAMPLE_NAME = "cnn_50_100_512_4096_sample.json"
MODEL_CONFIG_NAME = "model_config.json"
GATE_BIAS_MEAN = 1.5  # their highway gate weighs the input: positive, the layer mostly carries it

DEFAULT_CHARS = [chr(c) for c in range(33, 127)]
DEFAULT_WORDS = ["the", "of", "and", "a", "to", "in", "is", "was", "it", "for", ",", "."]


def sample_config() -> Dict[str, Any]:
    """A copy of the model config their package ships (the published models' shape)."""
    return json.loads(json.dumps(SAMPLE_CONFIGS[SAMPLE_NAME]))


def _lexicon(entries: Sequence[str], specials: Sequence[str]) -> "OrderedDict[str, int]":
    table: "OrderedDict[str, int]" = OrderedDict()
    for entry in list(entries) + list(specials):
        if entry not in table:
            table[entry] = len(table)
    return table


def _write_lexicon(path: Path, table: "OrderedDict[str, int]") -> None:
    path.write_text("".join(f"{entry}\t{i}\n" for entry, i in table.items()), encoding="utf-8")
    if len(read_lexicon(path)) != len(table):  # their reader would see fewer entries than the embedding has rows
        raise WeightsError(f"{path}: some entries collide when read back (line breaks or several whitespace-only entries)")


def random_state(model_config: Dict[str, Any], n_chars: int, n_words: int, seed: int = 0) -> Dict[str, "OrderedDict[str, torch.Tensor]"]:
    """Their two state dicts (``token_embedder``, ``encoder``) for ``model_config``, float32, from ``seed``."""
    options = model_options(model_config, "model config")
    lstm, cnn, section = options["lstm"], options["char_cnn"], options[EFML_KEY]
    rng = np.random.default_rng(seed)

    def normal(shape: Sequence[int], std: float, mean: float = 0.0) -> torch.Tensor:
        values = rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std) + np.float32(mean)
        return torch.from_numpy(values.astype(np.float32))

    def uniform(shape: Sequence[int]) -> torch.Tensor:
        return torch.from_numpy(rng.uniform(-1.0, 1.0, tuple(shape)).astype(np.float32))

    char_dim, word_dim = cnn["embedding"]["dim"], section["word_dim"]
    filters = [(int(w), int(n)) for w, n in cnn["filters"]]
    n_filters, proj, cell = sum(n for _, n in filters), lstm["projection_dim"], lstm["dim"]
    relu = cnn["activation"] == "relu"
    embedder: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    if word_dim > 0:
        embedder["word_emb_layer.embedding.weight"] = uniform((n_words, word_dim))
    embedder["char_emb_layer.embedding.weight"] = uniform((n_chars, char_dim))
    for i, (width, count) in enumerate(filters):
        embedder[f"convolutions.{i}.weight"] = normal((count, char_dim, width), CNN_GAIN / math.sqrt(width * char_dim))
        embedder[f"convolutions.{i}.bias"] = normal((count,), 0.3, CNN_BIAS_MEAN if relu else 0.0)
    for k in range(cnn["n_highway"]):
        weight = torch.cat(
            [normal((n_filters, n_filters), 1.0 / math.sqrt(n_filters)), normal((n_filters, n_filters), 0.7 / math.sqrt(n_filters))]
        )
        embedder[f"highways._layers.{k}.weight"] = weight
        embedder[f"highways._layers.{k}.bias"] = torch.cat([normal((n_filters,), 0.1), normal((n_filters,), 0.5, GATE_BIAS_MEAN)])
    embedder["projection.weight"] = normal((proj, n_filters + word_dim), 1.0 / math.sqrt(n_filters + word_dim))
    embedder["projection.bias"] = normal((proj,), 0.1)

    encoder: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for layer in range(lstm["n_layers"]):
        for name in ("forward", "backward"):
            prefix = f"{name}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = normal((4 * cell, proj), LSTM_GAIN / math.sqrt(2 * proj))
            encoder[f"{prefix}.state_linearity.weight"] = normal((4 * cell, proj), LSTM_GAIN / math.sqrt(2 * proj))
            bias = normal((4 * cell,), 0.5)
            bias[cell : 2 * cell] += FORGET_BIAS_MEAN + 1.0  # their gate order: input, forget, cell, output; no run-time +1
            encoder[f"{prefix}.state_linearity.bias"] = bias
            encoder[f"{prefix}.state_projection.weight"] = normal((proj, cell), PROJECTION_GAIN / math.sqrt(cell))
    return {"token_embedder": embedder, "encoder": encoder}


def write_random_efml(
    out_dir: Path,
    model_config: Optional[Dict[str, Any]] = None,
    chars: Sequence[str] = DEFAULT_CHARS,
    words: Sequence[str] = DEFAULT_WORDS,
    seed: int = 0,
    ship_config: bool = True,
    legacy_pickle: bool = False,
) -> Path:
    """Write a random ELMoForManyLangs model folder into ``out_dir`` (see the module docstring):
    ``model_config`` defaults to the published shape; ``chars`` and ``words`` are the lexicons'
    ordinary entries (the special ones are added after them). Returns ``out_dir``."""
    model_config = sample_config() if model_config is None else json.loads(json.dumps(model_config))
    if not ship_config and model_config != SAMPLE_CONFIGS[SAMPLE_NAME]:
        raise ValueError("ship_config=False names the sample config: it needs the sample's shape (model_config=None)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_name = MODEL_CONFIG_NAME if ship_config else f"configs/{SAMPLE_NAME}"
    if ship_config:
        (out / MODEL_CONFIG_NAME).write_text(json.dumps(model_config, indent=1) + "\n", encoding="utf-8")
    settings = {"seed": seed, "gpu": -1, "train_path": "random", "config_path": config_name, "model": str(out.name), "batch_size": 32}
    (out / SETTINGS_NAME).write_text(json.dumps(settings) + "\n", encoding="utf-8")
    char_table, word_table = _lexicon(chars, CHAR_SPECIALS), _lexicon(words, WORD_SPECIALS + ("<bos>", "<eos>"))
    _write_lexicon(out / CHAR_DIC, char_table)
    _write_lexicon(out / WORD_DIC, word_table)
    states = random_state(model_config, len(char_table), len(word_table), seed)
    for name, state in ((TOKEN_EMBEDDER_PKL, states["token_embedder"]), (ENCODER_PKL, states["encoder"])):
        torch.save(state, out / name, _use_new_zipfile_serialization=not legacy_pickle)
    efml_config(out)  # what was written reads back
    return out


def words_of(sentences: Sequence[Sequence[str]], share: float = 0.7, seed: int = 0) -> List[str]:
    """A seeded ``share`` of the distinct tokens of ``sentences``: a word lexicon that leaves the rest unknown."""
    distinct = sorted({token for sentence in sentences for token in sentence})
    rng = np.random.default_rng(seed)
    # a lexicon line holds what stripping and tab-splitting it give back (see efml_folder.read_lexicon)
    ok = [token for token in distinct if token and token.strip() == token and "\t" not in token and token.splitlines() == [token]]
    return [token for token in ok if rng.random() < share]


def chars_of(sentences: Sequence[Sequence[str]], share: float = 0.8, seed: int = 0) -> List[str]:
    """A seeded ``share`` of the distinct characters of ``sentences`` (whitespace-only ones left
    out but for the ideographic space): a character lexicon that leaves the rest unknown."""
    distinct = sorted({c for sentence in sentences for token in sentence for c in token})
    rng = np.random.default_rng(seed + 1)
    return [c for c in distinct if (not c.strip() == "" or c == "\u3000") and c.splitlines() == [c] and rng.random() < share]


__all__ = ["DEFAULT_CHARS", "DEFAULT_WORDS", "chars_of", "random_state", "sample_config", "words_of", "write_random_efml"]
