"""``widen``: an LSTM biLM grown to more cells computes what it computed (spacy_elmo/training/widen.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training.data import Vocabulary, evaluation_batches
from spacy_elmo.training.trainer import TrainConfig, load_language_model, train
from spacy_elmo.training.widen import WIDEN_NAME, widen_language_model, widen_model

from .tiny_lm import skewed_corpus, tiny_model

SENTENCES = [["The", "dog", "barked", "at", "the", "tree", "."], ["Bark", "is", "rough", "."], ["a"]]


def _nll(folder: Path, data: Path) -> float:
    lm, vocab = load_language_model(folder)
    total = 0.0
    for batch in evaluation_batches(data, "train", vocab, 4096, 50):
        (fwd, bwd), _, _ = lm.nll(batch)
        total += fwd + bwd
    return total


@pytest.fixture()
def narrow(tmp_path):
    data = skewed_corpus(tmp_path, held_out=0.1)
    return data, tiny_model(tmp_path / "narrow", Vocabulary.load(data / "vocab.txt"), noise=0.3)


@pytest.mark.parametrize("method", ["copy", "zero"])
def test_a_widened_model_gives_the_same_vectors_and_likelihood_and_records_its_source(narrow, tmp_path, method):
    data, source = narrow
    before = (source / "weights.pt").read_bytes()
    record = widen_model(source, tmp_path / "wide", 20, seed=3, method=method)  # 12 new cells of 8: some replicated twice
    assert (source / "weights.pt").read_bytes() == before  # the source is left as it was
    wide, _ = load_language_model(tmp_path / "wide")
    small, _ = load_language_model(source)
    assert wide.bilm.config.lstm_dim == 20 and wide.bilm.lstm.layers[1].w_proj.shape == (2, 20, 4)
    assert json.loads((tmp_path / "wide" / WIDEN_NAME).read_text()) == record
    assert record["cell_dim"] == {"from": 8, "to": 20} and record["seed"] == 3 and record["method"] == method
    for a, b in zip(small.bilm.embed_batch(SENTENCES), wide.bilm.embed_batch(SENTENCES)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert _nll(tmp_path / "wide", data) == pytest.approx(_nll(source, data), rel=1e-6)
    # the softmax, vocabulary and token encoder are the source's, byte for byte
    for name in ("softmax.pt", "vocab.txt"):
        assert (tmp_path / "wide" / name).read_bytes() == (source / name).read_bytes()
    assert all(
        torch.equal(x, y) for x, y in zip(small.bilm.token_encoder.state_dict().values(), wide.bilm.token_encoder.state_dict().values())
    )


def _gate_cells(layer: torch.nn.Module, name: str, cells: slice) -> torch.Tensor:
    """``layer``'s ``name`` parameter's columns of ``cells`` in each of the four gate blocks, ``[..., 4, n]``."""
    weight = getattr(layer, name).detach()
    blocks = weight.reshape(*weight.shape[:-1], 4, layer.cell_dim)
    return blocks[..., cells]


def test_copy_makes_each_new_cell_a_replica_that_shares_its_sources_projection(narrow):
    _, source = narrow
    small, _ = load_language_model(source)
    wide = widen_language_model(small, 12, seed=1, method="copy")
    for layer, old in zip(wide.bilm.lstm.layers, small.bilm.lstm.layers):
        for name in ("w_input", "w_state", "bias"):
            assert torch.equal(_gate_cells(layer, name, slice(0, 8)), _gate_cells(old, name, slice(0, 8)))
        # each new cell's gate weights are one old cell's, four distinct old cells replicated
        new_cells = _gate_cells(layer, "w_state", slice(8, 12))
        sources = [
            next(j for j in range(8) if torch.equal(new_cells[..., i], _gate_cells(old, "w_state", slice(j, j + 1))[..., 0]))
            for i in range(4)
        ]
        assert len(set(sources)) == 4
        proj = layer.w_proj.detach()
        for i, j in enumerate(sources):
            torch.testing.assert_close(proj[:, j] + proj[:, 8 + i], old.w_proj.detach()[:, j])
            share = proj[:, 8 + i] / old.w_proj.detach()[:, j]
            assert float(share.min()) >= 0.25 - 1e-6 and float(share.max()) <= 0.75 + 1e-6
        untouched = [j for j in range(8) if j not in sources]
        assert torch.equal(proj[:, untouched], old.w_proj.detach()[:, untouched])


def test_zero_gives_new_cells_that_learn_from_the_first_step_and_the_seed_is_theirs(narrow):
    data, source = narrow
    small, vocab = load_language_model(source)
    wide = widen_language_model(small, 16, seed=1, method="zero").train()
    batch = next(iter(evaluation_batches(data, "train", vocab, 4096, 50)))
    loss, _ = wide(batch)
    loss.backward()
    for layer, old in zip(wide.bilm.lstm.layers, small.bilm.lstm.layers):
        assert float(layer.w_proj.detach()[:, 8:].abs().max()) == 0.0  # the new cells do not count yet
        assert float(layer.w_proj.grad[:, 8:].abs().max()) > 0.0  # ... and will after one step
        for name in ("w_input", "w_state", "bias"):  # the old cells at the front of each gate block
            assert torch.equal(_gate_cells(layer, name, slice(0, 8)), _gate_cells(old, name, slice(0, 8)))
        assert torch.all(layer.bias[:, 2 * 16 + 8 : 3 * 16] == 1.0)  # the new cells' forget bias, as a fresh layer's
    for method in ("zero", "copy"):
        first = widen_language_model(small, 16, seed=1, method=method).bilm.lstm.layers[0]
        again = widen_language_model(small, 16, seed=1, method=method).bilm.lstm.layers[0]
        other = widen_language_model(small, 16, seed=2, method=method).bilm.lstm.layers[0]
        assert torch.equal(again.w_input, first.w_input) and torch.equal(again.w_proj, first.w_proj)
        assert not (torch.equal(other.w_input, first.w_input) and torch.equal(other.w_proj, first.w_proj))


def test_finetune_continues_a_widened_model(narrow, tmp_path):
    data, source = narrow
    widen_model(source, tmp_path / "wide", 16)
    config = TrainConfig(
        data_dir=str(data),
        out_dir=str(tmp_path / "run"),
        init_model=str(tmp_path / "wide"),
        max_steps=3,
        warmup_steps=1,
        lr=1e-2,
        max_tokens=512,
        log_every=1,
        eval_every=1000,
        checkpoint_every=10,
        threads=1,
        dropout=0.0,
    )
    train(config)
    trained, _ = load_language_model(tmp_path / "run" / "model")
    assert trained.bilm.config.lstm_dim == 16
    assert all(float(layer.w_proj.detach()[:, 8:].abs().max()) > 0.0 for layer in trained.bilm.lstm.layers)


def test_widen_refuses_a_narrower_width_an_existing_folder_and_a_missing_model(narrow, tmp_path):
    _, source = narrow
    with pytest.raises(ValueError, match="must be above the model's"):
        widen_model(source, tmp_path / "same", 8)
    runner = CliRunner()
    result = runner.invoke(app, ["widen", str(source), str(tmp_path / "w"), "--cell-dim", "12"])
    assert result.exit_code == 0, result.output
    assert "8 -> 12 cells (copy)" in result.output
    again = runner.invoke(app, ["widen", str(source), str(tmp_path / "w"), "--cell-dim", "16"])
    assert again.exit_code != 0 and load_language_model(tmp_path / "w")[0].bilm.config.lstm_dim == 12  # not overwritten
    missing = runner.invoke(app, ["widen", str(tmp_path / "nothing"), str(tmp_path / "x"), "--cell-dim", "16"])
    unknown = runner.invoke(app, ["widen", str(source), str(tmp_path / "y"), "--cell-dim", "16", "--method", "split"])
    assert unknown.exit_code != 0 and "method must be one of copy, zero" in unknown.output and not (tmp_path / "y").exists()
    assert missing.exit_code != 0 and "nothing" in missing.output


def test_the_embedded_default_widens_by_name(tmp_path):
    record = widen_model(Path("en_default"), tmp_path / "wide", 520, seed=0)
    wide, _ = load_language_model(tmp_path / "wide")
    assert record["cell_dim"]["to"] == 520 and wide.bilm.config.lstm_dim == 520
    from spacy_elmo import load_bilm

    for a, b in zip(load_bilm("en_default").embed_batch(SENTENCES[:2]), wide.bilm.embed_batch(SENTENCES[:2])):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
