"""``refit-bias``: the softmax bias moved to the full softmax's likelihood condition (spacy_elmo/training/bias_refit.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training.bias_refit import RefitSettings, context_states, predicted_mass, refit_model, target_shares
from spacy_elmo.training.data import Vocabulary, evaluation_batches
from spacy_elmo.training.trainer import SOFTMAX_NAME, load_language_model

from .tiny_lm import skewed_corpus, tiny_model

ALL = 10_000  # more sentences than the corpus holds: every training sentence


def _corpus(root: Path) -> Path:
    """A corpus with skewed word frequencies (a few common words, many rare ones), no held-out split."""
    return skewed_corpus(root)


def _model(folder: Path, vocab: Vocabulary) -> Path:
    return tiny_model(folder, vocab)


def _train_nll(folder: Path, data: Path) -> float:
    lm, vocab = load_language_model(folder)
    total, count = 0.0, 0
    for batch in evaluation_batches(data, "train", vocab, 4096, 50):
        (fwd, bwd), _, n = lm.nll(batch)
        total, count = total + fwd + bwd, count + 2 * n
    return total / count


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_refit_bias_meets_the_counts_and_raises_the_likelihood_and_nothing_else_changes(tmp_path):
    data = _corpus(tmp_path)
    vocab = Vocabulary.load(data / "vocab.txt")
    model = _model(tmp_path / "model", vocab)
    settings = RefitSettings(sentences=ALL, iterations=25, damping=0.5)
    record = refit_model(model, data, tmp_path / "refit", settings)
    # every training sentence read: the targets are the sentences' own counts, so the fixed point is the likelihood's maximum
    history = [h["mean_abs_log_ratio"] for h in record["history"]]
    assert history[-1] < 0.1 * history[0]
    lm, _ = load_language_model(tmp_path / "refit")
    states = context_states(lm, vocab, data, settings)
    mass = predicted_mass(lm, states, settings.chunk)
    seen = target_shares(vocab) > 0
    target = target_shares(vocab) * len(states)
    assert torch.allclose(mass[seen], target[seen], rtol=0.05)
    assert _train_nll(tmp_path / "refit", data) < _train_nll(model, data)
    # the biLM's files as they were; in the softmax only the bias moved
    assert _sha(tmp_path / "refit" / "weights.pt") == _sha(model / "weights.pt") == record["weights_sha256"]
    before = torch.load(model / SOFTMAX_NAME, weights_only=True)
    after = torch.load(tmp_path / "refit" / SOFTMAX_NAME, weights_only=True)
    assert torch.equal(before["weight"], after["weight"]) and not torch.equal(before["bias"], after["bias"])
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_the_refit_is_deterministic(tmp_path):
    data = _corpus(tmp_path)
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    refit_model(model, data, tmp_path / "a", RefitSettings(sentences=ALL, iterations=3))
    refit_model(model, data, tmp_path / "b", RefitSettings(sentences=ALL, iterations=3))
    assert _sha(tmp_path / "a" / SOFTMAX_NAME) == _sha(tmp_path / "b" / SOFTMAX_NAME)


def test_bad_settings_and_another_corpus_are_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match="damping"):
        RefitSettings(damping=0)
    with pytest.raises(ValueError, match="sentences"):
        RefitSettings(sentences=0)
    data = _corpus(tmp_path)
    other = _model(tmp_path / "other", Vocabulary(["<S>", "</S>", "<UNK>", "x"]))
    with pytest.raises(ValueError, match="vocabulary"):
        refit_model(other, data, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_command_writes_the_refit_model_and_refuses_bad_input_in_one_line(tmp_path):
    data = _corpus(tmp_path)
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    runner = CliRunner()
    ok = runner.invoke(app, ["refit-bias", str(model), "--data", str(data), "--out", str(tmp_path / "r"), "--iterations", "2"])
    assert ok.exit_code == 0, ok.output
    assert "bias refit over" in ok.output and (tmp_path / "r" / "refit.json").is_file()
    again = runner.invoke(app, ["refit-bias", str(model), "--data", str(data), "--out", str(tmp_path / "r")])
    assert again.exit_code != 0 and "Traceback" not in again.output
    missing = runner.invoke(app, ["refit-bias", str(tmp_path / "nowhere"), "--data", str(data), "--out", str(tmp_path / "x")])
    assert missing.exit_code != 0 and "nowhere" in missing.output and "Traceback" not in missing.output
