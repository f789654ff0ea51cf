"""``refit-bias``: the softmax bias moved to the full softmax's likelihood condition (spacy_elmo/training/bias_refit.py)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training.bias_refit import (
    RefitSettings,
    context_examples,
    context_states,
    mean_nll,
    predicted_mass,
    refit_model,
    target_shares,
)
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


def _rows_settings(**changes) -> RefitSettings:
    base = dict(
        sentences=ALL, iterations=3, rows=True, row_sentences=ALL, row_epochs=20, row_lr=1e-2, row_batch=64, valid_sentences=ALL, checks=10
    )
    return RefitSettings(**{**base, **changes})


def _valid_ppl(folder: Path, data: Path) -> float:
    lm, vocab = load_language_model(folder)
    states, targets = context_examples(lm, vocab, data, "valid", ALL, RefitSettings())
    return math.exp(mean_nll(lm.softmax.weight, lm.softmax.bias, states, targets, 2048))


def test_the_rows_refit_lowers_held_out_perplexity_keeps_its_best_read_and_the_bilm(tmp_path):
    data = skewed_corpus(tmp_path, held_out=0.3)
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    record = refit_model(model, data, tmp_path / "rows", _rows_settings())
    reads = [r["valid_ppl"] for r in record["rows"]["reads"]]
    assert len(reads) > 2 and min(reads) < 0.99 * reads[0]  # the vectors' fit buys more than the bias refit alone
    # what was written is the best read: its validation perplexity, recomputed from the files
    assert math.isclose(_valid_ppl(tmp_path / "rows", data), min(reads), rel_tol=1e-5)
    assert _valid_ppl(tmp_path / "rows", data) < _valid_ppl(model, data)
    assert _sha(tmp_path / "rows" / "weights.pt") == _sha(model / "weights.pt") == record["weights_sha256"]
    before = torch.load(model / SOFTMAX_NAME, weights_only=True)
    after = torch.load(tmp_path / "rows" / SOFTMAX_NAME, weights_only=True)
    assert not torch.equal(before["weight"], after["weight"])
    # deterministic: the same settings write the same softmax
    refit_model(model, data, tmp_path / "again", _rows_settings())
    assert _sha(tmp_path / "again" / SOFTMAX_NAME) == _sha(tmp_path / "rows" / SOFTMAX_NAME)


def test_a_rows_fit_that_only_hurts_keeps_the_bias_refit_alone(tmp_path):
    data = skewed_corpus(tmp_path, held_out=0.3)
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    record = refit_model(model, data, tmp_path / "rows", _rows_settings(row_lr=50.0, row_epochs=5))
    reads = [r["valid_ppl"] for r in record["rows"]["reads"]]
    assert all(r > reads[0] for r in reads[1:])  # every step made it worse
    refit_model(model, data, tmp_path / "bias", RefitSettings(sentences=ALL, iterations=3))
    rows = torch.load(tmp_path / "rows" / SOFTMAX_NAME, weights_only=True)
    bias = torch.load(tmp_path / "bias" / SOFTMAX_NAME, weights_only=True)
    assert torch.equal(rows["weight"], bias["weight"]) and torch.equal(rows["bias"], bias["bias"])


def test_the_rows_refit_needs_validation_sentences_and_sane_settings(tmp_path):
    data = _corpus(tmp_path)  # no held-out split
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    with pytest.raises(ValueError, match="no valid sentences"):
        refit_model(model, data, tmp_path / "out", _rows_settings())
    assert not (tmp_path / "out").exists()
    for bad in ({"row_epochs": 0}, {"row_lr": -1.0}, {"row_batch": 0}, {"checks": 0}):
        with pytest.raises(ValueError):
            _rows_settings(**bad)


def test_the_command_fits_the_rows_on_request(tmp_path):
    data = skewed_corpus(tmp_path, held_out=0.3)
    model = _model(tmp_path / "model", Vocabulary.load(data / "vocab.txt"))
    ok = CliRunner().invoke(
        app,
        ["refit-bias", str(model), "--data", str(data), "--out", str(tmp_path / "r"), "--iterations", "2", "--rows", "--row-epochs", "2"],
    )
    assert ok.exit_code == 0, ok.output
    assert "output vectors fitted over" in ok.output and "rows" in json.loads((tmp_path / "r" / "refit.json").read_text())
