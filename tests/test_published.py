"""Published models by name: download from a loopback mirror, resume, verification, cache, offline use."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.hub import download, published, resolve
from spacy_elmo.bilm.layout import hdf5_datasets
from spacy_elmo.bilm.weights import save_original
from spacy_elmo.cli import main

from .conftest import ALLENNLP, REPO
from .loopback_http import LoopbackServer

SMALL = published.PUBLISHED["elmo-small"]
OPTIONS_PATH = "allennlp/" + SMALL.folder + SMALL.options_name
WEIGHTS_PATH = "allennlp/" + SMALL.folder + SMALL.weights_name
SENTENCES = [["The", "bank", "of", "the", "river", "."], ["Money", "in", "the", "bank"]]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def mirror(tmp_path, monkeypatch):
    """The fixture biLM served under elmo-small's published path; cache and mirror point at them."""
    root = tmp_path / "served"
    folder = root / "allennlp" / SMALL.folder
    folder.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", folder / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / SMALL.weights_name)
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp")
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def go_offline(monkeypatch):
    monkeypatch.setenv(published.MIRROR_ENV, "http://127.0.0.1:9/allennlp/")  # port 9: nothing listens


def assert_same_model(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_published_urls_and_mirror(monkeypatch):
    monkeypatch.delenv(published.MIRROR_ENV, raising=False)
    original = published.PUBLISHED["elmo-original"]
    assert original.weights_url == (
        "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/"
        "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
    )
    assert published.PUBLISHED["elmo-original-5.5b"].options_url.endswith(
        "/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json"
    )
    assert published.PUBLISHED["elmo-pubmed"].weights_url.endswith(
        "/allennlp/models/elmo/contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
    )
    monkeypatch.setenv(published.MIRROR_ENV, "http://mirror.example/elmo-files")  # no trailing slash
    assert original.options_url == (
        "http://mirror.example/elmo-files/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
    )


def test_parameter_counts_match_the_published_table():
    counts = {name: published.parameter_count(m.shape) for name, m in published.PUBLISHED.items()}
    # the authors' table: 13.6M, 28.0M, 93.6M (char CNN + LSTMs, no softmax)
    assert round(counts["elmo-small"] / 1e6, 1) == 13.6
    assert round(counts["elmo-medium"] / 1e6, 1) == 28.0
    assert round(counts["elmo-original"] / 1e6, 1) == 93.6
    assert counts["elmo-original-5.5b"] == counts["elmo-pubmed"] == counts["elmo-original"]


def test_hdf5_datasets_is_what_save_original_writes(allennlp_bilm, tmp_path):
    import h5py

    _, weights = save_original(allennlp_bilm, tmp_path)
    with h5py.File(weights, "r") as handle:
        written = {}
        handle.visititems(lambda name, obj: written.__setitem__(name, obj.shape) if isinstance(obj, h5py.Dataset) else None)
    assert written == hdf5_datasets(allennlp_bilm.config)


def test_download_by_name_matches_loading_the_files_by_path(mirror, monkeypatch):
    bilm = load_bilm("elmo-small")
    assert_same_model(bilm, load_bilm(ALLENNLP))
    folder = published.model_dir("elmo-small")
    assert sorted(p.name for p in folder.iterdir()) == sorted([SMALL.options_name, SMALL.weights_name, download.RECORD_NAME])
    record = json.loads((folder / download.RECORD_NAME).read_text())
    assert record["files"][SMALL.weights_name]["sha256"] == sha256(ALLENNLP / "lm_weights.hdf5")
    assert download.is_cached("elmo-small")
    # a second load is offline: the mirror is gone and nothing is requested
    requests_before = len(mirror.log)
    go_offline(monkeypatch)
    assert_same_model(load_bilm("elmo-small"), bilm)
    assert len(mirror.log) == requests_before
    # the cache folder holds the published file names and loads as a plain path
    assert_same_model(load_bilm(folder), bilm)


def test_folder_and_file_pair_with_published_names(tmp_path, allennlp_bilm):
    folder = tmp_path / "published-names"
    folder.mkdir()
    shutil.copy(ALLENNLP / "options.json", folder / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / SMALL.weights_name)
    assert_same_model(load_bilm(folder), allennlp_bilm)
    pair = [str(folder / SMALL.weights_name), str(folder / SMALL.options_name)]  # any order
    assert_same_model(load_bilm(pair), allennlp_bilm)
    with pytest.raises(WeightsError, match="exactly two files"):
        load_bilm([str(folder / SMALL.options_name)])


def test_resume_after_a_cut_transfer(mirror):
    size = (ALLENNLP / "lm_weights.hdf5").stat().st_size
    mirror.cut[WEIGHTS_PATH] = size // 3
    with pytest.raises(WeightsError, match="interrupted at .* run the same command again to resume"):
        download.download("elmo-small", progress=False)
    folder = published.model_dir("elmo-small")
    part = folder / (SMALL.weights_name + ".part")
    kept = part.stat().st_size
    assert 0 < kept <= size // 3  # what arrived before the cut, to within one read
    assert not (folder / SMALL.weights_name).exists() and not download.is_cached("elmo-small")
    with pytest.raises(WeightsError, match="not in the cache"):
        resolve.resolve_weights("elmo-small", download=False)  # nothing half-written is loaded
    download.download("elmo-small", progress=False)
    gets = mirror.gets(SMALL.weights_name)
    assert [g[1:] for g in gets] == [(None, 200), (f"bytes={kept}-", 206)]
    assert sha256(folder / SMALL.weights_name) == sha256(ALLENNLP / "lm_weights.hdf5")
    assert not part.exists()
    assert_same_model(load_bilm("elmo-small"), load_bilm(ALLENNLP))


@pytest.mark.parametrize("damage", ["truncated", "not-hdf5", "wrong-shapes"])
def test_a_bad_download_is_refused_and_removed(mirror, damage, tmp_path):
    data = (ALLENNLP / "lm_weights.hdf5").read_bytes()
    if damage == "truncated":  # announced as complete, but cut short at the source
        mirror.body[WEIGHTS_PATH] = data[: len(data) // 2]
    elif damage == "not-hdf5":
        mirror.body[WEIGHTS_PATH] = b"<html>proxy error</html>" * 100
    else:  # a valid HDF5 file, but one dataset's shape is not what the options imply
        import h5py

        other = tmp_path / "other.hdf5"
        other.write_bytes(data)
        with h5py.File(other, "a") as handle:
            del handle["CNN/b_cnn_0"]
            handle["CNN/b_cnn_0"] = np.zeros(3, np.float32)
        mirror.body[WEIGHTS_PATH] = other.read_bytes()
    with pytest.raises(WeightsError, match="failed verification and were removed") as info:
        load_bilm("elmo-small")
    assert "\n" not in str(info.value)
    assert {"truncated": "HDF5", "not-hdf5": "HDF5", "wrong-shapes": "CNN/b_cnn_0"}[damage] in str(info.value)
    folder = published.model_dir("elmo-small")
    assert not any(p.suffix in (".hdf5", ".part") for p in folder.iterdir()), list(folder.iterdir())
    assert not download.is_cached("elmo-small")
    # the source is repaired: the next load downloads afresh and works
    mirror.body.clear()
    assert_same_model(load_bilm("elmo-small"), load_bilm(ALLENNLP))


def test_offline_with_nothing_cached_is_one_line_naming_the_url(mirror, monkeypatch):
    go_offline(monkeypatch)
    with pytest.raises(WeightsError) as info:
        load_bilm("elmo-small")
    message = str(info.value)
    assert "\n" not in message
    assert "http://127.0.0.1:9/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/" in message
    assert "by hand" in message and SMALL.weights_name in message and str(published.model_dir("elmo-small")) in message


def test_files_placed_by_hand_load_offline_and_are_recorded(mirror, monkeypatch, allennlp_bilm):
    go_offline(monkeypatch)
    folder = published.model_dir("elmo-small")
    folder.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", folder / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / SMALL.weights_name)
    assert_same_model(load_bilm("elmo-small"), allennlp_bilm)
    assert download.is_cached("elmo-small")
    assert mirror.log == []


def test_a_cached_file_changed_later_is_refused(mirror):
    download.download("elmo-small", progress=False)
    weights = published.model_dir("elmo-small") / SMALL.weights_name
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF  # same size, other content, new mtime
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="changed since it was verified"):
        load_bilm("elmo-small")
    # touching without changing content is accepted (hashed once, then recorded)
    download.download("elmo-small", force=True, progress=False)
    os.utime(weights, ns=(1, 1))
    assert resolve.resolve_weights("elmo-small", download=False).weights == weights
    assert download.is_cached("elmo-small")


@pytest.mark.slow
def test_two_processes_download_the_same_model_once(mirror):
    mirror.delay = 0.05  # ~7 blocks of 64 KiB: both processes start while the first still downloads
    code = "from spacy_elmo.hub.download import download; print(download('elmo-small', progress=False))"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
        assert out.strip() == str(published.model_dir("elmo-small"))
    assert len(mirror.gets(SMALL.weights_name)) == 1
    assert sha256(published.model_dir("elmo-small") / SMALL.weights_name) == sha256(ALLENNLP / "lm_weights.hdf5")


def test_component_by_name_and_to_disk_keeps_the_weights(mirror, monkeypatch, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": "elmo-small"})
    doc = nlp("The bank of the river .")
    reference = spacy.blank("en")
    reference.add_pipe("elmo", config={"weights": str(ALLENNLP)})
    np.testing.assert_array_equal(doc.tensor, reference("The bank of the river .").tensor)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(published.model_dir("elmo-small"))  # no cache, no network: the pipeline carries the weights
    go_offline(monkeypatch)
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.config["components"]["elmo"]["weights"] == "elmo-small"
    np.testing.assert_array_equal(loaded("The bank of the river .").tensor, doc.tensor)
    assert not published.model_dir("elmo-small").exists()


def test_check_weights_spec_never_downloads(mirror, tmp_path):
    resolve.check_weights_spec("elmo-original")
    resolve.check_weights_spec(None)
    resolve.check_weights_spec(str(ALLENNLP))
    for bad, words in (("elmo-orignal", "not a model name"), (["a.json"], "exactly two files"), (3, "use a published model name")):
        with pytest.raises(WeightsError, match=words):
            resolve.check_weights_spec(bad)
    assert mirror.log == []


def test_download_and_models_commands(mirror, capsys):
    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(published.PUBLISHED) and not rows["elmo-small"]["cached"]
    assert rows["elmo-original"]["parameters"] == published.parameter_count("2x4096_512_2048cnn_2xhighway")
    assert main(["download", "elmo-small"]) == 0
    assert "elmo-small is ready" in capsys.readouterr().out
    assert main(["models"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("elmo-small"))
    assert line.split()[-1] == "yes" and "MB" in line
    assert main(["download", "elmo-nope"]) == 2
    assert "unknown model 'elmo-nope'" in capsys.readouterr().err


def test_default_cache_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(published.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert published.cache_root() == tmp_path / "xdg" / "spacy-elmo"  # platformdirs or not, on Linux
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "mine"))
    assert published.model_dir("elmo-medium") == tmp_path / "mine" / "elmo-medium"
