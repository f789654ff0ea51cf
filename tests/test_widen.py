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


def test_a_widened_model_gives_the_same_vectors_and_likelihood_and_records_its_source(narrow, tmp_path):
    data, source = narrow
    before = (source / "weights.pt").read_bytes()
    record = widen_model(source, tmp_path / "wide", 20, seed=3)
    assert (source / "weights.pt").read_bytes() == before  # the source is left as it was
    wide, _ = load_language_model(tmp_path / "wide")
    small, _ = load_language_model(source)
    assert wide.bilm.config.lstm_dim == 20 and wide.bilm.lstm.layers[1].w_proj.shape == (2, 20, 4)
    assert json.loads((tmp_path / "wide" / WIDEN_NAME).read_text()) == record
    assert record["cell_dim"] == {"from": 8, "to": 20} and record["seed"] == 3
    for a, b in zip(small.bilm.embed_batch(SENTENCES), wide.bilm.embed_batch(SENTENCES)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert _nll(tmp_path / "wide", data) == pytest.approx(_nll(source, data), rel=1e-6)
    # the softmax, vocabulary and token encoder are the source's, byte for byte
    for name in ("softmax.pt", "vocab.txt"):
        assert (tmp_path / "wide" / name).read_bytes() == (source / name).read_bytes()
    assert all(
        torch.equal(x, y) for x, y in zip(small.bilm.token_encoder.state_dict().values(), wide.bilm.token_encoder.state_dict().values())
    )


def test_the_new_cells_learn_from_the_first_step_and_the_seed_is_theirs(narrow):
    data, source = narrow
    small, vocab = load_language_model(source)
    wide = widen_language_model(small, 16, seed=1).train()
    batch = next(iter(evaluation_batches(data, "train", vocab, 4096, 50)))
    loss, _ = wide(batch)
    loss.backward()
    for layer, old in zip(wide.bilm.lstm.layers, small.bilm.lstm.layers):
        assert float(layer.w_proj.detach()[:, 8:].abs().max()) == 0.0  # the new cells do not count yet
        assert float(layer.w_proj.grad[:, 8:].abs().max()) > 0.0  # ... and will after one step
        # the old cells' gate blocks sit at the front of each of the four blocks
        for gate in range(4):
            assert torch.equal(layer.w_state[..., gate * 16 : gate * 16 + 8], old.w_state[..., gate * 8 : gate * 8 + 8])
        assert torch.all(layer.bias[:, 2 * 16 + 8 : 3 * 16] == 1.0)  # the new cells' forget bias, as a fresh layer's
    again = widen_language_model(small, 16, seed=1)
    other = widen_language_model(small, 16, seed=2)
    w = wide.bilm.lstm.layers[0].w_input
    assert torch.equal(again.bilm.lstm.layers[0].w_input, w) and not torch.equal(other.bilm.lstm.layers[0].w_input, w)


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
    assert all(float(layer.w_proj[:, 8:].abs().max()) > 0.0 for layer in trained.bilm.lstm.layers)


def test_widen_refuses_a_narrower_width_an_existing_folder_and_a_missing_model(narrow, tmp_path):
    _, source = narrow
    with pytest.raises(ValueError, match="must be above the model's"):
        widen_model(source, tmp_path / "same", 8)
    runner = CliRunner()
    result = runner.invoke(app, ["widen", str(source), str(tmp_path / "w"), "--cell-dim", "12"])
    assert result.exit_code == 0, result.output
    assert "8 -> 12 cells" in result.output
    again = runner.invoke(app, ["widen", str(source), str(tmp_path / "w"), "--cell-dim", "16"])
    assert again.exit_code != 0 and load_language_model(tmp_path / "w")[0].bilm.config.lstm_dim == 12  # not overwritten
    missing = runner.invoke(app, ["widen", str(tmp_path / "nothing"), str(tmp_path / "x"), "--cell-dim", "16"])
    assert missing.exit_code != 0 and "nothing" in missing.output


def test_the_embedded_default_widens_by_name(tmp_path):
    record = widen_model(Path("en_default"), tmp_path / "wide", 520, seed=0)
    wide, _ = load_language_model(tmp_path / "wide")
    assert record["cell_dim"]["to"] == 520 and wide.bilm.config.lstm_dim == 520
    from spacy_elmo import load_bilm

    for a, b in zip(load_bilm("en_default").embed_batch(SENTENCES[:2]), wide.bilm.embed_batch(SENTENCES[:2])):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
