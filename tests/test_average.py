"""``average``: the uniform mean of models that continued one model (spacy_elmo/training/average.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.bilm.model import BiLM, BiLMConfig
from spacy_elmo.cli import app
from spacy_elmo.training.average import SOUP_NAME, average_models
from spacy_elmo.training.data import Vocabulary
from spacy_elmo.training.lm import BiLMLanguageModel
from spacy_elmo.training.ship import ship_model
from spacy_elmo.training.trainer import export_model, load_language_model

WORDS = ["<S>", "</S>", "<UNK>", "the", "bank", "river", "money"]


def _model(folder: Path, seed: int, lstm_dim: int = 8, words=WORDS) -> Path:
    torch.manual_seed(seed)
    config = BiLMConfig(lstm_dim=lstm_dim, projection_dim=4, filters=((1, 4), (2, 4)), n_highway=1)
    folder.mkdir(parents=True)
    export_model(BiLMLanguageModel(BiLM(config), len(words)).eval(), Vocabulary(words), folder)
    return folder


def test_the_mean_of_two_runs_is_the_mean_of_every_parameter_and_loads_like_a_run(tmp_path):
    a, b = _model(tmp_path / "a" / "model", 1), _model(tmp_path / "b", 2)  # a run folder and a model folder
    record = average_models([tmp_path / "a", b], tmp_path / "soup")
    soup, vocab = load_language_model(tmp_path / "soup")  # its recorded digest verified on load
    (ma, _), (mb, _) = load_language_model(a), load_language_model(b)
    for name, value in soup.state_dict().items():
        assert torch.allclose(value, (ma.state_dict()[name].double() + mb.state_dict()[name].double()).div(2).float(), atol=1e-7), name
    assert vocab.tokens == WORDS
    assert [x["path"] for x in json.loads((tmp_path / "soup" / SOUP_NAME).read_text())["inputs"]] == [str(tmp_path / "a"), str(b)]
    assert [x["weights_sha256"] for x in record["inputs"]] == [
        json.loads((f / "config.json").read_text())["sha256"]["weights.pt"] for f in (a, b)
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    sizes = ship_model(tmp_path / "soup", tmp_path / "shipped")  # `ship` takes it like a run's model
    assert {"weights.pt", "softmax.pt", "vocab.txt", "config.json"} <= set(sizes)


def test_averaging_is_order_free_up_to_rounding_and_a_model_with_itself_is_itself(tmp_path):
    a, b = _model(tmp_path / "a", 1), _model(tmp_path / "b", 2)
    average_models([a, b], tmp_path / "ab")
    average_models([b, a], tmp_path / "ba")
    (ab, _), (ba, _) = load_language_model(tmp_path / "ab"), load_language_model(tmp_path / "ba")
    assert all(torch.equal(v, ba.state_dict()[k]) for k, v in ab.state_dict().items())
    with pytest.raises(ValueError, match="named twice"):
        average_models([a, a], tmp_path / "aa")


def test_models_that_do_not_average_are_refused_by_what_differs_and_nothing_is_written(tmp_path):
    a = _model(tmp_path / "a", 1)
    with pytest.raises(ValueError, match="two or more"):
        average_models([a], tmp_path / "out")
    with pytest.raises(ValueError, match="another shape"):
        average_models([a, _model(tmp_path / "wide", 2, lstm_dim=12)], tmp_path / "out")
    with pytest.raises(ValueError, match="vocabulary differs"):
        average_models([a, _model(tmp_path / "other-words", 2, words=WORDS[:-1] + ["loan"])], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_weights_changed_after_they_were_written_are_refused(tmp_path):
    a, b = _model(tmp_path / "a", 1), _model(tmp_path / "b", 2)
    state = torch.load(b / "weights.pt", weights_only=True)
    name = next(iter(state))
    state[name] = state[name] + 1.0
    torch.save(state, b / "weights.pt")
    with pytest.raises(Exception, match="(?i)sha-?256|digest|changed"):
        average_models([a, b], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_command_writes_the_soup_and_refuses_bad_input_in_one_line(tmp_path):
    a, b = _model(tmp_path / "a", 1), _model(tmp_path / "b", 2)
    runner = CliRunner()
    ok = runner.invoke(app, ["average", str(a), str(b), "--out", str(tmp_path / "soup")])
    assert ok.exit_code == 0, ok.output
    assert "mean of 2 models" in ok.output
    again = runner.invoke(app, ["average", str(a), str(b), "--out", str(tmp_path / "soup")])
    assert again.exit_code != 0 and "soup" in again.output
    missing = runner.invoke(app, ["average", str(a), str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")])
    assert missing.exit_code != 0 and "nowhere" in missing.output and "Traceback" not in missing.output
