"""The package's one gzip reader: the whole stream or an error; every reader of .gz files uses it."""
from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from spacy_elmo import assets, gzipped
from spacy_elmo.embedding.reader import iter_raw_lines
from spacy_elmo.evaluation.wsd_data import read_gold
from spacy_elmo.evaluation.wsi_score import read_key
from spacy_elmo.induction.corpus import read_sentences
from spacy_elmo.training.corpus import prepare_corpus

TEXT = "".join(f"line {i} of the text\n" for i in range(5000)).encode("utf-8")
CODED = gzip.compress(TEXT, mtime=0)
DAMAGED = {
    "truncated": (CODED[: len(CODED) // 2], "truncated"),
    "no-trailer": (CODED[:-8], "truncated"),  # the CRC and length cut off
    "trailing-garbage": (CODED + b"garbage", "other bytes follow"),
    "zero-padding": (CODED + b"\0" * 512, "other bytes follow"),
    "corrupt-crc": (CODED[:-8] + b"\0\0\0\0" + CODED[-4:], "incorrect data check"),
    "empty": (b"", "empty"),
}


def write(tmp_path: Path, data: bytes, name: str = "text.txt.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_stream_is_an_error_naming_the_file(tmp_path, case):
    data, message = DAMAGED[case]
    path = write(tmp_path, data)
    with pytest.raises(gzipped.GzipError, match=message) as info:
        with gzipped.open_gzip(path) as handle:
            handle.read()
    assert str(path) in str(info.value)


def test_two_members_read_whole_in_any_block_size(tmp_path):
    second = "a second member\n".encode("utf-8")
    path = write(tmp_path, CODED + gzip.compress(second))
    with gzipped.open_gzip(path, "rt") as handle:
        assert handle.read() == (TEXT + second).decode("utf-8")
    data = path.read_bytes()
    for size in (1, 3, 4096):
        pieces = gzipped.decode_chunks((data[i : i + size] for i in range(0, len(data), size)), "two")
        assert b"".join(pieces) == TEXT + second


def test_a_stream_split_between_the_magic_bytes_of_the_next_member(tmp_path):
    data = CODED + gzip.compress(b"x")
    chunks = [data[: len(CODED) + 1], data[len(CODED) + 1 :]]  # b"\x1f" | b"\x8b..."
    assert b"".join(gzipped.decode_chunks(iter(chunks), "split")) == TEXT + b"x"


def test_a_bomb_comes_out_in_bounded_pieces():
    coded = gzip.compress(b"\0" * (64 << 20))
    assert max(len(piece) for piece in gzipped.decode_chunks([coded], "bomb")) <= gzipped.PIECE


def test_open_read_opens_plain_files_as_they_are(tmp_path):
    plain = write(tmp_path, TEXT, "text.txt")
    with gzipped.open_read(plain, "rt") as handle:
        assert handle.readline() == "line 0 of the text\n"
    with pytest.raises(ValueError, match="reads only"):
        gzipped.open_gzip(plain, "wb")


def test_deflate_is_one_stream():
    import zlib

    assert b"".join(gzipped.decode_chunks([zlib.compress(TEXT)], "d", deflate=True)) == TEXT
    with pytest.raises(gzipped.GzipError, match="other bytes follow"):
        list(gzipped.decode_chunks([zlib.compress(TEXT) + zlib.compress(TEXT)], "d", deflate=True))


def _training(path: Path) -> object:
    return prepare_corpus([path], path.parent / "out", held_out=0)


def _embedding(path: Path) -> object:
    return list(iter_raw_lines([path]))


def _senses(path: Path) -> object:
    return list(read_sentences([path]))


def _assets(path: Path) -> object:
    with assets.open_text(path) as handle:
        return handle.read()


def _wsd_gold(path: Path) -> object:
    return read_gold(path)


def _wsi_key(path: Path) -> object:
    return read_key(path)


READERS = {"training": _training, "embedding": _embedding, "senses": _senses, "assets": _assets, "wsd-gold": _wsd_gold, "wsi-key": _wsi_key}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("case", ["zero-padding", "trailing-garbage", "truncated"])
def test_every_reader_of_gz_files_refuses_a_damaged_one(tmp_path, reader, case):
    """Zero padding passed Python's gzip module silently; here every reader refuses it."""
    lines = b"".join(b"w%d w.%d s%d\n" % (i, i, i % 3) for i in range(2000))  # also a key and a gold file
    coded = gzip.compress(lines, mtime=0)
    data = {"zero-padding": coded + b"\0" * 64, "trailing-garbage": coded + b"garbage", "truncated": coded[:-8]}[case]
    path = write(tmp_path, data)
    with pytest.raises((gzipped.GzipError, ValueError), match="text.txt.gz"):
        READERS[reader](path)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_of_gz_files_reads_two_members_whole(tmp_path, reader):
    lines = [b"w%d w.%d s%d\n" % (i, i, i % 3) for i in range(40)]
    path = write(tmp_path, gzip.compress(b"".join(lines[:20])) + gzip.compress(b"".join(lines[20:])))
    whole = write(tmp_path, b"".join(lines), "whole.txt")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    got = READERS[reader](path.rename(tmp_path / "a" / path.name))
    want = READERS[reader](whole.rename(tmp_path / "b" / "text.txt"))
    if reader == "training":
        assert got["train"].sentences == want["train"].sentences == 40  # type: ignore[index]
    elif reader == "embedding":
        assert [raw for _, _, raw in got] == [raw for _, _, raw in want]  # type: ignore[attr-defined]
    elif reader == "senses":
        assert [s.text for s in got] == [s.text for s in want]  # type: ignore[attr-defined]
    else:
        assert got == want


def test_a_text_reader_sees_the_error_only_at_the_damage(tmp_path):
    """Streaming: the lines before the damage arrive, then the error (no silent short read)."""
    path = write(tmp_path, CODED + b"junk")
    seen = []
    with pytest.raises(gzipped.GzipError):
        with gzipped.open_gzip(path, "rt") as handle:
            for line in handle:
                seen.append(line)
    assert "".join(seen) == TEXT.decode("utf-8")
    with gzipped.open_gzip(path) as handle:
        assert isinstance(handle, io.BufferedReader)
