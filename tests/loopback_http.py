"""A file server on 127.0.0.1 for download tests: HTTP Range requests, a transfer cut mid-way,
replaced (corrupt) bodies, a slow stream, and a log of every request it answered."""
from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple


class LoopbackServer:
    """Serves ``root`` at ``self.url`` (``http://127.0.0.1:PORT/``) until :meth:`close`.

    ``cut[path] = n``: the next GET of ``path`` announces the full length but closes after ``n``
    bytes (once). ``body[path] = bytes``: serve these bytes instead of the file. ``delay``: seconds
    to sleep per 64 KiB block. ``log``: (path, Range header or None, status) per request.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cut: Dict[str, int] = {}
        self.body: Dict[str, bytes] = {}
        self.delay = 0.0
        self.log: List[Tuple[str, Optional[str], int]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.lstrip("/")
                data = server.body.get(path)
                if data is None:
                    file = server.root / path
                    if not file.is_file():
                        server._record(path, None, 404)
                        self.send_error(404)
                        return
                    data = file.read_bytes()
                start, status = 0, 200
                requested = self.headers.get("Range")
                if requested:
                    match = re.fullmatch(r"bytes=(\d+)-", requested.strip())
                    if match is None or int(match.group(1)) > len(data):
                        server._record(path, requested, 416)
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    start, status = int(match.group(1)), 206
                server._record(path, requested, status)
                self.send_response(status)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                with server._lock:
                    stop = server.cut.pop(path, None)
                end = len(data) if stop is None else min(len(data), start + stop)
                for offset in range(start, end, 1 << 16):
                    self.wfile.write(data[offset : min(end, offset + (1 << 16))])
                    self.wfile.flush()
                    if server.delay:
                        time.sleep(server.delay)
                if stop is not None:
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
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
