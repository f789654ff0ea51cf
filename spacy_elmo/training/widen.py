"""Widen a trained biLM's LSTM cells without changing what it computes (function-preserving growth).

A model that has stopped learning at its size can grow instead of starting over (Net2Net, Chen et
al. 2016): each LSTM layer gets ``cell_dim - old`` new cells per direction, their gate weights
drawn as a new layer's are (the forget gate's bias at +1), and their rows of the projection
``W_p`` set to zero. A new cell's output ``sigmoid(o) tanh(c)`` is then multiplied by zeros, so
every layer's output, every ELMo vector and every LM probability are those of the source model
(to float rounding: the products are the same sums with zeros added); training makes the new rows
non-zero from the first step (their gradient ``m_t^T dL/dh_t`` is not zero) and so the new cells
start to count. The projection, the token encoder, the softmax and the vocabulary are unchanged,
so the vectors keep their width (``2 x projection``) and every downstream config stays valid. ::

    python -m spacy_elmo widen models/en_default-next training/wide-init --cell-dim 1024 --seed 1

``widen.json`` beside the result records the source's weights digest, both widths and the seed.
Whether the wider model learns more per CPU-hour than the narrow one's legs is measured, not
promised (docs/model-card.md, "Growing the default").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, cast

import torch

from ..bilm.lstm import BiLstmLayer, BiLstmStack
from ..bilm.model import BiLM
from ..bilm.weights import file_sha256
from ..files import replace_folder, write_json
from ..hub.resolve import DEFAULT_NAMES, default_model_path
from .lm import BiLMLanguageModel
from .ship import model_folder
from .trainer import export_model, load_language_model

WIDEN_NAME = "widen.json"
N_GATES = 4  # i, j, f, o (the TensorFlow LSTMCell's order, see spacy_elmo.bilm.lstm)
FORGET_GATE = 2


@torch.no_grad()
def widen_layer(old: BiLstmLayer, new: BiLstmLayer) -> None:
    """Copy ``old``'s weights into the first cells of each gate block of the wider ``new`` (already
    initialised as a fresh layer) and zero the new cells' projection rows."""
    if (old.input_dim, old.proj_dim) != (new.input_dim, new.proj_dim) or new.cell_dim < old.cell_dim:
        raise ValueError(
            f"cannot widen a {old.input_dim}->{old.cell_dim}->{old.proj_dim} layer to {new.input_dim}->{new.cell_dim}->{new.proj_dim}"
        )
    h_old, h_new = old.cell_dim, new.cell_dim
    for gate in range(N_GATES):
        src = slice(gate * h_old, (gate + 1) * h_old)
        dst = slice(gate * h_new, gate * h_new + h_old)
        new.w_input[..., dst] = old.w_input[..., src]
        new.w_state[..., dst] = old.w_state[..., src]
        new.bias[..., dst] = old.bias[..., src]
    new.w_proj[:, :h_old] = old.w_proj
    new.w_proj[:, h_old:] = 0.0


def widen_language_model(model: BiLMLanguageModel, cell_dim: int, seed: int) -> BiLMLanguageModel:
    """A copy of ``model`` whose LSTM has ``cell_dim`` cells per layer and direction, computing the same function."""
    bilm = model.bilm
    stack = getattr(bilm, "lstm", None)
    if type(bilm) is not BiLM or not isinstance(stack, BiLstmStack):
        raise ValueError(f"only an LSTM biLM can be widened, not a {type(bilm).__name__}")
    old_dim = bilm.config.lstm_dim
    if cell_dim <= old_dim:
        raise ValueError(f"the new cell width ({cell_dim}) must be above the model's ({old_dim})")
    torch.manual_seed(seed)
    wide_bilm = BiLM(dataclasses.replace(bilm.config, lstm_dim=cell_dim))
    wide_bilm.token_encoder.load_state_dict(bilm.token_encoder.state_dict())
    for old_layer, new_layer in zip(stack.layers, wide_bilm.lstm.layers):
        widen_layer(cast(BiLstmLayer, old_layer), cast(BiLstmLayer, new_layer))
    wide = BiLMLanguageModel(wide_bilm, model.softmax.out_features, dropout=model.dropout, n_samples=model.n_samples)
    wide.softmax.load_state_dict(model.softmax.state_dict())
    return wide.eval()


def widen_model(source: Path, out: Path, cell_dim: int, seed: int = 0) -> Dict[str, Any]:
    """Write ``source`` (a run or model folder, or ``en_default``; weights verified on load) widened to ``cell_dim``
    cells to the model folder ``out`` (replaced whole when complete); returns ``widen.json``'s record."""
    folder = default_model_path() if str(source) in DEFAULT_NAMES and not Path(source).exists() else model_folder(Path(source))
    model, vocab = load_language_model(folder)
    wide = widen_language_model(model, cell_dim, seed)

    def write(staging: Path) -> Dict[str, Any]:
        export_model(wide, vocab, staging)
        record: Dict[str, Any] = {
            "source": str(Path(source)),
            "source_weights_sha256": file_sha256(folder / "weights.pt"),
            "cell_dim": {"from": model.bilm.config.lstm_dim, "to": cell_dim},
            "seed": seed,
            "weights_sha256": file_sha256(staging / "weights.pt"),
        }
        write_json(staging / WIDEN_NAME, record, indent=1)
        return record

    return replace_folder(out, write)
