"""Trust on first use: the SHA-256 of each published file as it was at its first download.

No publisher states digests for its ELMo files, so nothing can prove a download is the file its
authors uploaded. What can be checked is that it stays the same file: the first download (or the
first check of a file placed by hand) records each file's SHA-256, size, URL and date in
:data:`RECORD_NAME` at the top of the cache folder (private to the user, like the cache), and every
later download or load of that model must give the same digest. The record sits beside the models'
folders, not inside them, so that deleting a model's folder or ``download --force`` fetches the
file again without forgetting what it was: a changed file (a tampered copy, a mirror serving
something else, or a publisher's new upload) is refused in one line, until its entry is removed
from the record by hand. Digests a publisher states (:attr:`.published.PublishedModel.sha256`) and
the caller's pins take precedence; a pinned download that succeeds records its digest here.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Mapping

from ..cache import make_private_folders
from ..files import write_json
from .published import PublishedModel, cache_root

RECORD_NAME = "first-seen.json"


def record_path() -> Path:
    """The record's file, at the top of the cache folder."""
    return cache_root() / RECORD_NAME


def _read(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def first_seen(model: PublishedModel) -> Dict[str, Dict[str, Any]]:
    """``{file name: {sha256, size, url, recorded}}`` of ``model`` as first downloaded (empty when never)."""
    entry = _read(record_path()).get(model.name)
    if not isinstance(entry, dict):
        return {}
    return {name: dict(value) for name, value in entry.items() if isinstance(value, dict) and isinstance(value.get("sha256"), str)}


def record_first_seen(model: PublishedModel, files: Mapping[str, Mapping[str, Any]], replace: bool = False) -> None:
    """Record ``files`` (``{file name: {sha256, size, url}}``) of ``model``: only files with no
    entry yet, unless ``replace`` (a digest the caller pinned). Read, changed and written back
    whole under a lock, so that concurrent downloads of different models keep each other's entries."""
    from filelock import FileLock

    path = record_path()
    make_private_folders(path.parent)
    with FileLock(str(path.with_name("." + RECORD_NAME + ".lock"))):
        data = _read(path)
        entry = data.get(model.name) if isinstance(data.get(model.name), dict) else {}
        assert isinstance(entry, dict)
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        changed = False
        for file_name, values in files.items():
            if file_name in entry and not replace:
                continue
            entry[file_name] = {**{k: values.get(k) for k in ("sha256", "size", "url")}, "recorded": now}
            changed = True
        if changed:
            data[model.name] = entry
            write_json(path, data, indent=2)


__all__ = ["RECORD_NAME", "first_seen", "record_first_seen", "record_path"]
