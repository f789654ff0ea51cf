"""The last two steps of a download, once every check has passed (:mod:`.verify`): record the files
(their first-seen digests, :mod:`.pins`), then move them into place, write the cache folder's
record (:mod:`.verified`) and move an archive's conversion into place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

from ..files import fsync_dir
from .efml_archive import install_conversion, remove_folder
from .pins import record_first
from .published import PublishedModel
from .transfer import Fetched, sidecar_path
from .verified import stamp, write_verified
from .verify import Verified


def entries_of(verified: Verified, sources: Mapping[str, Fetched], recorded: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The record's entry of each verified file: its digest, size and mtime, and where it came from."""
    entries: Dict[str, Dict[str, Any]] = {}
    for file_name, path in zip(verified.files, verified.paths):
        entry: Dict[str, Any] = {"sha256": verified.digests[file_name], **stamp(path)}
        source = sources.get(file_name)
        if source is not None:
            entry.update({"url": source.url, "etag": source.etag, "last_modified": source.last_modified})
        elif isinstance(recorded.get(file_name), dict):
            entry = {**recorded[file_name], **entry}
        entries[file_name] = entry
    return entries


def record_and_place(
    model: PublishedModel,
    folder: Path,
    verified: Verified,
    sources: Mapping[str, Fetched],
    recorded: Dict[str, Any],
    pinned: Sequence[str],
    origin: str,
) -> None:
    """Record ``verified`` (first-seen digests), move its parts to their names in ``folder``,
    write ``verified.json`` (``origin``: where the files came from) and install the conversion."""
    try:
        entries = entries_of(verified, sources, recorded)
        record_first(model, entries, pinned)
        for file_name, path in zip(verified.files, verified.paths):
            dest = folder / file_name
            if path != dest:
                os.replace(path, dest)  # the same inode: its size and mtime stay those recorded
                sidecar_path(dest).unlink(missing_ok=True)
        fsync_dir(folder)
        recorded.update(entries)
        write_verified(folder, recorded, origin)
        if verified.conversion is not None:
            install_conversion(model, verified.conversion)
    finally:
        if verified.conversion is not None:
            remove_folder(verified.conversion)


__all__ = ["entries_of", "record_and_place"]
