"""Widen a trained biLM's LSTM cells without changing what it computes (function-preserving growth).

A model that has stopped learning at its size can grow instead of starting over (Net2Net, Chen et
al. 2016): each LSTM layer gets ``cell_dim - old`` new cells per direction, made so that every
layer's output, every ELMo vector and every LM probability are the source model's (to float
rounding), in one of two ways:

* ``copy`` (the default; Net2WiderNet): each new cell is a replica of an old cell (its gate
  weights and biases), so the two compute the same output ``m = sigmoid(o) tanh(c)`` at every
  step, and the old cell's row of the projection ``W_p`` is split between them by a random share
  in [0.25, 0.75]: their sum is the old row, their different shares give them different gradients,
  and training parts them. The new cells start as features the model already uses.
* ``zero``: the new cells' gate weights are drawn as a fresh layer's and their rows of ``W_p`` are
  zero. They start as random features that count for nothing; measured on the default, AdamW
  at the legs' rate left those rows near zero for a whole leg (docs/model-card.md).

The projection, the token encoder, the softmax and the vocabulary are unchanged, so the vectors
keep their width (``2 x projection``) and every downstream config stays valid. ::

    python -m spacy_elmo widen models/en_default-next training/wide-init --cell-dim 1024 --seed 1

``widen.json`` beside the result records the source's weights digest, both widths, the method and
the seed. Whether the wider model learns more per CPU-hour than the narrow one's legs is measured,
not promised (docs/model-card.md, "Growing the default").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional, cast

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
METHODS = ("copy", "zero")


@torch.no_grad()
def widen_layer(old: BiLstmLayer, new: BiLstmLayer, method: str = "copy", generator: Optional[torch.Generator] = None) -> None:
    """Put ``old``'s cells in the first cells of each gate block of the wider ``new`` (initialised as
    a fresh layer) and make the new cells compute nothing new: ``copy`` makes each new cell a
    replica of an old one (its gate weights and bias; every old cell copied at most once more than
    any other) and splits the old cell's projection row between the two by a random share in
    [0.25, 0.75] (the replicas' outputs are equal, so the sum is the old row's product; the unequal
    shares give them different gradients, so they part); ``zero`` keeps ``new``'s fresh gate
    weights for the new cells and zeroes their projection rows."""
    if (old.input_dim, old.proj_dim) != (new.input_dim, new.proj_dim) or new.cell_dim < old.cell_dim:
        raise ValueError(
            f"cannot widen a {old.input_dim}->{old.cell_dim}->{old.proj_dim} layer to {new.input_dim}->{new.cell_dim}->{new.proj_dim}"
        )
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    h_old, h_new = old.cell_dim, new.cell_dim
    added = h_new - h_old
    # the old cell each new cell replicates: whole random permutations of the old cells, as many as needed
    sources = torch.cat([torch.randperm(h_old, generator=generator) for _ in range(-(-added // h_old))])[:added]
    for gate in range(N_GATES):
        src = slice(gate * h_old, (gate + 1) * h_old)
        dst = slice(gate * h_new, gate * h_new + h_old)
        new.w_input[..., dst] = old.w_input[..., src]
        new.w_state[..., dst] = old.w_state[..., src]
        new.bias[..., dst] = old.bias[..., src]
        if method == "copy":
            replicas = slice(gate * h_new + h_old, (gate + 1) * h_new)
            new.w_input[..., replicas] = old.w_input[..., gate * h_old + sources]
            new.w_state[..., replicas] = old.w_state[..., gate * h_old + sources]
            new.bias[..., replicas] = old.bias[..., gate * h_old + sources]
    new.w_proj[:, :h_old] = old.w_proj
    if method == "zero":
        new.w_proj[:, h_old:] = 0.0
        return
    shares = torch.empty(old.w_proj.shape[0], added, 1).uniform_(0.25, 0.75, generator=generator)  # per direction and replica
    for column, source in enumerate(sources.tolist()):
        # the old row's whole product is shared: replicas of one source take shares of what is left
        row = new.w_proj[:, source].clone()
        new.w_proj[:, h_old + column] = row * shares[:, column]
        new.w_proj[:, source] = row * (1 - shares[:, column])


def widen_language_model(model: BiLMLanguageModel, cell_dim: int, seed: int, method: str = "copy") -> BiLMLanguageModel:
    """A copy of ``model`` whose LSTM has ``cell_dim`` cells per layer and direction, computing the
    same function (``method``: :func:`widen_layer`'s)."""
    bilm = model.bilm
    stack = getattr(bilm, "lstm", None)
    if type(bilm) is not BiLM or not isinstance(stack, BiLstmStack):
        raise ValueError(f"only an LSTM biLM can be widened, not a {type(bilm).__name__}")
    old_dim = bilm.config.lstm_dim
    if cell_dim <= old_dim:
        raise ValueError(f"the new cell width ({cell_dim}) must be above the model's ({old_dim})")
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # the fresh layers' draws are seeded here, the caller's RNG left as it was
        torch.manual_seed(seed)
        wide_bilm = BiLM(dataclasses.replace(bilm.config, lstm_dim=cell_dim))
        wide = BiLMLanguageModel(wide_bilm, model.softmax.out_features, dropout=model.dropout, n_samples=model.n_samples)
    wide_bilm.token_encoder.load_state_dict(bilm.token_encoder.state_dict())
    for old_layer, new_layer in zip(stack.layers, wide_bilm.lstm.layers):
        widen_layer(cast(BiLstmLayer, old_layer), cast(BiLstmLayer, new_layer), method, generator)
    wide.softmax.load_state_dict(model.softmax.state_dict())
    return wide.eval()


def widen_model(source: Path, out: Path, cell_dim: int, seed: int = 0, method: str = "copy") -> Dict[str, Any]:
    """Write ``source`` (a run or model folder, or ``en_default``; weights verified on load) widened to ``cell_dim``
    cells to the model folder ``out`` (replaced whole when complete); returns ``widen.json``'s record."""
    folder = default_model_path() if str(source) in DEFAULT_NAMES and not Path(source).exists() else model_folder(Path(source))
    model, vocab = load_language_model(folder)
    wide = widen_language_model(model, cell_dim, seed, method)

    def write(staging: Path) -> Dict[str, Any]:
        export_model(wide, vocab, staging)
        record: Dict[str, Any] = {
            "source": str(Path(source)),
            "source_weights_sha256": file_sha256(folder / "weights.pt"),
            "cell_dim": {"from": model.bilm.config.lstm_dim, "to": cell_dim},
            "seed": seed,
            "method": method,
            "weights_sha256": file_sha256(staging / "weights.pt"),
        }
        write_json(staging / WIDEN_NAME, record, indent=1)
        return record

    return replace_folder(out, write)
