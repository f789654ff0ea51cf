"""One file over HTTP into ``NAME.part`` (created 0600), resumable only when the server proves it is the same file.

``NAME.part.json`` beside the part records the URL asked for, both validators the server sent
(ETag and Last-Modified), its Date and the content coding. A part resumes only on a validator that
proves the file unchanged: a strong ETag, else a Last-Modified that is strong by RFC 9110's rule
(section 8.8.2.2: the recorded Date is at least one second after it). Anything else (a weak ETag,
a Last-Modified from the same second as its Date or with no Date, no validator, another URL)
restarts from zero. A resumed request sends ``Range`` with ``If-Range`` set to that validator; a
server whose file changed answers 200 with the whole new file, and the part restarts from zero.
A 206 is appended only when it carries the validator resumed with, each validator it carries
equals the recorded one, and its ``Content-Range`` starts at the requested byte; otherwise (a
server that ignores ``If-Range``) the part restarts from zero. A 416 on a part that already has
the whole file keeps it. The body is read as sent (``Accept-Encoding: identity``; a server that
gzips anyway is decoded once complete), counted against the announced length, the registry's
known size or a ceiling per kind of file, and the transfer stops as soon as it goes past.
Redirects are followed only within the same scheme and host, or to origins listed in
``SPACY_ELMO_ALLOW_REDIRECT``.
"""

from __future__ import annotations

import json
import os
import sys
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Tuple
from urllib.parse import urljoin

from ..bilm.errors import WeightsError
from ..files import write_json
from ..gzipped import GzipError, decode_chunks, read_chunks
from .published import MIRROR_ENV, REDIRECT_ENV, origin, redirect_origins

STREAM_CHUNK = 1 << 16  # an interrupted read loses at most this much of what was received
MAX_REDIRECTS = 5
SIDECAR_SUFFIX = ".part.json"
# the most a file of each kind may hold when neither the server nor the registry gives its length
CEILINGS = {".json": 1 << 20, ".txt": 1 << 28}
DEFAULT_CEILING = 1 << 35  # 32 GiB: an HDF5 file of weights or a softmax


class Interrupted(WeightsError):
    """A transfer that stopped early; its ``.part`` is kept and resumes on the next run."""


class Unreachable(WeightsError):
    """No answer from the server (no HTTP status)."""

    def __init__(self, url: str, err: BaseException) -> None:
        reason = getattr(err, "reason", None) or type(err).__name__
        super().__init__(str(reason))
        self.url = url


class Fetched(NamedTuple):
    """A complete ``.part`` and what the server said about it."""

    part: Path
    url: str
    etag: Optional[str]
    last_modified: Optional[str]


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def sidecar_path(dest: Path) -> Path:
    return dest.with_name(dest.name + SIDECAR_SUFFIX)


def discard(dest: Path) -> None:
    """Remove the part of ``dest`` and its sidecar."""
    part_path(dest).unlink(missing_ok=True)
    sidecar_path(dest).unlink(missing_ok=True)


def open_private(path: Path, mode: str) -> Any:
    """``path`` opened for writing (``"wb"``) or appending (``"ab"``), created 0600 whatever the umask."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    return os.fdopen(os.open(path, flags | getattr(os, "O_BINARY", 0), 0o600), mode)


def ceiling(dest: Path) -> int:
    return CEILINGS.get(dest.suffix.lower(), DEFAULT_CEILING)


def _read_sidecar(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _seconds(stamp: Any) -> Optional[float]:
    """An HTTP date as seconds since the epoch (None when absent or not a date)."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def strong_last_modified(modified: Any, date: Any) -> bool:
    """RFC 9110 section 8.8.2.2: a Last-Modified is a strong validator for the client that holds
    the Date of the same answer and that Date is at least one second later (the file could not
    have changed again within the second it names)."""
    then, now = _seconds(modified), _seconds(date)
    return then is not None and now is not None and now - then >= 1


def _if_range(meta: Dict[str, Any]) -> Optional[str]:
    """The validator to resume with: a strong ETag, else a strong Last-Modified (recorded with
    the Date of the same answer); None when neither proves the file unchanged."""
    etag = meta.get("etag")
    if isinstance(etag, str) and etag and not etag.startswith("W/"):
        return etag
    modified = meta.get("last_modified")
    return modified if strong_last_modified(modified, meta.get("date")) else None


def _agrees(meta: Dict[str, Any], etag: Optional[str], modified: Optional[str]) -> bool:
    """Each validator an answer carries equals the recorded one."""
    return (etag is None or etag == meta.get("etag")) and (modified is None or modified == meta.get("last_modified"))


def _get(url: str, headers: Dict[str, str], redirects: Tuple[str, ...] = ()) -> Any:
    """GET ``url`` (streamed), following redirects to the same origin or an allowed one: from
    ``SPACY_ELMO_ALLOW_REDIRECT``, or one of ``redirects`` (those its registry entry names)."""
    import requests

    allowed = {origin(url), *redirect_origins(), *(origin(r) for r in redirects)}
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            response = requests.get(current, headers=headers, stream=True, timeout=(15, 60), allow_redirects=False)
        except requests.RequestException as err:
            raise Unreachable(current, err) from None
        location = response.headers.get("Location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            return response
        response.close()
        target = urljoin(current, location)
        if origin(target) not in allowed:
            raise WeightsError(
                f"{url} redirects to {target}, another scheme or host: refused (set {REDIRECT_ENV}={origin(target)} "
                f"to allow it, or point {MIRROR_ENV} at the files' real location)"
            )
        current = target
    raise WeightsError(f"{url}: more than {MAX_REDIRECTS} redirects; check {MIRROR_ENV}")


def _range_total(content_range: str, start: Optional[int]) -> Tuple[bool, Optional[int]]:
    """Whether ``bytes START-END/TOTAL`` (or ``bytes */TOTAL`` when ``start`` is None) is well
    formed and starts at ``start``, and its TOTAL (None when ``*``)."""
    try:
        unit, rest = content_range.strip().split(" ", 1)
        span, total = rest.split("/", 1)
        first = None if span == "*" else int(span.split("-", 1)[0])
    except ValueError:
        return False, None
    return unit == "bytes" and first == start, int(total) if total.isdigit() else None


def fetch(url: str, dest: Path, *, progress: bool = True, known_size: Optional[int] = None, redirects: Tuple[str, ...] = ()) -> Fetched:
    """Stream ``url`` into ``dest``'s ``.part`` (resuming it when the server proves the file is the
    same) and return it complete; raises :class:`Interrupted` (part kept) when the transfer stops
    early, :class:`Unreachable` without an answer, and :class:`WeightsError` otherwise.
    ``redirects``: origins a redirect may lead to besides ``url``'s own and the allowed ones."""
    for _ in range(3):  # a restart (changed file, server ignoring If-Range) happens at most twice
        result = _fetch_once(url, dest, progress, known_size, redirects)
        if result is not None:
            return result
    raise WeightsError(f"{url}: the file kept changing during the download; run again later")  # pragma: no cover


def _fetch_once(url: str, dest: Path, progress: bool, known_size: Optional[int], redirects: Tuple[str, ...]) -> Optional[Fetched]:
    import requests
    import urllib3

    from ..progress import progress_bar

    part, meta_path = part_path(dest), sidecar_path(dest)
    meta = _read_sidecar(meta_path)
    have = part.stat().st_size if part.is_file() else 0
    condition = _if_range(meta) if have and meta.get("url") == url else None
    if have and condition is None:  # nothing proves the part comes from this file: start again
        discard(dest)
        have, meta = 0, {}
    headers = {"Accept-Encoding": "identity"}
    if have and condition is not None:
        headers.update({"Range": f"bytes={have}-", "If-Range": condition})
    response = _get(url, headers, redirects)
    with response:
        status = response.status_code
        etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
        if status == 416 and have:
            valid, total = _range_total(response.headers.get("Content-Range", "bytes */?"), None)
            if (
                valid and total == have and _agrees(meta, etag, modified)
            ):  # the part already holds the whole file (killed before its rename)
                return _finish(dest, meta, url)
            discard(dest)
            return None
        if status == 206 and have and condition is not None:
            valid, total = _range_total(response.headers.get("Content-Range", ""), have)
            # of the recorded file only when it carries the validator resumed with and no other one
            if not valid or condition not in (etag, modified) or not _agrees(meta, etag, modified):
                discard(dest)  # another file or another offset (a server that ignored If-Range): started again, never spliced
                return None
            mode = "ab"
        elif status == 200:
            have, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
            date = response.headers.get("Date")
            meta = {"url": url, "etag": etag, "last_modified": modified, "date": date, "encoding": encoding}
            part.unlink(missing_ok=True)
            write_json(meta_path, meta)  # before the first byte: a part never exists without its origin
        else:
            raise WeightsError(f"{url}: HTTP {status} {response.reason}; check the model name or {MIRROR_ENV}")
        limit, what = _limit(url, dest, total, known_size, meta.get("encoding", "identity"))
        bar = progress_bar(
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name, disable=not progress, file=sys.stderr
        )
        try:
            with open_private(part, mode) as handle:
                try:
                    for block in response.raw.stream(STREAM_CHUNK, decode_content=False):
                        if handle.tell() + len(block) > limit:
                            handle.close()
                            discard(dest)
                            raise WeightsError(f"{url} sent more than {what} ({limit:,} bytes): stopped and removed")
                        handle.write(block)
                        bar.update(len(block))
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
                    handle.flush()
                    os.fsync(handle.fileno())
                    done = handle.tell()
                    raise Interrupted(
                        f"download of {url} interrupted at {done:,} of {total if total is not None else '?':,} bytes "
                        f"({type(err).__name__}); run the same command again to resume"
                    ) from None
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            bar.close()
    size = part.stat().st_size
    if total is not None and size < total:
        raise Interrupted(f"download of {url} stopped at {size:,} of {total:,} bytes; run the same command again to resume")
    if total is not None and size > total:  # pragma: no cover - the cap above stops it first
        discard(dest)
        raise WeightsError(f"download of {url} gave {size:,} bytes, more than the announced {total:,}: removed; run again")
    return _finish(dest, meta, url)


def _limit(url: str, dest: Path, total: Optional[int], known_size: Optional[int], encoding: str) -> Tuple[int, str]:
    """The most bytes the body may hold, and how to name that bound in an error."""
    top = ceiling(dest)
    if known_size is not None and encoding == "identity":
        if total is not None and total != known_size:
            raise WeightsError(f"{url} announces {total:,} bytes, but {dest.name} has {known_size:,}: refused; check {MIRROR_ENV}")
        return known_size, "the known size of " + dest.name
    if total is not None:
        if total > top:
            raise WeightsError(f"{url} announces {total:,} bytes, more than a {dest.suffix or 'such'} file may hold ({top:,}): refused")
        return total, "its announced length"
    return top, f"the most a {dest.suffix or 'such'} file may hold"


def _finish(dest: Path, meta: Dict[str, Any], url: str) -> Fetched:
    """The complete part, decoded when the server applied a content coding despite ``identity``."""
    part = part_path(dest)
    encoding = meta.get("encoding", "identity")
    if encoding not in ("identity", None):
        _decode(part, str(encoding), dest, url)
    return Fetched(part, url, meta.get("etag"), meta.get("last_modified"))


def _decode(part: Path, encoding: str, dest: Path, url: str) -> None:
    """Decode the part in place (the package's gzip reader: the whole stream, every member, no
    bytes after it), stopping as soon as it decodes past the ceiling of its kind of file."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        discard(dest)
        raise WeightsError(f"{url} came with Content-Encoding {encoding!r}, which spacy-elmo cannot decode: removed; use another mirror")
    top, tmp = ceiling(dest), part.with_name(part.name + ".decoded")
    try:
        with open(part, "rb") as source, open_private(tmp, "wb") as out:
            written = 0
            for data in decode_chunks(read_chunks(source, STREAM_CHUNK), f"the {encoding} body", deflate=encoding == "deflate"):
                written += len(data)
                if written > top:
                    raise WeightsError(f"{url}: the {encoding} body decodes to more than {top:,} bytes: removed")
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except GzipError as err:
        tmp.unlink(missing_ok=True)
        discard(dest)
        raise WeightsError(f"{url}: {err}: removed; run again") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        discard(dest)
        raise
    sidecar_path(dest).unlink(missing_ok=True)  # a decoded part cannot resume the coded stream
    os.replace(tmp, part)
