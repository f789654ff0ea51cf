"""Published models by name: download from a loopback mirror, resume, verification, cache, offline use."""
from __future__ import annotations

import dataclasses
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
    counts = {name: published.model_parameters(m) for name, m in published.PUBLISHED.items() if m.format == "allennlp" and m.shape}
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
    with pytest.raises(WeightsError, match="failed the checks and were removed") as info:
        load_bilm("elmo-small")
    assert "\n" not in str(info.value)
    assert {"truncated": "HDF5", "not-hdf5": "HDF5", "wrong-shapes": "CNN/b_cnn_0"}[damage] in str(info.value)
    assert not published.model_dir("elmo-small").exists()  # nothing that failed stays, not even the folder
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
    with pytest.raises(WeightsError, match="changed since it was recorded"):
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
    assert "elmo-small ready" in capsys.readouterr().out
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


# ---------------------------------------------------------------------------------------------
# transfer integrity (issue 24)


@pytest.fixture()
def other_weights(tmp_path, allennlp_bilm):
    """An HDF5 file of the same shapes as the fixture's, with other values (a new upload)."""
    model = load_bilm(ALLENNLP)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(0.5)
    _, weights = save_original(model, tmp_path / "other")
    return weights


def cut_then(mirror, change):
    """Cut the weights' transfer at half, apply ``change`` to the world, and download again."""
    size = (ALLENNLP / "lm_weights.hdf5").stat().st_size
    mirror.cut[WEIGHTS_PATH] = size // 2
    with pytest.raises(WeightsError, match="interrupted"):
        download.download("elmo-small", progress=False)
    change()
    return download.download("elmo-small", progress=False) / SMALL.weights_name


def test_a_resume_after_the_file_changed_restarts_instead_of_splicing(mirror, other_weights):
    weights = cut_then(mirror, lambda: mirror.body.__setitem__(WEIGHTS_PATH, other_weights.read_bytes()))
    assert sha256(weights) == sha256(other_weights)  # the new file whole, not half of each
    gets = mirror.gets(SMALL.weights_name)
    assert [(ranged is not None, status) for _, ranged, status in gets] == [(False, 200), (True, 200)]  # asked to resume, got the whole new file
    resumed = [h for h in mirror.headers if h.get("Range")]
    assert resumed and resumed[-1].get("If-Range", "").startswith('"')  # the ETag of the first transfer


def test_a_resume_from_another_mirror_starts_again(mirror, monkeypatch, other_weights, tmp_path):
    root = tmp_path / "second"
    (root / "allennlp" / SMALL.folder).mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", root / "allennlp" / SMALL.folder / SMALL.options_name)
    shutil.copy(other_weights, root / "allennlp" / SMALL.folder / SMALL.weights_name)
    second = LoopbackServer(root)
    try:
        weights = cut_then(mirror, lambda: monkeypatch.setenv(published.MIRROR_ENV, second.url + "allennlp"))
        assert sha256(weights) == sha256(other_weights)
        assert [g[1] for g in second.gets(SMALL.weights_name)] == [None]  # no Range: the part came from elsewhere
    finally:
        second.close()


@pytest.mark.parametrize("validators", ["none", "weak"])
def test_a_part_without_a_strong_validator_is_not_resumed_blindly(mirror, validators, other_weights):
    mirror.validators = validators
    weights = cut_then(mirror, lambda: mirror.body.__setitem__(WEIGHTS_PATH, other_weights.read_bytes()))
    assert sha256(weights) == sha256(other_weights)
    assert [g[1] for g in mirror.gets(SMALL.weights_name)] == [None, None]


def test_last_modified_is_the_validator_when_there_is_no_etag(mirror):
    mirror.validators = "last-modified"
    weights = cut_then(mirror, lambda: None)
    assert sha256(weights) == sha256(ALLENNLP / "lm_weights.hdf5")
    assert [g[2] for g in mirror.gets(SMALL.weights_name)] == [200, 206]
    assert mirror.headers[-1]["If-Range"].endswith("GMT")


def test_a_server_ignoring_if_range_is_caught_by_its_etag(mirror, other_weights):
    mirror.ignore_if_range = True
    weights = cut_then(mirror, lambda: mirror.body.__setitem__(WEIGHTS_PATH, other_weights.read_bytes()))
    assert sha256(weights) == sha256(other_weights)
    assert [g[2] for g in mirror.gets(SMALL.weights_name)] == [200, 206, 200]  # the 206 of another file is dropped


@pytest.mark.parametrize("ignore_if_range", [False, True])
def test_a_strong_last_modified_never_splices_a_changed_file(mirror, other_weights, ignore_if_range):
    """Only Last-Modified (strong: the Date is years later); the file changes between the attempts."""
    mirror.validators, mirror.ignore_if_range = "last-modified", ignore_if_range
    weights = cut_then(mirror, lambda: mirror.body.__setitem__(WEIGHTS_PATH, other_weights.read_bytes()))
    assert sha256(weights) == sha256(other_weights)  # the new file whole, not the old head with the new tail
    gets = mirror.gets(SMALL.weights_name)
    assert gets[1][1] is not None and mirror.headers[-2 if ignore_if_range else -1]["If-Range"].endswith("GMT")  # it did resume
    assert [status for _, _, status in gets] == ([200, 206, 200] if ignore_if_range else [200, 200])


def test_the_part_records_both_validators_and_the_date(mirror):
    size = (ALLENNLP / "lm_weights.hdf5").stat().st_size
    mirror.cut[WEIGHTS_PATH] = size // 2
    with pytest.raises(WeightsError, match="interrupted"):
        download.download("elmo-small", progress=False)
    record = json.loads((published.model_dir("elmo-small") / (SMALL.weights_name + ".part.json")).read_text())
    assert record["etag"].startswith('"') and record["last_modified"].endswith("GMT") and record["date"].endswith("GMT")


@pytest.mark.parametrize("ignore_if_range", [False, True])
def test_a_last_modified_in_the_same_second_as_its_date_is_weak_and_restarts(mirror, other_weights, ignore_if_range):
    mirror.validators, mirror.same_second, mirror.ignore_if_range = "last-modified", True, ignore_if_range
    weights = cut_then(mirror, lambda: mirror.body.__setitem__(WEIGHTS_PATH, other_weights.read_bytes()))
    assert sha256(weights) == sha256(other_weights)
    assert [g[1] for g in mirror.gets(SMALL.weights_name)] == [None, None]  # never asked to resume


def test_a_resumed_answer_at_another_offset_restarts(mirror):
    mirror.range_shift = 1  # a 206 that starts one byte after the one asked for
    weights = cut_then(mirror, lambda: None)
    assert sha256(weights) == sha256(ALLENNLP / "lm_weights.hdf5")
    assert [g[2] for g in mirror.gets(SMALL.weights_name)] == [200, 206, 200]


def test_a_mirror_that_gzips_is_read_as_sent(mirror):
    mirror.gzip = {OPTIONS_PATH, WEIGHTS_PATH}  # gzips what a client accepts gzipped
    folder = download.download("elmo-small", progress=False)
    assert (folder / SMALL.options_name).read_bytes() == (ALLENNLP / "options.json").read_bytes()
    assert all(h.get("Accept-Encoding") == "identity" for h in mirror.headers)


def test_a_mirror_that_gzips_regardless_is_decoded_once_complete(mirror):
    mirror.force_gzip = {OPTIONS_PATH}
    folder = download.download("elmo-small", progress=False)
    assert (folder / SMALL.options_name).read_bytes() == (ALLENNLP / "options.json").read_bytes()


def gzip_members(*parts: bytes) -> bytes:
    import gzip

    return b"".join(gzip.compress(part, mtime=0) for part in parts)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda coded: coded[:-6], "truncated"),  # the CRC and length lost
        (lambda coded: coded + b"trailing", "other bytes follow"),
        (lambda coded: coded + b"\0" * 16, "other bytes follow"),  # zero padding is not a member either
    ],
    ids=["truncated", "trailing-garbage", "zero-padding"],
)
def test_a_damaged_gzip_body_is_refused_and_removed(mirror, damage, message):
    mirror.encoded[OPTIONS_PATH] = damage(gzip_members((ALLENNLP / "options.json").read_bytes()))
    with pytest.raises(WeightsError, match=message) as info:
        download.download("elmo-small", progress=False)
    assert "\n" not in str(info.value) and OPTIONS_PATH in str(info.value)
    assert not published.model_dir("elmo-small").exists()


def test_a_gzip_body_of_two_members_is_read_whole(mirror):
    options = (ALLENNLP / "options.json").read_bytes()
    mirror.encoded[OPTIONS_PATH] = gzip_members(options[:40], options[40:])
    folder = download.download("elmo-small", progress=False)
    assert (folder / SMALL.options_name).read_bytes() == options


def test_redirects_stay_on_the_same_origin_unless_allowed(mirror, monkeypatch):
    elsewhere = f"http://localhost:{mirror.port}/allennlp/{SMALL.folder}moved.hdf5"
    shutil.copy(ALLENNLP / "lm_weights.hdf5", mirror.root / "allennlp" / SMALL.folder / "moved.hdf5")
    mirror.redirect[WEIGHTS_PATH] = elsewhere  # another host (same machine, other name)
    with pytest.raises(WeightsError) as info:
        download.download("elmo-small", progress=False)
    message = str(info.value)
    assert "redirects to " + elsewhere in message and SMALL.weights_name in message and "\n" not in message
    assert not download.is_cached("elmo-small")
    monkeypatch.setenv(published.REDIRECT_ENV, f"http://localhost:{mirror.port}")
    download.download("elmo-small", progress=False)
    assert sha256(published.model_dir("elmo-small") / SMALL.weights_name) == sha256(ALLENNLP / "lm_weights.hdf5")


def test_a_redirect_on_the_same_origin_is_followed(mirror):
    shutil.copy(ALLENNLP / "lm_weights.hdf5", mirror.root / "allennlp" / SMALL.folder / "moved.hdf5")
    mirror.redirect[WEIGHTS_PATH] = f"/allennlp/{SMALL.folder}moved.hdf5"
    assert_same_model(load_bilm("elmo-small"), load_bilm(ALLENNLP))


def test_a_chunked_body_is_capped(mirror, monkeypatch):
    mirror.chunked = {OPTIONS_PATH, WEIGHTS_PATH}
    mirror.trailing[OPTIONS_PATH] = 64 << 20  # a server that keeps sending
    with pytest.raises(WeightsError, match=r"sent more than the most a .json file may hold \(1,048,576 bytes\)"):
        download.download("elmo-small", progress=False)
    assert mirror.sent[OPTIONS_PATH] < 32 << 20  # stopped reading early (what the socket buffers took aside)
    assert not published.model_dir("elmo-small").exists()
    # with a known size in the registry, that is the cap
    size = (ALLENNLP / "lm_weights.hdf5").stat().st_size
    entry = dataclasses.replace(SMALL, sizes={SMALL.weights_name: size})
    monkeypatch.setitem(published.PUBLISHED, "elmo-small", entry)
    mirror.trailing = {WEIGHTS_PATH: 1 << 20}
    with pytest.raises(WeightsError, match=f"sent more than the known size of {SMALL.weights_name} \\({size:,} bytes\\)"):
        download.download("elmo-small", progress=False)
    mirror.trailing = {}
    download.download("elmo-small", progress=False)  # chunked and of the right size: fine
    assert download.is_cached("elmo-small")


def test_a_404_leaves_nothing_behind(mirror):
    (mirror.root / "allennlp" / SMALL.folder / SMALL.options_name).unlink()
    with pytest.raises(WeightsError, match="HTTP 404"):
        download.download("elmo-small", progress=False)
    assert not published.model_dir("elmo-small").exists()


def test_a_complete_part_answered_416_is_kept(mirror):
    data = (ALLENNLP / "lm_weights.hdf5").read_bytes()
    mirror.cut[WEIGHTS_PATH] = len(data) // 2
    with pytest.raises(WeightsError, match="interrupted"):
        download.download("elmo-small", progress=False)
    part = published.model_dir("elmo-small") / (SMALL.weights_name + ".part")
    part.write_bytes(data)  # killed after the last byte, before the rename
    download.download("elmo-small", progress=False)
    assert [g[2] for g in mirror.gets(SMALL.weights_name)] == [200, 416]  # not fetched a third time
    assert sha256(published.model_dir("elmo-small") / SMALL.weights_name) == sha256(ALLENNLP / "lm_weights.hdf5")


def test_a_download_waiting_on_the_lock_survives_the_first_ones_cleanup(mirror):
    """The first process fails and removes the folder it made while a second waits on the lock."""
    import threading

    from filelock import FileLock

    folder = published.model_dir("elmo-small")
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder.parent / ".elmo-small.lock"))
    lock.acquire()
    errors = []
    thread = threading.Thread(target=lambda: _catch(errors, lambda: download.download("elmo-small", progress=False)))
    thread.start()
    import time

    time.sleep(1.0)  # the second download is waiting on the lock now
    if folder.exists():
        folder.rmdir()  # what the first one's cleanup did
    lock.release()
    thread.join(60)
    assert errors == [] and download.is_cached("elmo-small")


def _catch(errors, call):
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the test reports it
        errors.append(err)


def test_the_record_holds_the_transfer_and_pins_are_checked(mirror, capsys):
    folder = download.download("elmo-small", progress=False)
    entry = json.loads((folder / download.RECORD_NAME).read_text())["files"][SMALL.weights_name]
    assert entry["sha256"] == sha256(ALLENNLP / "lm_weights.hdf5")
    assert entry["etag"].startswith('"') and entry["url"].endswith(SMALL.weights_name) and entry["last_modified"]
    wrong = "0" * 64
    with pytest.raises(WeightsError, match=f"has SHA-256 {entry['sha256']}, not the pinned {wrong}"):
        download.download("elmo-small", progress=False, sha256={SMALL.weights_name: wrong})
    download.download("elmo-small", progress=False, sha256={SMALL.weights_name: entry["sha256"].upper()})
    with pytest.raises(WeightsError, match="failed the checks and were removed .*not the pinned"):
        download.download("elmo-small", progress=False, force=True, sha256={SMALL.weights_name: wrong})
    assert not (folder / SMALL.weights_name).exists()
    with pytest.raises(WeightsError, match="is not a SHA-256"):
        download.download("elmo-small", progress=False, sha256={SMALL.weights_name: "abc"})
    with pytest.raises(WeightsError, match="is not a file of elmo-small"):
        download.download("elmo-small", progress=False, sha256={"other.hdf5": wrong})
    capsys.readouterr()
    assert main(["download", "elmo-small", "--sha256", f"{SMALL.weights_name}={wrong}"]) != 0
    assert "not the pinned" in capsys.readouterr().err
    assert main(["download", "elmo-small", "--sha256", f"{SMALL.weights_name}={entry['sha256']}"]) == 0
    assert main(["download", "elmo-small", "--sha256", "no-equals-sign"]) != 0
    assert "FILE=HEX" in capsys.readouterr().err


def test_registry_pins_are_checked_on_cached_loads(mirror, monkeypatch):
    download.download("elmo-small", progress=False)
    entry = dataclasses.replace(SMALL, sha256={SMALL.options_name: "1" * 64})
    monkeypatch.setitem(published.PUBLISHED, "elmo-small", entry)
    with pytest.raises(WeightsError, match="not the pinned 1111"):
        load_bilm("elmo-small")
