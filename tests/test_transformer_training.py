"""Training a transformer biLM: the objective sees no future, it learns, resumes exactly, trains in
bf16, fine-tunes, and is written in AllenNLP's archive format and read back to the same outputs."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm.characters import TokenBatch
from spacy_elmo.bilm.transformer import TransformerBiLM
from spacy_elmo.bilm.trf_folder import load_trf, lm_head_of
from spacy_elmo.bilm.trf_export import write_trf_archive
from spacy_elmo.hub.lm_head import read_native_head
from spacy_elmo.training import load_language_model, perplexity, prepare_corpus, train
from spacy_elmo.training.baseline import unigram_perplexity
from spacy_elmo.training.precision import cpu_has_native_bf16
from spacy_elmo.training.trainer import new_bilm

from .test_training import GENERAL, tiny_config, write_corpus

SENTENCES = [["The", "old", "dog", "sees", "a", "river", "."], ["A", "king", "leaves", "."]]


def trf_config(data_dir, out_dir, **kw):
    """test_training's tiny config, as a transformer (two blocks of width 16, feed-forward 48)."""
    return tiny_config(data_dir, out_dir, **{"architecture": "transformer", "lstm_dim": 48, "lr": 5e-3, "positions": 64, **kw})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("trf-corpus")
    prepare_corpus([write_corpus(root / "general", GENERAL)], root / "prep")
    return root / "prep"


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("trf-trained")
    return out, train(trf_config(corpus, out))


def test_the_config_refuses_shapes_a_transformer_cannot_have(tmp_path):
    with pytest.raises(ValueError, match="multiple of its 3 heads"):
        trf_config(tmp_path, tmp_path, heads=3)
    with pytest.raises(ValueError, match="positions 20 cannot hold a sentence of max_length 50"):
        trf_config(tmp_path, tmp_path, positions=20)
    with pytest.raises(ValueError, match="architecture must be one of lstm, transformer"):
        trf_config(tmp_path, tmp_path, architecture="gru")


def test_each_direction_sees_only_its_own_side(tmp_path):
    """The forward half at position i must not change with tokens after i, the backward half with tokens
    before i; otherwise the LM objective is trivial and the representations are not ELMo's."""
    bilm = new_bilm(trf_config(tmp_path, tmp_path)).eval()
    half = bilm.config.projection_dim
    a = TokenBatch.from_sentences([["The", "old", "dog", "sees", "a", "river", "."]])
    b = TokenBatch.from_sentences([["The", "old", "dog", "finds", "one", "house", "!"]])  # differs from token 3 on
    with torch.no_grad():
        _, la = bilm.encode(a)
        _, lb = bilm.encode(b)
    for x, y in zip(la, lb):
        assert torch.equal(x[0, :4, :half], y[0, :4, :half])  # <S> and the first three tokens: no future leaks back
        assert not torch.allclose(x[0, 4:, :half], y[0, 4:, :half])
        assert torch.equal(x[0, 8:, half:], y[0, 8:, half:])  # </S>: after every difference
        assert not torch.allclose(x[0, :4, half:], y[0, :4, half:])


def test_a_transformer_biLM_learns_far_better_than_unigram(corpus, trained):
    out, result = trained
    model, vocab = load_language_model(out / "model")
    assert isinstance(model.bilm, TransformerBiLM)
    test = perplexity(model, vocab, corpus, "test")
    assert test["ppl_avg"] < 0.5 * unigram_perplexity(vocab, corpus, "test"), test
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["options"]["transformer"] == {"heads": 8, "positions": 64, "token_layer_norm": True}


def test_resume_after_interruption_is_exact(corpus, tmp_path):
    settings = dict(max_steps=12, checkpoint_every=4, dropout=0.2, n_samples=20)
    train(trf_config(corpus, tmp_path / "straight", **settings))
    assert train(trf_config(corpus, tmp_path / "cut", **settings), interrupt_at=7)["interrupted"]
    train(trf_config(corpus, tmp_path / "cut", **settings), resume=True)
    a = torch.load(tmp_path / "straight" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "cut" / "checkpoints" / "last.pt", weights_only=False)
    assert a["step"] == b["step"] == 12
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_bf16_training_runs_its_products_in_bf16_and_learns(corpus, tmp_path, monkeypatch):
    if not cpu_has_native_bf16():
        pytest.skip("bf16 training needs a CPU with native bf16 (AMX or AVX512-BF16)")
    seen = []
    original = torch.nn.functional.linear

    def spy(x, *args, **kwargs):
        out = original(x, *args, **kwargs)
        if torch.is_grad_enabled():
            seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    result = train(trf_config(corpus, tmp_path / "bf16", precision="bf16", max_steps=40))
    assert torch.bfloat16 in seen
    records = [json.loads(x) for x in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines() if "loss" in x]
    assert records[-1]["loss"] < records[0]["loss"] and records[-1]["precision"] == "bfloat16"
    assert result["valid_ppl_avg"] < 0.7 * unigram_perplexity(load_language_model(tmp_path / "bf16" / "model")[1], corpus, "valid")


def test_finetune_continues_a_transformer(corpus, trained, tmp_path):
    out = trained[0]
    before = perplexity(*load_language_model(out / "model"), corpus, "valid")
    train(trf_config(corpus, tmp_path / "ft", init_model=str(out / "model"), max_steps=20, lr=1e-3))
    after = perplexity(*load_language_model(tmp_path / "ft" / "model"), corpus, "valid")
    assert isinstance(load_bilm(tmp_path / "ft" / "model"), TransformerBiLM)
    assert after["ppl_avg"] < before["ppl_avg"] * 1.02


@pytest.mark.parametrize("target", ["folder", "model.tar.gz"])
def test_the_allennlp_archive_reads_back_to_the_same_outputs(trained, tmp_path, target):
    out = trained[0] / "model"
    written = tmp_path / target
    done = subprocess.run([sys.executable, "-m", "spacy_elmo", "export", str(out), str(written)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    ours = load_bilm(out)
    back = load_bilm(written)
    assert isinstance(back, TransformerBiLM) and back.config.extra["transformer"]["positions"] == 5000
    for x, y in zip(ours.embed_sentences(SENTENCES), back.embed_sentences(SENTENCES)):
        assert np.array_equal(x, y)
    if target == "folder":
        settings = json.loads((written / "config.json").read_text())
        assert settings["model"]["contextualizer"]["type"] == "bidirectional_language_model_transformer"
        from spacy_elmo.bilm.efml_folder import load_tensors

        tensors = load_tensors(written / "weights.th")
        tokens, weight, bias = lm_head_of(written, tensors, 16)
        # what allennlp-models' own loader needs beyond what we read: the loss buffer, fewer samples than words
        assert "_last_average_loss" in tensors and tensors["_softmax_loss.softmax_w"].shape[0] == len(tokens) + 1
        assert settings["model"]["num_samples"] < len(tokens) + 1
        head = read_native_head(out)
        assert tokens == ["@@UNKNOWN@@" if t == "<UNK>" else t for t in head.vocab]
        assert torch.equal(weight, head.weight.float()) and torch.equal(bias, head.bias.float())
        assert np.array_equal(load_trf(written).embed_sentences(SENTENCES)[0], ours.embed_sentences(SENTENCES)[0])


def test_only_an_eight_head_transformer_has_allennlps_format(tmp_path):
    bilm = new_bilm(trf_config(tmp_path, tmp_path, heads=4))
    from spacy_elmo.bilm.errors import WeightsError

    with pytest.raises(WeightsError, match="8 attention heads"):
        write_trf_archive(bilm, tmp_path / "out")
    assert not (tmp_path / "out").exists()
