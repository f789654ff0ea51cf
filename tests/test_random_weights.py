"""``random-weights``: seeded random biLMs in the published layout, for benchmarks, parity checks
and trying a mirror."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.bilm.layout import hdf5_datasets
from spacy_elmo.bilm.model import BiLMConfig
from spacy_elmo.hub import download, published
from spacy_elmo.hub.random_weights import options_for, write_mirror, write_random_weights

from .conftest import REPO
from .loopback_http import LoopbackServer

TINY = {
    "lstm": {"n_layers": 2, "dim": 64, "projection_dim": 16, "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
    "char_cnn": {"filters": [[1, 4], [2, 8], [3, 16]], "n_highway": 1, "embedding": {"dim": 4}, "activation": "tanh",
                 "n_characters": 262, "max_characters_per_token": 50},
}
SENTENCES = [["The", "bank", "lends", "money", "."], ["He", "sat", "on", "the", "river", "bank", "."]]


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "spacy_elmo", "random-weights", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_custom_options_file_gives_a_loadable_seeded_model(tmp_path):
    spec = tmp_path / "tiny.json"
    spec.write_text(json.dumps(TINY))
    for seed, folder in ((3, "a"), (3, "b"), (4, "c")):
        result = cli(spec, tmp_path / folder, "--seed", seed, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    same = (tmp_path / "a" / "weights.hdf5").read_bytes() == (tmp_path / "b" / "weights.hdf5").read_bytes()
    other = (tmp_path / "a" / "weights.hdf5").read_bytes() != (tmp_path / "c" / "weights.hdf5").read_bytes()
    assert same and other
    assert json.loads((tmp_path / "a" / "options.json").read_text()) == TINY
    layers = load_bilm(tmp_path / "a").embed_sentences(SENTENCES)
    assert [a.shape for a in layers] == [(3, 5, 32), (3, 7, 32)]
    for array in layers:
        assert np.isfinite(array).all()
        assert 0.05 < float(array[1:].std()) < 5.0  # neither dead nor exploding
        assert np.abs(array[2]).max() > 0.1
    bank_money, bank_river = layers[0][2, 1], layers[1][2, 5]
    assert not np.allclose(bank_money, bank_river)  # context reaches the upper layers


def test_a_published_name_gives_its_shape(tmp_path):
    options, weights = write_random_weights("elmo-small", tmp_path, seed=0)
    config = download.check_files(options, weights)  # the checks a download must pass
    assert config == BiLMConfig.from_options(published.shape_options(published.PUBLISHED["elmo-small"].shape))
    import h5py

    with h5py.File(weights, "r") as handle:
        stored = {name: tuple(handle[name].shape) for name in hdf5_datasets(config)}
    assert stored == hdf5_datasets(config)
    assert sum(int(np.prod(s)) for s in stored.values()) == published.parameter_count(published.PUBLISHED["elmo-small"].shape)


def test_a_mirror_of_random_files_downloads_by_name(tmp_path, monkeypatch):
    root = tmp_path / "served"
    write_mirror("elmo-small", root / "allennlp", seed=1)
    server = LoopbackServer(root)
    try:
        monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp/")
        monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
        folder = download.download("elmo-small", progress=False)
    finally:
        server.close()
    assert download.is_cached("elmo-small") and folder == tmp_path / "cache" / "elmo-small"
    assert load_bilm("elmo-small").embed_sentences(SENTENCES[:1])[0].shape == (3, 5, 256)


@pytest.mark.parametrize("spec", ["no-such-model", "3x64_16_2048cnn_1xhighway_extra", "missing.json"])
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path, spec):
    result = cli(spec, tmp_path / "out", cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out" / "weights.hdf5").exists()


def test_mirror_needs_a_published_name(tmp_path):
    spec = tmp_path / "tiny.json"
    spec.write_text(json.dumps(TINY))
    result = cli(spec, tmp_path / "m", "--mirror", cwd=tmp_path)
    assert result.returncode == 2 and "--mirror needs a published model name" in result.stderr


def test_options_for_reads_shapes_names_and_files(tmp_path):
    assert options_for("2x2048_256_2048cnn_1xhighway") == options_for("elmo-medium")
    spec = tmp_path / "o.json"
    spec.write_text(json.dumps(TINY))
    assert options_for(str(spec)) == TINY
