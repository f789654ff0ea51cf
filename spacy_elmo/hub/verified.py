"""``verified.json``, a model cache folder's record of the files that passed every check: each
file's SHA-256, size and mtime (and, for a download, its URL and the server's validators). Later
loads compare size and mtime, and hash again only when those changed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Dict, Sequence

from ..files import read_record, write_json

RECORD_NAME = "verified.json"
CHUNK = 1 << 20  # hashing


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path``, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def stamp(path: Path) -> Dict[str, int]:
    """The size and mtime that tell a recorded file unchanged."""
    status = path.stat()
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns}


def read_verified(folder: Path) -> Dict[str, Any]:
    """The record of ``folder`` (``{}`` when missing or not a record)."""
    record = read_record(folder / RECORD_NAME)
    return record if isinstance(record.get("files"), dict) else {}


def recorded_files(folder: Path) -> Dict[str, Any]:
    """``{file name: entry}`` of ``folder``'s record."""
    files = read_verified(folder).get("files", {})
    return files if isinstance(files, dict) else {}


def write_verified(folder: Path, files: Dict[str, Dict[str, Any]], source: str) -> None:
    write_json(folder / RECORD_NAME, {"source": source, "files": files}, indent=2)


def unchanged(folder: Path, files: Sequence[str], recorded: Dict[str, Any]) -> bool:
    """Every file present with the size and mtime recorded when it was checked."""
    for file_name in files:
        path, entry = folder / file_name, recorded.get(file_name)
        if not path.is_file() or not isinstance(entry, dict):
            return False
        if {k: entry.get(k) for k in ("size", "mtime_ns")} != stamp(path):
            return False
    return True


__all__ = ["RECORD_NAME", "read_verified", "recorded_files", "sha256_of", "stamp", "unchanged", "write_verified"]
