"""Published models of other languages by name: the ELMoForManyLangs archives (efml-<language>)
downloaded from a loopback mirror, checked, unpacked safely, converted once, their digest recorded
at the first download and a changed copy refused; AllenNLP-format models whose shape is not stated;
the listing. The served archive holds the tests' ELMoForManyLangs fixture (tests/data/efml)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.bilm.layout import read_options
from spacy_elmo.bilm.model import BiLMConfig
from spacy_elmo.cli import main
from spacy_elmo.hub import archive, download, efml_archive, first_seen, published
from spacy_elmo.hub.efml_random import write_random_efml
from spacy_elmo.hub.load import read_config

from .conftest import ALLENNLP, REPO
from .loopback_http import LoopbackServer
from .test_hub_records import trace

FIXTURE = REPO / "tests" / "data" / "efml" / "model"
MODEL = published.PUBLISHED["efml-de"]
ARCHIVE_PATH = MODEL.mirror_path + MODEL.archive  # below the mirror: vectors.nlpl.eu/repository/11/142.zip
TEXT = "Die Bank am Fluss ."


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def zip_folder(folder: Path, target: Path, top: str = "") -> Path:
    """The files of ``folder`` in a zip archive, at its top or in folder ``top``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(folder.iterdir()):
            handle.write(path, f"{top}/{path.name}" if top else path.name)
    return target


def zip_members(target: Path, members, attrs=None) -> Path:
    """A zip archive of ``{name: bytes}``; ``attrs``: ``{name: {ZipInfo attribute: value}}``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as handle:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            for key, value in (attrs or {}).get(name, {}).items():
                setattr(info, key, value)
            handle.writestr(info, data)
    return target


def assert_same_model(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def tampered_folder(tmp_path: Path) -> Path:
    """Another valid model of the fixture's shape (other random values): a different archive."""
    config = json.loads((FIXTURE / "model_config.json").read_text())
    return write_random_efml(tmp_path / "tampered", config, seed=7)


@pytest.fixture()
def mirror(tmp_path, monkeypatch):
    """The fixture's folder zipped and served where a mirror keeps efml-de's archive."""
    root = tmp_path / "served"
    zip_folder(FIXTURE, root / ARCHIVE_PATH)
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url)
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def go_offline(monkeypatch):
    monkeypatch.setenv(published.MIRROR_ENV, "http://127.0.0.1:9/")  # port 9: nothing listens


def test_the_registry_names_every_elmoformanylangs_language(monkeypatch):
    monkeypatch.delenv(published.MIRROR_ENV, raising=False)
    efml = {name: m for name, m in published.PUBLISHED.items() if m.format == "efml"}
    assert len(efml) == 44 == len({m.language for m in efml.values()})
    assert sorted(int(m.archive.removesuffix(".zip")) for m in efml.values()) == list(range(136, 180))
    assert MODEL.url(MODEL.archive) == "http://vectors.nlpl.eu/repository/11/142.zip"
    for name, number in (("efml-ar", 136), ("efml-grc", 153), ("efml-nl", 164), ("efml-nb", 165), ("efml-ru", 170), ("efml-zh", 179)):
        model = published.PUBLISHED[name]
        assert model.url(model.archive).endswith(f"/repository/11/{number}.zip") and model.language == name.removeprefix("efml-")
    for model in published.PUBLISHED.values():
        assert model.language and model.licence and model.page.startswith("https://") and model.about
    config = MODEL.config  # their published shape, known by name
    assert (config.n_layers, config.lstm_dim, config.projection_dim, config.output_dim) == (2, 4096, 512, 1024)
    pt, ja = published.PUBLISHED["elmo-pt-contributed"], published.PUBLISHED["elmo-ja-exawizards"]
    assert pt.weights_url == "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/elmo_pt_weights.hdf5"
    assert ja.options_url == "https://exawizardsallenlp.blob.core.windows.net/data/options.json"
    assert (pt.language, ja.language, pt.shape, ja.shape) == ("pt", "ja", None, None)
    # a mirror holds AllenNLP's files at their path below allennlp/, another publisher's under HOST/PATH
    monkeypatch.setenv(published.MIRROR_ENV, "http://mirror.example/elmo")
    assert MODEL.url(MODEL.archive) == "http://mirror.example/elmo/vectors.nlpl.eu/repository/11/142.zip"
    assert pt.options_url == "http://mirror.example/elmo/models/elmo/contributed/pt/elmo_pt_options.json"
    assert ja.weights_url == "http://mirror.example/elmo/exawizardsallenlp.blob.core.windows.net/data/weights.hdf5"


def test_a_name_downloads_records_the_digest_and_converts_once(mirror, monkeypatch):
    bilm = load_bilm("efml-de")
    assert_same_model(bilm, load_bilm(FIXTURE))  # the authors' folder, read directly
    folder = MODEL.cache_dir
    assert sorted(p.name for p in folder.iterdir()) == sorted([MODEL.archive, download.RECORD_NAME, efml_archive.NATIVE])
    digest = sha256(mirror.root / ARCHIVE_PATH)
    assert sha256(folder / MODEL.archive) == digest
    seen = first_seen.first_seen(MODEL)[MODEL.archive]
    assert seen["sha256"] == digest and seen["url"].endswith(ARCHIVE_PATH) and seen["recorded"]
    assert first_seen.record_path().parent == folder.parent  # beside the models' folders, not inside one
    assert json.loads((folder / efml_archive.NATIVE / efml_archive.ARCHIVE_RECORD).read_text())["sha256"] == digest
    assert download.is_cached("efml-de")
    # later loads: offline, and nothing is unpacked or converted again
    requests = len(mirror.log)
    go_offline(monkeypatch)
    monkeypatch.setattr(efml_archive, "convert_efml", lambda *a: pytest.fail("converted twice"))
    assert_same_model(load_bilm("efml-de"), bilm)
    assert len(mirror.log) == requests


def test_the_model_folder_may_sit_in_one_folder_of_the_archive(mirror, tmp_path):
    zip_folder(FIXTURE, mirror.root / ARCHIVE_PATH, top="de.model")
    assert_same_model(load_bilm("efml-de"), load_bilm(FIXTURE))


def test_the_component_and_the_command_line_take_the_name(mirror, capsys, tmp_path):
    nlp = spacy.blank("de")
    nlp.add_pipe("elmo", config={"weights": "efml-de"})
    doc = nlp(TEXT)
    reference = spacy.blank("de")
    reference.add_pipe("elmo", config={"weights": str(FIXTURE)})
    np.testing.assert_array_equal(doc.tensor, reference(TEXT).tensor)
    capsys.readouterr()
    assert main(["embed", TEXT, "--weights", "efml-de", "--mix", "top"]) == 0
    assert capsys.readouterr().out.strip()


def test_a_changed_second_copy_is_refused_in_one_line(mirror, capsys, tmp_path):
    download.download("efml-de", progress=False)
    first = sha256(MODEL.cache_dir / MODEL.archive)
    zip_folder(tampered_folder(tmp_path), mirror.root / ARCHIVE_PATH)  # the mirror now serves another (valid) archive
    other = sha256(mirror.root / ARCHIVE_PATH)
    shutil.rmtree(MODEL.cache_dir)  # a second copy: the model's folder gone, the record of its first download kept
    with pytest.raises(WeightsError) as info:
        load_bilm("efml-de")
    message = str(info.value)
    assert "\n" not in message and "first download" in message and first in message and other in message
    assert not (MODEL.cache_dir / MODEL.archive).exists()  # nothing of it kept
    capsys.readouterr()
    assert main(["download", "efml-de", "--force"]) == 2
    err = capsys.readouterr().err  # the progress bar, then the error: one line, no traceback
    errors = [line for line in err.splitlines() if "first download" in line]
    assert len(errors) == 1 and errors[0].startswith("✘") and "Traceback" not in err
    # removing the model's entry from the record trusts the new file (a publisher's new upload)
    record = json.loads(first_seen.record_path().read_text())
    del record["efml-de"]
    first_seen.record_path().write_text(json.dumps(record))
    assert_same_model(load_bilm("efml-de"), load_bilm(tmp_path / "tampered"))
    assert first_seen.first_seen(MODEL)[MODEL.archive]["sha256"] == other


def test_a_cut_archive_download_resumes(mirror):
    size = (mirror.root / ARCHIVE_PATH).stat().st_size
    mirror.cut[ARCHIVE_PATH] = size // 2
    with pytest.raises(WeightsError, match="interrupted at .* run the same command again to resume"):
        load_bilm("efml-de")
    assert not download.is_cached("efml-de") and first_seen.first_seen(MODEL) == {}
    assert_same_model(load_bilm("efml-de"), load_bilm(FIXTURE))
    ranges = [entry[1] for entry in mirror.gets(MODEL.archive)]
    assert ranges[0] is None and ranges[1] is not None and ranges[1].startswith("bytes=")  # the second request resumed


def test_a_cached_archive_changed_later_is_refused(mirror):
    download.download("efml-de", progress=False)
    cached = MODEL.cache_dir / MODEL.archive
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="changed since it was recorded"):
        load_bilm("efml-de")


def test_english_names_record_their_first_download_too(tmp_path, monkeypatch):
    small = published.PUBLISHED["elmo-small"]
    served = tmp_path / "served" / "allennlp" / small.folder
    served.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", served / small.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", served / small.weights_name)
    server = LoopbackServer(tmp_path / "served")
    monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp/")
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    try:
        download.download(small, progress=False)
        assert set(first_seen.first_seen(small)) == {small.options_name, small.weights_name}
        options = json.loads((served / small.options_name).read_text())
        options["lstm"]["cell_clip"] = 2  # the same shape, another file
        (served / small.options_name).write_text(json.dumps(options))
        with pytest.raises(WeightsError, match="failed the checks and were removed .*first download"):
            download.download(small, progress=False, force=True)
    finally:
        server.close()


def _archive(tmp_path: Path, members, attrs=None) -> Path:
    return zip_members(tmp_path / "a.zip", members, attrs)


@pytest.mark.parametrize(
    "members, attrs, limits, words",
    [
        ({"../evil.txt": b"x"}, {}, (8, 1 << 20), "outside the folder"),
        ({"/absolute/evil.txt": b"x"}, {}, (8, 1 << 20), "outside the folder"),
        ({"C:/evil.txt": b"x"}, {}, (8, 1 << 20), "outside the folder"),
        ({"a\\..\\..\\evil.txt": b"x"}, {}, (8, 1 << 20), "backslash"),
        ({"link": b"/somewhere/else"}, {"link": {"external_attr": (stat.S_IFLNK | 0o777) << 16}}, (8, 1 << 20), "symbolic link"),
        ({"fifo": b""}, {"fifo": {"external_attr": (stat.S_IFIFO | 0o644) << 16}}, (8, 1 << 20), "not a plain file"),
        ({f"f{i}": b"x" for i in range(5)}, {}, (4, 1 << 20), "5 members, more than the 4"),
        ({"big": b"x" * 5000}, {}, (8, 4096), "more than 4,096 bytes"),
        ({"bomb": b"\0" * (4 << 20)}, {}, (8, 1 << 30), "zip bomb"),
        ({"Model.bin": b"x", "model.bin": b"y"}, {}, (8, 1 << 20), "named twice"),
    ],
)
def test_unsafe_archives_are_refused_before_anything_is_written(tmp_path, members, attrs, limits, words):
    path = _archive(tmp_path, members, attrs=attrs)
    out = tmp_path / "out" / "inner"
    with pytest.raises(WeightsError, match=words) as info:
        archive.unpack(path, out, *limits)
    assert "\n" not in str(info.value)
    assert not out.exists() and not (tmp_path / "evil.txt").exists() and not (tmp_path / "out" / "evil.txt").exists()


def test_archives_that_are_not_models_or_not_zips_are_refused(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"not a zip at all")
    with pytest.raises(WeightsError, match="not a readable zip archive"):
        efml_archive.check_archive(tmp_path / "x.zip")
    path = _archive(tmp_path, {"config.json": b"{}", "char.dic": b"a\t0\n"})
    with pytest.raises(WeightsError, match="holds no ELMoForManyLangs model folder"):
        efml_archive.check_archive(path)
    assert str(efml_archive.check_archive(zip_folder(FIXTURE, tmp_path / "ok.zip", top="de.model"))) == "de.model"
    plain = archive.unpack(zip_folder(FIXTURE, tmp_path / "plain.zip"), tmp_path / "plain", 16, 1 << 24)
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in FIXTURE.iterdir())


def test_an_unsafe_archive_from_the_mirror_is_removed(mirror, tmp_path):
    zip_members(mirror.root / ARCHIVE_PATH, {"config.json": b"{}", "../escape.txt": b"x"})
    with pytest.raises(WeightsError, match="failed the checks and were removed .*outside the folder"):
        load_bilm("efml-de")
    assert not (MODEL.cache_dir / MODEL.archive).exists() and not list(tmp_path.rglob("escape.txt"))
    assert first_seen.first_seen(MODEL) == {}  # nothing recorded for a refused file


def test_the_models_command_lists_language_format_and_size(mirror, capsys):
    capsys.readouterr()
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("efml-de "))
    assert line.split()[1:3] == ["de", "efml"] and "not stated" in line and line.rstrip().endswith("no")
    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    row = rows["efml-de"]
    assert (row["language"], row["format"], row["download_size"], row["parameters"], row["cached"]) == ("de", "efml", None, None, False)
    assert row["url"].endswith(ARCHIVE_PATH) and "not stated" in row["licence"] and row["page"].endswith("ELMoForManyLangs")
    assert rows["elmo-ja-exawizards"]["language"] == "ja" and rows["elmo-small"]["parameters"] > 0
    download.download("efml-de", progress=False)
    assert main(["models", "--json"]) == 0
    row = {r["name"]: r for r in json.loads(capsys.readouterr().out)}["efml-de"]
    assert row["cached"] and row["size_on_disk"] > (MODEL.cache_dir / MODEL.archive).stat().st_size  # the conversion counts


def test_a_name_without_a_stated_shape_reads_its_options_first(tmp_path, monkeypatch):
    pt = published.PUBLISHED["elmo-pt-contributed"]
    served = tmp_path / "served" / pt.mirror_path
    served.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", served / pt.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", served / pt.weights_name)
    server = LoopbackServer(tmp_path / "served")
    monkeypatch.setenv(published.MIRROR_ENV, server.url)
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    try:
        with pytest.raises(WeightsError, match="states no shape"):
            pt.config
        config = read_config("elmo-pt-contributed")
        assert config == BiLMConfig.from_options(read_options(ALLENNLP / "options.json"), source="fixture")
        assert [entry[0] for entry in server.log] == [pt.mirror_path + pt.options_name]  # the options only
        assert_same_model(load_bilm("elmo-pt-contributed"), load_bilm(ALLENNLP))
        assert len(server.gets(pt.options_name)) == 1 and len(server.gets(pt.weights_name)) == 1
        nlp = spacy.blank("pt")
        nlp.add_pipe("elmo", config={"weights": "elmo-pt-contributed"})
        assert nlp("O banco do rio").tensor.shape == (4, config.output_dim)
    finally:
        server.close()


def test_redirects_follow_only_the_origins_a_record_names(mirror, tmp_path):
    other = LoopbackServer(mirror.root)
    try:
        mirror.redirect[ARCHIVE_PATH] = other.url + ARCHIVE_PATH
        with pytest.raises(WeightsError, match="another scheme or host: refused"):
            download.download(dataclasses.replace(MODEL, redirects=()), progress=False)
        download.download(dataclasses.replace(MODEL, redirects=(other.url.rstrip("/"),)), progress=False)
        assert len(other.gets(MODEL.archive)) == 1 and download.is_cached(MODEL)
    finally:
        other.close()


def test_the_name_is_looked_up_once(mirror):
    for _ in range(2):  # downloading and converting, then from the cache
        given, entered = trace(lambda: load_bilm("efml-de"), "efml-de")
        assert given == {} and entered <= 2
    given, _ = trace(lambda: read_config("efml-de"), "efml-de")
    assert given == {}
