"""The package's one gzip reader: a gzip file is read whole or not at all.

zlib is driven here directly so that every check is explicit. The stream must reach the end of its
last member, whose CRC and length zlib checks (a truncated file is an error, never a short read);
every member is read, so a file of several members (``cat a.gz b.gz``, or what ``pigz`` and
``bgzip`` write) reads as their concatenation; and only another member may follow a member: any
other byte after the stream (trailing garbage, zero padding included) is an error that names the
offset where it starts. Each error is a :class:`GzipError` naming the file. The ``deflate``
content coding of HTTP (a zlib stream) goes through the same decoder and must be one stream.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Optional, Union

MAGIC = b"\x1f\x8b"
CHUNK = 1 << 16  # compressed bytes read at a time
PIECE = 1 << 16  # the most decoded bytes one step yields (a bomb cannot fill memory in one step)


class GzipError(gzip.BadGzipFile):
    """A gzip (or deflate) stream that is truncated, corrupt, or followed by other bytes."""


def is_gzip_name(path: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``path`` names a gzip file (``.gz``, any case)."""
    return os.fspath(path).lower().endswith(".gz")


def decode_chunks(chunks: Iterable[bytes], name: str, *, deflate: bool = False) -> Iterator[bytes]:
    """The decoded bytes of the compressed ``chunks`` (a gzip file, or one zlib stream when
    ``deflate``), in pieces of at most :data:`PIECE` bytes; raises :class:`GzipError` (naming
    ``name``) on a truncated or corrupt stream or on bytes after it."""
    wbits = zlib.MAX_WBITS if deflate else 16 + zlib.MAX_WBITS
    what = "deflate" if deflate else "gzip"
    decoder = zlib.decompressobj(wbits)
    offset = 0  # compressed bytes before ``data``
    started = False  # a member (or the zlib stream) has begun
    for data in chunks:
        while data:
            if decoder.eof:  # a member ended and more bytes follow: they must be the next member
                if deflate or not MAGIC.startswith(bytes(data[:2])):
                    raise GzipError(
                        f"{name}: {what} stream ends at byte {offset:,} but other bytes follow (trailing data or zero padding): refused"
                    )
                decoder = zlib.decompressobj(wbits)
            started = True
            try:
                out = decoder.decompress(data, PIECE)
            except zlib.error as err:
                raise GzipError(f"{name}: not a valid {what} stream near byte {offset:,} ({err})") from None
            if out:
                yield out
            rest = decoder.unused_data if decoder.eof else decoder.unconsumed_tail
            offset += len(data) - len(rest)
            data = rest
    while not decoder.eof and started:  # output held back by the PIECE bound
        try:
            out = decoder.decompress(b"", PIECE)
        except zlib.error as err:  # pragma: no cover - the input was already accepted
            raise GzipError(f"{name}: not a valid {what} stream ({err})") from None
        if not out:
            break
        yield out
    if not started:
        raise GzipError(f"{name}: empty, not a {what} stream")
    if not decoder.eof:
        raise GzipError(f"{name}: the {what} stream is truncated (it ends at byte {offset:,} before its end-of-stream marker)")


def read_chunks(handle: IO[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """Blocks of ``size`` bytes from ``handle`` until its end."""
    read: Callable[[], bytes] = lambda: handle.read(size)  # noqa: E731
    return iter(read, b"")


class _Reader(io.RawIOBase):
    """The decoded bytes of a gzip file as a raw stream (see :func:`open_gzip`)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._file = open(path, "rb")
        self._pieces = decode_chunks(read_chunks(self._file), str(path))
        self._buffer = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: "bytearray | memoryview") -> int:  # type: ignore[override]
        while not self._buffer:
            piece: Optional[bytes] = next(self._pieces, None)
            if piece is None:
                return 0
            self._buffer = memoryview(piece)
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


def open_gzip(path: Union[str, "os.PathLike[str]"], mode: str = "rb", *, encoding: str = "utf-8", errors: str = "strict") -> IO:
    """Open a gzip file for reading, decoded (``mode`` ``"rb"`` or ``"rt"``); reading past its end
    raises :class:`GzipError` on a truncated or corrupt stream or trailing bytes."""
    if mode not in ("rb", "rt", "r"):
        raise ValueError(f"open_gzip reads only: mode {mode!r} is not 'rb' or 'rt'")
    binary = io.BufferedReader(_Reader(Path(path)), CHUNK)
    return binary if mode == "rb" else io.TextIOWrapper(binary, encoding=encoding, errors=errors)


def open_read(path: Union[str, "os.PathLike[str]"], mode: str = "rb", *, encoding: str = "utf-8", errors: str = "strict") -> IO:
    """Open ``path`` for reading, through :func:`open_gzip` when its name ends in ``.gz``."""
    if is_gzip_name(path):
        return open_gzip(path, mode, encoding=encoding, errors=errors)
    if mode == "rb":
        return open(path, "rb")
    return open(path, "rt", encoding=encoding, errors=errors)
