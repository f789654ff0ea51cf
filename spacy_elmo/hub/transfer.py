"""One file over HTTP into ``NAME.part``, resumable only when the server proves it is the same file.

``NAME.part.json`` beside the part records the URL asked for, the server's validator (a strong
ETag, else Last-Modified) and the content coding. A resumed request sends ``Range`` with
``If-Range`` set to that validator: a server whose file changed answers 200 with the whole new
file, and the part restarts from zero; so does a part whose URL changed (another mirror) or that
has no validator. A 416 on a part that already has the whole file keeps it. The body is read as
sent (``Accept-Encoding: identity``; a server that gzips anyway is decoded once complete), counted
against the announced length, the registry's known size or a ceiling per kind of file, and the
transfer stops as soon as it goes past. Redirects are followed only within the same scheme and
host, or to origins listed in ``SPACY_ELMO_ALLOW_REDIRECT``.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Tuple
from urllib.parse import urljoin

from ..bilm.errors import WeightsError
from ..files import write_json
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


def ceiling(dest: Path) -> int:
    return CEILINGS.get(dest.suffix.lower(), DEFAULT_CEILING)


def _read_sidecar(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _if_range(meta: Dict[str, Any]) -> Optional[str]:
    """The validator to resume with: a strong ETag, else Last-Modified (a weak ETag cannot be used)."""
    etag = meta.get("etag")
    if isinstance(etag, str) and etag and not etag.startswith("W/"):
        return etag
    modified = meta.get("last_modified")
    return modified if isinstance(modified, str) and modified else None


def _get(url: str, headers: Dict[str, str]) -> Any:
    """GET ``url`` (streamed), following redirects to the same origin or an allowed one."""
    import requests

    allowed = {origin(url), *redirect_origins()}
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


def _range_total(content_range: str, start: Optional[int], url: str) -> Optional[int]:
    """TOTAL of ``bytes START-END/TOTAL`` (or ``bytes */TOTAL`` when ``start`` is None)."""
    try:
        unit, rest = content_range.split(" ", 1)
        span, total = rest.split("/", 1)
        first = None if span == "*" else int(span.split("-", 1)[0])
    except ValueError:
        raise WeightsError(f"{url}: the server answered a resumed download with a malformed Content-Range {content_range!r}") from None
    if unit != "bytes" or (start is not None and first != start):
        raise WeightsError(f"{url}: the server resumed at byte {first}, not {start}; delete the .part file and run again")
    return int(total) if total.isdigit() else None


def fetch(url: str, dest: Path, *, progress: bool = True, known_size: Optional[int] = None) -> Fetched:
    """Stream ``url`` into ``dest``'s ``.part`` (resuming it when the server proves the file is the
    same) and return it complete; raises :class:`Interrupted` (part kept) when the transfer stops
    early, :class:`Unreachable` without an answer, and :class:`WeightsError` otherwise."""
    for _ in range(3):  # a restart (changed file, server ignoring If-Range) happens at most twice
        result = _fetch_once(url, dest, progress, known_size)
        if result is not None:
            return result
    raise WeightsError(f"{url}: the file kept changing during the download; run again later")  # pragma: no cover


def _fetch_once(url: str, dest: Path, progress: bool, known_size: Optional[int]) -> Optional[Fetched]:
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
    response = _get(url, headers)
    with response:
        status = response.status_code
        etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
        if status == 416 and have:
            total = _range_total(response.headers.get("Content-Range", "bytes */?"), None, url)
            if total == have:  # the part already holds the whole file (killed before its rename)
                return _finish(dest, meta, url)
            discard(dest)
            return None
        if status == 206 and have:
            if etag and meta.get("etag") and etag != meta.get("etag"):  # a server that ignored If-Range
                discard(dest)
                return None
            total = _range_total(response.headers.get("Content-Range", ""), have, url)
            mode = "ab"
        elif status == 200:
            have, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
            meta = {"url": url, "etag": etag, "last_modified": modified, "encoding": encoding}
            part.unlink(missing_ok=True)
            write_json(meta_path, meta)  # before the first byte: a part never exists without its origin
        else:
            raise WeightsError(f"{url}: HTTP {status} {response.reason}; check the model name or {MIRROR_ENV}")
        limit, what = _limit(url, dest, total, known_size, meta.get("encoding", "identity"))
        bar = progress_bar(
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name, disable=not progress, file=sys.stderr
        )
        try:
            with open(part, mode) as handle:
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
    if encoding in ("gzip", "x-gzip"):
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        discard(dest)
        raise WeightsError(f"{url} came with Content-Encoding {encoding!r}, which spacy-elmo cannot decode: removed; use another mirror")
    top, tmp = ceiling(dest), part.with_name(part.name + ".decoded")
    try:
        with open(part, "rb") as source, open(tmp, "wb") as out:
            written = 0
            for block in iter(lambda: source.read(STREAM_CHUNK), b""):
                data = decoder.decompress(block, top + 1 - written)
                written += len(data)
                if written > top or decoder.unconsumed_tail:
                    raise WeightsError(f"{url}: the {encoding} body decodes to more than {top:,} bytes: removed")
                out.write(data)
            out.write(decoder.flush())
            out.flush()
            os.fsync(out.fileno())
    except (zlib.error, EOFError, gzip.BadGzipFile) as err:
        tmp.unlink(missing_ok=True)
        discard(dest)
        raise WeightsError(f"{url}: the {encoding} body does not decode ({err}): removed; run again") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        discard(dest)
        raise
    sidecar_path(dest).unlink(missing_ok=True)  # a decoded part cannot resume the coded stream
    os.replace(tmp, part)
