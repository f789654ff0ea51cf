"""Loads you can trust: a carried biLM is checked only against itself while a saved pipeline is
restored (not against whatever its configured weights path holds now); a saved ``weights.pt`` is
checked against the SHA-256 recorded at its save (folders saved before that still load, with the
size check); an archive's ``config_path`` that resolves outside the unpacked archive is never read."""
from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest
import spacy

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.bilm.layout import read_options
from spacy_elmo.bilm.model import BiLM, BiLMConfig
from spacy_elmo.bilm.weights import CONFIG_NAME, WEIGHTS_NAME, load_native, save_native
from spacy_elmo.hub import first_seen, published

from .conftest import ALLENNLP
from .loopback_http import LoopbackServer
from .test_published_efml import ARCHIVE_PATH, FIXTURE, MODEL

TEXT = "The bank raised its rates."


def one_layer_model(folder):
    """Another biLM (one LSTM layer, so two output layers) saved at ``folder``."""
    options = read_options(ALLENNLP / "options.json")
    options["lstm"]["n_layers"] = 1
    save_native(BiLM(BiLMConfig.from_options(options, source="test")), folder)


def test_a_carried_biLM_is_checked_against_itself_not_the_configured_weights(tmp_path):
    # before: ValueError "elmo: config mix: ..." from spacy.load, the mix checked against the new model
    weights = tmp_path / "weights"
    shutil.copytree(ALLENNLP, weights)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(weights), "mix": [1, 2, 3]})
    expected = np.asarray(nlp(TEXT)._.elmo_vectors)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(weights)
    one_layer_model(weights)  # the configured path now holds a model with two output layers
    loaded = spacy.load(tmp_path / "pipeline")
    assert np.array_equal(np.asarray(loaded(TEXT)._.elmo_vectors), expected)
    with pytest.raises(ValueError, match="config mix"):  # a component built from the config alone is still checked
        spacy.blank("en").add_pipe("elmo", config={"weights": str(weights), "mix": [1, 2, 3]})


def flip_a_weight_byte(path):
    """Change one low-order byte of the largest tensor's data in a saved ``weights.pt`` (a zip of
    stored records): the file keeps its size, and torch reads it without complaint."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as handle:
        info = max(handle.infolist(), key=lambda i: i.file_size)
    local_extra = int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + len(info.filename.encode()) + local_extra
    position = start + (info.file_size // 8) * 4  # the lowest byte of a float32 (little-endian): a small change
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture()
def saved(tmp_path):
    folder = tmp_path / "saved"
    save_native(load_bilm(ALLENNLP), folder)
    return folder


def test_a_damaged_weights_file_of_the_recorded_size_is_refused(saved):
    size = (saved / WEIGHTS_NAME).stat().st_size
    flip_a_weight_byte(saved / WEIGHTS_NAME)
    assert (saved / WEIGHTS_NAME).stat().st_size == size
    with pytest.raises(WeightsError, match="not its SHA-256") as caught:  # before: loaded, its vectors changed
        load_native(saved)
    assert "\n" not in str(caught.value)


def test_a_folder_saved_before_the_digest_still_loads_with_the_size_check(saved):
    meta = json.loads((saved / CONFIG_NAME).read_text())
    assert set(meta["sha256"]) == {WEIGHTS_NAME}
    del meta["sha256"]
    (saved / CONFIG_NAME).write_text(json.dumps(meta))
    reference = load_bilm(ALLENNLP)
    assert all(np.array_equal(a.detach().numpy(), b.detach().numpy()) for a, b in zip(load_native(saved).parameters(), reference.parameters()))
    with open(saved / WEIGHTS_NAME, "ab") as handle:
        handle.write(b"\0" * 8)
    with pytest.raises(WeightsError, match="mixes two saves"):
        load_native(saved)


def test_an_archives_config_path_outside_it_is_never_read(tmp_path, monkeypatch):
    # before: the conversion read ../model_config.json, a file beside the unpacked archive in the cache
    root = tmp_path / "served"
    target = root / ARCHIVE_PATH
    target.parent.mkdir(parents=True)
    settings = json.loads((FIXTURE / "config.json").read_text())
    settings["config_path"] = "../outside_config.json"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(FIXTURE.iterdir()):
            if path.name not in ("config.json", "model_config.json"):
                handle.write(path, path.name)
        handle.writestr("config.json", json.dumps(settings))
    server = LoopbackServer(root)
    try:
        monkeypatch.setenv(published.MIRROR_ENV, server.url)
        monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
        MODEL.cache_dir.mkdir(parents=True)
        shutil.copy(FIXTURE / "model_config.json", MODEL.cache_dir / "outside_config.json")  # where ../ leads from the unpacked folder
        with pytest.raises(WeightsError, match="resolves outside the archive: refused"):
            load_bilm("efml-de")
        assert first_seen.first_seen(MODEL) == {}
    finally:
        server.close()
