"""Random transformer ELMo archives in AllenNLP's exact format, seeded.

For parity checks against allennlp-models, tests and benchmarks without downloading a model: a
``.tar.gz`` (or its unpacked folder) with ``config.json`` in either shape (``"2.x"``: allennlp-models'
``language_model`` with ``bidirectional: true``; ``"2019"``: ``bidirectional-language-model``),
``weights.th`` under AllenNLP's module names (``legacy`` writes torch's format before 1.6), a
sampled softmax's tensors, and ``vocabulary/``. Every tensor is random, the layer norms' gains
included (near 1), so that no parameter can be read into the wrong place unnoticed; the positions
are the sinusoidal table AllenNLP computes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

import torch

from ..bilm.model import BiLMConfig
from ..bilm.transformer import sinusoidal_positions
from ..bilm.trf_export import CONFIG_SHAPES, archive_files, archive_settings_for, write_archive_files
from ..bilm.trf_folder import POSITIONS

#: ``(char_dim, filters, n_highway, width, ff_dim, n_layers)`` of the test shapes and the published one
SHAPES: Dict[str, Tuple[int, Tuple[Tuple[int, int], ...], int, int, int, int]] = {
    "tiny": (4, ((1, 4), (2, 8), (3, 8)), 1, 16, 24, 2),
    "small": (8, ((1, 8), (2, 8), (3, 16), (4, 16)), 2, 32, 48, 3),
    "published": (16, ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)), 2, 512, 2048, 6),
}
WORDS = ("the", "a", "bank", "river", "money", ".", ",", "of", "and", "to")


def archive_settings(shape: str, config_shape: str = "2.x") -> Dict[str, Any]:
    """A ``config.json`` as AllenNLP's training writes it, for ``shape`` (:data:`SHAPES`)."""
    if shape not in SHAPES or config_shape not in CONFIG_SHAPES:
        raise ValueError(
            f"shape must be one of {sorted(SHAPES)} and config_shape one of {list(CONFIG_SHAPES)}, got {shape!r}, {config_shape!r}"
        )
    char_dim, filters, n_highway, width, ff_dim, n_layers = SHAPES[shape]
    config = BiLMConfig(lstm_dim=ff_dim, projection_dim=width, n_layers=n_layers, char_dim=char_dim, filters=filters, n_highway=n_highway)
    return archive_settings_for(config, config_shape, num_samples=4)


def positional_table(width: int, rows: int = POSITIONS) -> torch.Tensor:
    """The sinusoidal positions ``[1, rows, width]`` as AllenNLP stores them."""
    return sinusoidal_positions(rows, width).unsqueeze(0)


def random_archive_state(shape: str, seed: int = 0, n_words: int = len(WORDS) + 2) -> "OrderedDict[str, torch.Tensor]":
    """Random tensors under the names AllenNLP's ``LanguageModel`` gives them."""
    char_dim, filters, n_highway, width, ff_dim, n_layers = SHAPES[shape]
    gen = torch.Generator().manual_seed(seed)

    def normal(*size: int, scale: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(*size, generator=gen) * scale + mean

    state: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    chars = "_text_field_embedder.token_embedder_token_characters."
    state[chars + "_embedding._module.weight"] = normal(262, char_dim, scale=1.0)
    enc = chars + "_encoder._module."
    for i, (w, n) in enumerate(filters):
        state[f"{enc}char_conv_{i}.weight"] = normal(n, char_dim, w, scale=1.0 / math.sqrt(char_dim * w))
        state[f"{enc}char_conv_{i}.bias"] = normal(n, scale=0.1)
    n_filters = sum(n for _, n in filters)
    for k in range(n_highway):
        state[f"{enc}_highways._layers.{k}.weight"] = normal(2 * n_filters, n_filters, scale=1.0 / math.sqrt(n_filters))
        state[f"{enc}_highways._layers.{k}.bias"] = torch.cat([normal(n_filters, scale=0.1), normal(n_filters, scale=0.5, mean=1.0)])
    state[f"{enc}_projection.weight"] = normal(width, n_filters, scale=1.0 / math.sqrt(n_filters))
    state[f"{enc}_projection.bias"] = normal(width, scale=0.1)
    state[f"{enc}_layer_norm.gamma"] = normal(width, scale=0.1, mean=1.0)
    state[f"{enc}_layer_norm.beta"] = normal(width, scale=0.1)
    for direction in ("_forward_transformer", "_backward_transformer"):
        stack = f"_contextualizer.{direction}."
        for i in range(n_layers):
            layer = f"{stack}layers.{i}."
            for j in range(4):
                state[f"{layer}self_attn.linears.{j}.weight"] = normal(width, width, scale=1.0 / math.sqrt(width))
                state[f"{layer}self_attn.linears.{j}.bias"] = normal(width, scale=0.1)
            state[f"{layer}feed_forward.w_1.weight"] = normal(ff_dim, width, scale=1.0 / math.sqrt(width))
            state[f"{layer}feed_forward.w_1.bias"] = normal(ff_dim, scale=0.1)
            state[f"{layer}feed_forward.w_2.weight"] = normal(width, ff_dim, scale=1.0 / math.sqrt(ff_dim))
            state[f"{layer}feed_forward.w_2.bias"] = normal(width, scale=0.1)
            for s in range(2):
                state[f"{layer}sublayer.{s}.norm.gamma"] = normal(width, scale=0.1, mean=1.0)
                state[f"{layer}sublayer.{s}.norm.beta"] = normal(width, scale=0.1)
        state[f"{stack}norm.gamma"] = normal(width, scale=0.1, mean=1.0)
        state[f"{stack}norm.beta"] = normal(width, scale=0.1)
    state["_contextualizer._position.positional_encoding"] = positional_table(width)
    state["_softmax_loss.softmax_w"] = normal(n_words, width, scale=0.1)
    state["_softmax_loss.softmax_b"] = normal(n_words, scale=0.1)
    state["_last_average_loss"] = torch.zeros(1)
    return state


def write_random_trf(
    out: Path, shape: str = "tiny", config_shape: str = "2.x", seed: int = 0, legacy: bool = False, words: Sequence[str] = WORDS
) -> Path:
    """Write a random transformer ELMo: ``out`` ending in ``.tar.gz`` is the archive, anything else
    the unpacked folder. Returns ``out``."""
    state = random_archive_state(shape, seed, len(words) + 2)
    files = archive_files(state, archive_settings(shape, config_shape), ["@@UNKNOWN@@", *words], legacy=legacy)
    return write_archive_files(Path(out), files)


__all__ = ["CONFIG_SHAPES", "SHAPES", "archive_settings", "positional_table", "random_archive_state", "write_random_trf"]
