"""The hub's download path as steps (fetch into a private part, verify everything, record, move
into place): an archive that fails any check (a member's CRC, a compression method the reader
cannot read, the conversion) is removed and never recorded, so that fetching the intact archive
works; following ``weights`` from induce's ``load_head`` enters hub/download.py at most twice;
every folder of the cache is made private, reading an authors' folder included."""
from __future__ import annotations

import io
import os
import shutil
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.hub import download, efml_archive, first_seen, published
from spacy_elmo.hub.efml import converted_folder

from .loopback_http import LoopbackServer
from .test_cache_folder import mode, umask
from .test_hub_records import trace
from .test_published_efml import ARCHIVE_PATH, FIXTURE, MODEL, assert_same_model, zip_folder


@pytest.fixture()
def served(tmp_path, monkeypatch):
    root = tmp_path / "served"
    zip_folder(FIXTURE, root / ARCHIVE_PATH)
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url)
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def stored_archive(target: Path) -> bytes:
    """The fixture's model folder in a zip archive whose members are stored (not compressed)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as handle:
        for path in sorted(FIXTURE.iterdir()):
            handle.write(path, path.name)
    return buffer.getvalue()


def damaged_crc(data: bytes, member: str) -> bytes:
    """``data`` with one byte of ``member``'s stored content flipped: its CRC no longer matches."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(member)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    start += struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])[1] - len(info.extra)  # local extra length
    position = start + info.compress_size // 2
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


def unknown_method(data: bytes, member: str, method: int = 98) -> bytes:
    """``data`` with ``member`` marked as compressed by ``method`` (98: PPMd, which Python cannot read)."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(member)
    out = bytearray(data)
    out[info.header_offset + 8 : info.header_offset + 10] = struct.pack("<H", method)
    name = info.filename.encode()
    central = out.find(b"PK\x01\x02")
    while central != -1:
        length = struct.unpack("<H", out[central + 28 : central + 30])[0]
        if bytes(out[central + 46 : central + 46 + length]) == name:
            out[central + 10 : central + 12] = struct.pack("<H", method)
        central = out.find(b"PK\x01\x02", central + 4)
    return bytes(out)


def assert_nothing_recorded():
    assert first_seen.first_seen(MODEL) == {}
    folder = MODEL.cache_dir
    left = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    assert left == [], left  # no archive, no part, no conversion, no record


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda data: damaged_crc(data, "encoder.pkl"), "CRC"),
        (lambda data: unknown_method(data, "char.dic"), "compression method"),
    ],
)
def test_a_damaged_archive_is_removed_never_recorded_and_the_intact_one_then_downloads(served, damage, says):
    intact = stored_archive(served.root / ARCHIVE_PATH)
    (served.root / ARCHIVE_PATH).write_bytes(damage(intact))
    with pytest.raises(WeightsError) as caught:
        download.download("efml-de", progress=False)
    message = str(caught.value)
    assert says in message and "removed" in message and "again" in message and "\n" not in message
    assert_nothing_recorded()
    # before: the damaged archive's digest was the first-seen one, and --force of the intact one was refused
    (served.root / ARCHIVE_PATH).write_bytes(intact)
    download.download("efml-de", force=True, progress=False)
    assert first_seen.first_seen(MODEL)[MODEL.archive]["sha256"] == download.sha256_of(MODEL.cache_dir / MODEL.archive)
    assert_same_model(load_bilm("efml-de"), load_bilm(FIXTURE))


def test_an_archive_whose_conversion_fails_is_removed_and_never_recorded(served, monkeypatch):
    def broken(source, out, within=None):
        raise WeightsError("the encoder's weights cannot be read")

    monkeypatch.setattr(efml_archive, "convert_efml", broken)
    with pytest.raises(WeightsError, match="removed .*encoder.s weights cannot be read"):
        load_bilm("efml-de")
    assert_nothing_recorded()


def test_an_archive_placed_by_hand_is_converted_before_it_is_recorded(served, tmp_path):
    folder = published.model_dir(MODEL)
    folder.mkdir(parents=True)
    (folder / MODEL.archive).write_bytes(damaged_crc(stored_archive(tmp_path), "encoder.pkl"))
    with pytest.raises(WeightsError, match="CRC"):
        download.cached_location(MODEL)
    assert first_seen.first_seen(MODEL) == {}


def test_following_weights_from_load_head_enters_download_at_most_twice(served):
    from spacy_elmo.induction.induce import load_head

    for _ in range(2):  # downloading, then from the cache
        given, entered = trace(lambda: load_head("efml-de"), "efml-de")
        assert given == {} and entered <= 2


def test_reading_an_authors_folder_makes_the_cache_private(tmp_path, monkeypatch):
    # before: the conversion's folders were made by a plain mkdir, 0775 under umask 002
    cache = tmp_path / "new" / "cache"
    monkeypatch.setenv(published.CACHE_ENV, str(cache))
    source = tmp_path / "model"
    shutil.copytree(FIXTURE, source)
    with umask(0o002):
        load_bilm(source)
    for folder in (cache.parent, cache, converted_folder(source).parent, converted_folder(source)):
        assert mode(folder) == 0o700, folder


def test_a_partial_file_is_private(served, monkeypatch):
    from spacy_elmo.hub import transfer

    seen = []
    real = transfer._finish

    def spy(dest, meta, url):
        seen.append(stat.S_IMODE(os.stat(transfer.part_path(dest)).st_mode))
        return real(dest, meta, url)

    monkeypatch.setattr(transfer, "_finish", spy)
    with umask(0o002):
        download.download("efml-de", progress=False)
    assert seen == [0o600]
