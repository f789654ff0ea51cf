"""The LM head (softmax + vocabulary) of our models and of elmo-original, by one loader; the
published head downloaded, resumed and checked like the weights (random weights of its layout on
a loopback mirror)."""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.cli import main
from spacy_elmo.hub import download, lm_head, published
from spacy_elmo.hub.lm_head import LMHead, download_lm_head, load_lm_head
from spacy_elmo.hub.resolve import default_model_path

from .conftest import ALLENNLP
from .loopback_http import LoopbackServer
from .random_head import write_random_head

ORIGINAL = published.PUBLISHED["elmo-original"]
SMALL = published.PUBLISHED["elmo-small"]
HEAD = ("elmo_small_softmax_weights.hdf5", "vocab-small.txt")  # a head given to elmo-small for the CLI tests


@pytest.fixture()
def served(tmp_path, monkeypatch):
    root = tmp_path / "served"
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp")
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def serve_original_head(server, vocab_size=3000, dim=512):
    folder = server.root / "allennlp" / ORIGINAL.folder
    softmax, vocab = ORIGINAL.lm_head
    return write_random_head(folder / softmax, folder / vocab, vocab_size, dim)


def test_the_registry_names_the_published_head(monkeypatch):
    monkeypatch.delenv(published.MIRROR_ENV, raising=False)
    softmax, vocab = ORIGINAL.lm_head
    assert ORIGINAL.url(softmax) == (
        "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/"
        "elmo_2x4096_512_2048cnn_2xhighway_softmax_weights.hdf5"
    )
    assert ORIGINAL.url(vocab).endswith("/models/elmo/2x4096_512_2048cnn_2xhighway/vocab-2016-09-10.txt")
    assert lm_head.head_dim("elmo-original") == 512
    with pytest.raises(WeightsError, match="elmo-small has no published LM head .*elmo-original"):
        load_lm_head("elmo-small")


def test_the_native_head_of_the_default_model():
    head = load_lm_head()
    assert isinstance(head, LMHead)
    vocab, weight, bias = head
    stored = torch.load(default_model_path() / "softmax.pt", weights_only=True)
    assert vocab[:3] == ["<S>", "</S>", "<UNK>"] and len(vocab) == 50000  # v2: a 50,000-word vocabulary
    assert weight.shape == (50000, 128) and bias.shape == (50000,) and weight.dtype == torch.float32
    assert torch.equal(weight, stored["weight"].float()) and torch.equal(bias, stored["bias"].float())
    small = load_lm_head("en_default", top_n=100, dtype=torch.bfloat16)
    assert len(small.vocab) == 100 and small.weight.shape == (100, 128) and small.weight.dtype == torch.bfloat16
    assert torch.equal(small.weight, stored["weight"][:100].to(torch.bfloat16))


def test_the_published_head_downloads_resumes_and_loads(served, monkeypatch):
    words, weight, bias = serve_original_head(served)
    softmax_name, vocab_name = ORIGINAL.lm_head
    path = "allennlp/" + ORIGINAL.folder + softmax_name
    served.cut[path] = (served.root / path).stat().st_size // 2
    with pytest.raises(WeightsError, match="interrupted"):
        download_lm_head("elmo-original", progress=False)
    head = load_lm_head("elmo-original")  # resumes, checks, records, loads
    assert [g[2] for g in served.gets(softmax_name)] == [200, 206]
    ranged = [h for h in served.headers if "Range" in h]
    assert len(ranged) == 1 and ranged[0]["If-Range"].startswith('"')  # resumed on the ETag of the first transfer
    assert head.vocab == words
    np.testing.assert_array_equal(head.weight.numpy(), weight)
    np.testing.assert_array_equal(head.bias.numpy(), bias)
    folder = published.model_dir("elmo-original")
    record = json.loads((folder / download.RECORD_NAME).read_text())["files"]
    assert set(record) == {softmax_name, vocab_name} and len(record[softmax_name]["sha256"]) == 64
    assert not download.is_cached("elmo-original")  # the biLM itself was not downloaded
    # offline afterwards, and the memory savers
    requests_before = len(served.log)
    monkeypatch.setenv(published.MIRROR_ENV, "http://127.0.0.1:9/allennlp/")
    top = load_lm_head("elmo-original", top_n=10, dtype=torch.bfloat16)
    assert top.vocab == words[:10] and torch.equal(top.weight, torch.from_numpy(weight[:10]).to(torch.bfloat16))
    mapped = load_lm_head("elmo-original", mmap=True, top_n=2000)
    np.testing.assert_array_equal(mapped.weight.numpy(), weight[:2000])
    assert len(served.log) == requests_before
    with pytest.raises(WeightsError, match="mmap=True needs float32"):
        load_lm_head("elmo-original", mmap=True, dtype=torch.bfloat16)
    with pytest.raises(WeightsError, match="top_n=0: give a positive number"):
        load_lm_head("elmo-original", top_n=0)


def test_a_head_that_does_not_fit_the_model_is_refused(served):
    serve_original_head(served, dim=256)
    with pytest.raises(WeightsError, match=r"takes 256-dimensional states, but the biLM's output \(projection_dim\) is 512") as info:
        load_lm_head("elmo-original")
    assert "\n" not in str(info.value) and "failed the checks and were removed" in str(info.value)
    assert not published.model_dir("elmo-original").exists()


def test_a_vocabulary_of_another_length_is_refused(served):
    serve_original_head(served, vocab_size=500)
    vocab = served.root / "allennlp" / ORIGINAL.folder / ORIGINAL.lm_head[1]
    vocab.write_text(vocab.read_text(encoding="utf-8") + "extra\n", encoding="utf-8")
    with pytest.raises(WeightsError, match="lists 501 words, but .* has 500 rows"):
        download_lm_head("elmo-original", progress=False)


def test_the_download_command_takes_the_head_and_the_folder_still_loads(served, monkeypatch, capsys):
    monkeypatch.setitem(published.PUBLISHED, "elmo-small", dataclasses.replace(SMALL, lm_head=HEAD))
    folder = served.root / "allennlp" / SMALL.folder
    folder.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", folder / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / SMALL.weights_name)
    words, weight, _ = write_random_head(folder / HEAD[0], folder / HEAD[1], 200, 128)
    assert main(["download", "elmo-small", "--lm-head"]) == 0
    assert "elmo-small and its LM head ready" in capsys.readouterr().out
    cached = published.model_dir("elmo-small")
    assert {p.name for p in cached.iterdir()} == {*SMALL.files, *HEAD, download.RECORD_NAME}
    load_bilm(cached)  # the softmax HDF5 beside the weights is not taken for them
    head = load_lm_head("elmo-small")
    assert head.vocab == words and torch.equal(head.weight, torch.from_numpy(weight))
    # the folder's own options (the test fixture: projection 16) do not fit a 128-wide head
    with pytest.raises(WeightsError, match="takes 128-dimensional states, but the biLM's output .* is 16"):
        load_lm_head(cached)
    assert main(["download", "elmo-medium", "--lm-head"]) != 0
    assert "elmo-medium has no published LM head" in capsys.readouterr().err


def test_offline_with_no_head_cached_names_the_command(served, monkeypatch):
    monkeypatch.setenv(published.MIRROR_ENV, "http://127.0.0.1:9/allennlp/")
    with pytest.raises(WeightsError, match=r"download elmo-original --lm-head.*vocab-2016-09-10.txt") as info:
        load_lm_head("elmo-original")
    assert "\n" not in str(info.value)
    with pytest.raises(WeightsError, match=r"vocab-2016-09-10.txt of elmo-original are not in the cache .*download elmo-original --lm-head"):
        load_lm_head("elmo-original", download=False)


def test_a_native_folder_and_a_head_that_does_not_fit_it(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(default_model_path(), folder)
    head = load_lm_head(folder, top_n=5)
    assert head.vocab == ["<S>", "</S>", "<UNK>", ",", "the"] and head.weight.shape == (5, 128)
    torch.save({"weight": torch.zeros(30000, 64), "bias": torch.zeros(30000)}, folder / "softmax.pt")
    with pytest.raises(WeightsError, match=r"takes 64-dimensional states, but the biLM's output \(projection_dim\) is 128"):
        load_lm_head(folder)
    (folder / "vocab.txt").write_text("<S>\n</S>\n", encoding="utf-8")
    torch.save({"weight": torch.zeros(3, 128), "bias": torch.zeros(3)}, folder / "softmax.pt")
    with pytest.raises(WeightsError, match="lists 2 words, but .* has 3 rows"):
        load_lm_head(folder)
    (folder / "softmax.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="softmax.pt cannot be read"):
        load_lm_head(folder)
    (folder / "softmax.pt").unlink()
    with pytest.raises(WeightsError, match="no LM head found"):
        load_lm_head(folder)
