"""A file server on 127.0.0.1 for download tests: HTTP Range requests with ``If-Range``, ETag and
Last-Modified validators, gzip content coding, redirects, chunked bodies, 404 and 416, a transfer
cut mid-way, replaced (corrupt) bodies, a slow stream, and a log of every request it answered."""
from __future__ import annotations

import gzip
import hashlib
import re
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

BLOCK = 1 << 16


class LoopbackServer:
    """Serves ``root`` at ``self.url`` (``http://127.0.0.1:PORT/``) until :meth:`close`.

    ``cut[path] = n``: the next GET of ``path`` announces the full length but closes after ``n``
    bytes (once). ``body[path] = bytes``: serve these bytes instead of the file. ``delay``: seconds
    to sleep per 64 KiB block. ``validators``: ``"etag"`` (a strong ETag and Last-Modified, the
    default), ``"weak"`` (a weak ETag only), ``"last-modified"`` or ``"none"``; each is derived from
    the bytes served, so a changed body gets a new one; the Date header is the time of the answer,
    or the Last-Modified itself when ``same_second`` (a weak Last-Modified by RFC 9110 8.8.2.2).
    ``If-Range`` is honoured (a stale validator gets the whole body, 200) unless ``ignore_if_range``;
    ``range_shift``: a 206 starts that many bytes after the one asked for (its Content-Range says so). ``gzip``: paths gzipped when the client
    accepts gzip; ``force_gzip``: gzipped whatever it accepts; ``encoded[path] = bytes``: these
    bytes sent as they are with ``Content-Encoding: gzip`` (a coded body a test made, damaged or not). ``redirect[path] = url``: a 302 to
    ``url``. ``chunked``: paths sent with chunked transfer coding and no length; ``trailing[path] =
    n``: ``n`` extra bytes after the body of a chunked path (a server that sends too much).
    ``log``: (path, Range header or None, status) per request; ``headers``: each request's headers.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cut: Dict[str, int] = {}
        self.body: Dict[str, bytes] = {}
        self.delay = 0.0
        self.validators = "etag"
        self.ignore_if_range = False
        self.same_second = False
        self.range_shift = 0
        self.gzip: Set[str] = set()
        self.force_gzip: Set[str] = set()
        self.encoded: Dict[str, bytes] = {}
        self.redirect: Dict[str, str] = {}
        self.chunked: Set[str] = set()
        self.trailing: Dict[str, int] = {}
        self.log: List[Tuple[str, Optional[str], int]] = []
        self.headers: List[Dict[str, str]] = []
        self.sent: Dict[str, int] = {}  # bytes of body written per path (all requests)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # for chunked bodies; every answer closes its connection

            date: Optional[str] = None  # the Date header of the answer in progress (None: now)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def date_time_string(self, timestamp: Optional[float] = None) -> str:
                return self.date or super().date_time_string(timestamp)

            def _validators(self, data: bytes) -> Dict[str, str]:
                digest = hashlib.sha1(data).hexdigest()[:16]
                stamp = formatdate(1_600_000_000 + int(digest[:6], 16), usegmt=True)  # differs per content
                kind = server.validators
                return {
                    "etag": {"ETag": f'"{digest}"', "Last-Modified": stamp},
                    "weak": {"ETag": f'W/"{digest}"'},
                    "last-modified": {"Last-Modified": stamp},
                    "none": {},
                }[kind]

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.lstrip("/")
                with server._lock:
                    server.headers.append(dict(self.headers.items()))
                self.close_connection = True
                if path in server.redirect:
                    server._record(path, self.headers.get("Range"), 302)
                    self.send_response(302)
                    self.send_header("Location", server.redirect[path])
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    return
                data = server.body.get(path, server.encoded.get(path))
                if data is None:
                    file = server.root / path
                    if not file.is_file():
                        server._record(path, self.headers.get("Range"), 404)
                        self.send_error(404)
                        return
                    data = file.read_bytes()
                validators = self._validators(data)
                self.date = validators.get("Last-Modified") if server.same_second else None
                accepts = self.headers.get("Accept-Encoding", "")
                coded = path in server.force_gzip or (path in server.gzip and "gzip" in accepts)
                if coded and path not in server.encoded:
                    data = gzip.compress(data, mtime=0)
                coded = coded or path in server.encoded
                start, status = 0, 200
                requested = self.headers.get("Range")
                if requested:
                    condition = self.headers.get("If-Range")
                    fresh = server.ignore_if_range or (
                        condition is not None
                        and not condition.startswith("W/")
                        and condition in (validators.get("ETag"), validators.get("Last-Modified"))
                    )
                    if condition is None or fresh:
                        match = re.fullmatch(r"bytes=(\d+)-", requested.strip())
                        if match is None or int(match.group(1)) >= len(data):
                            server._record(path, requested, 416)
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{len(data)}")
                            self.send_header("Content-Length", "0")
                            self.send_header("Connection", "close")
                            self.end_headers()
                            return
                        start, status = min(len(data) - 1, int(match.group(1)) + server.range_shift), 206
                server._record(path, requested, status)
                self.send_response(status)
                chunked = path in server.chunked
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Connection", "close")
                if coded:
                    self.send_header("Content-Encoding", "gzip")
                for key, value in validators.items():
                    self.send_header(key, value)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                with server._lock:
                    stop = server.cut.pop(path, None)
                end = len(data) if stop is None else min(len(data), start + stop)
                payload = data[start:end] + (b"\0" * server.trailing.get(path, 0) if chunked and stop is None else b"")
                try:
                    for offset in range(0, len(payload), BLOCK):
                        block = payload[offset : offset + BLOCK]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                        self.wfile.flush()
                        with server._lock:
                            server.sent[path] = server.sent.get(path, 0) + len(block)
                        if server.delay:
                            time.sleep(server.delay)
                    if chunked and stop is None:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _record(self, path: str, requested: Optional[str], status: int) -> None:
        with self._lock:
            self.log.append((path, requested, status))

    def gets(self, suffix: str) -> List[Tuple[str, Optional[str], int]]:
        """The logged requests whose path ends with ``suffix``."""
        with self._lock:
            return [entry for entry in self.log if entry[0].endswith(suffix)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
