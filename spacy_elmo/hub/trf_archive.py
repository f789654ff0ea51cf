"""AllenNLP's transformer ELMo as ``weights``: its ``.tar.gz`` or unpacked folder, converted once.

A transformer ELMo archive (a gzip tar of ``config.json``, ``weights.th`` and ``vocabulary/``, at its
top or in one folder) is checked from its listing (:func:`check_archive`: the safety rules of
:mod:`.archive`), unpacked into a temporary folder, converted into our native format
(:func:`spacy_elmo.bilm.trf_folder.convert_trf`: the configuration read as data, tensors only) and
renamed into place; the unpacked files are removed. A published one (``elmo-transformer``) lives in
its model's cache folder (``native``, with :data:`ARCHIVE_RECORD` naming the archive's SHA-256); a
local archive or folder given by path lives in ``<cache>/trf/<key>`` (the key: a digest of its
resolved path) with the sizes and change times of its files, and is converted again when they change.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List

from ..bilm.errors import WeightsError
from ..bilm.trf_folder import CONFIG_JSON, WEIGHTS_TH, convert_trf, is_trf_folder, trf_config
from ..bilm.weights import CONFIG_NAME
from ..cache import cache_root
from ..files import read_record, temporary_name, write_json
from .archive import check_tar, unpack_tar
from .published import PublishedModel

SUFFIX = ".tar.gz"
NATIVE = "native"
TRF_CACHE = "trf"
ARCHIVE_RECORD = "archive.json"
MAX_MEMBERS = 1024
MAX_BYTES = 8 << 30  # the published archive unpacks to well under 1 GiB
REQUIRED = (CONFIG_JSON, WEIGHTS_TH)


def is_trf_archive(path: Any) -> bool:
    """True for a path that names an existing ``.tar.gz`` file."""
    return isinstance(path, (str, Path)) and str(path).endswith(SUFFIX) and Path(path).is_file()


def is_trf_source(path: Any) -> bool:
    """True for a transformer ELMo ``.tar.gz`` or unpacked archive folder."""
    return is_trf_archive(path) or (isinstance(path, (str, Path)) and Path(path).is_dir() and is_trf_folder(path))


def check_archive(path: Path) -> PurePosixPath:
    """Check an archive from its listing alone: safe to unpack and holding ``config.json`` and
    ``weights.th`` at its top or in its one top-level folder. Returns that folder inside it."""
    infos = check_tar(Path(path), MAX_MEMBERS, MAX_BYTES)
    files = {str(PurePosixPath(i.name)) for i in infos if i.isreg()}
    tops = sorted({PurePosixPath(n).parts[0] for n in files if len(PurePosixPath(n).parts) > 1})
    for root in (PurePosixPath("."), *map(PurePosixPath, tops)):
        if all(str(root / name) in files for name in REQUIRED):
            return root
    raise WeightsError(
        f"{Path(path).name} holds no transformer ELMo ({', '.join(REQUIRED)} at its top or in one folder at its top): refused"
    )


def _convert_archive(archive: Path, work: Path, label: str) -> None:
    """Unpack ``archive`` beside ``work`` and convert it into ``work``; the unpacked files are removed."""
    root = check_archive(archive)
    unpacked = temporary_name(work.parent / "unpacked")
    try:
        unpack_tar(archive, unpacked, MAX_MEMBERS, MAX_BYTES)
        convert_trf(unpacked.joinpath(*root.parts), work, label=label)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


def _replace(work: Path, folder: Path) -> None:
    if folder.exists():  # a stale conversion, replaced whole
        old = temporary_name(folder)
        folder.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    work.rename(folder)


def native_folder(model: PublishedModel, archive: Path, digest: str) -> Path:
    """The native folder of published ``model`` converted from its checked ``archive`` (SHA-256
    ``digest``): the current conversion, or one made now (one process at a time: the model's lock)."""
    from filelock import FileLock

    folder = model.cache_dir / NATIVE
    if (folder / CONFIG_NAME).is_file() and read_record(folder / ARCHIVE_RECORD).get("sha256") == digest:
        return folder
    with FileLock(str(model.lock_file)):
        if (folder / CONFIG_NAME).is_file() and read_record(folder / ARCHIVE_RECORD).get("sha256") == digest:
            return folder
        work = temporary_name(folder)
        try:
            _convert_archive(archive, work, model.url(model.archive))
            write_json(work / ARCHIVE_RECORD, {"model": model.name, "archive": model.archive, "sha256": digest})
            _replace(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


def _stamps(source: Path) -> Dict[str, Dict[str, int]]:
    files: List[Path] = [source] if source.is_file() else [source / name for name in REQUIRED]
    out = {}
    for path in files:
        stat = path.stat()
        out[path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return out


def converted_folder(source: Path) -> Path:
    """Where the conversion of a local archive or folder lives (whether or not it exists yet)."""
    key = hashlib.sha256(str(Path(source).resolve()).encode("utf-8")).hexdigest()[:20]
    return cache_root() / TRF_CACHE / key


def _is_current(folder: Path, source: Path) -> bool:
    record = read_record(folder / ARCHIVE_RECORD)
    try:
        stamps = _stamps(source)
    except OSError:
        return False
    return (folder / CONFIG_NAME).is_file() and record.get("source") == str(source) and record.get("files") == stamps


def trf_native_folder(source: Path, convert: bool = True) -> Path:
    """The native folder of the transformer ELMo ``.tar.gz`` or folder at ``source``: its current
    conversion, made now when missing or stale. With ``convert=False`` only the source is checked
    (the archive's listing, or the folder's configuration) and the folder is returned either way."""
    source = Path(source).resolve()
    folder = converted_folder(source)
    if _is_current(folder, source):
        return folder
    if source.is_file():
        check_archive(source)
    else:
        trf_config(source)
    if not convert:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = temporary_name(folder)
    try:
        stamps = _stamps(source)
        if source.is_file():
            _convert_archive(source, work, str(source))
        else:
            convert_trf(source, work)
        write_json(work / ARCHIVE_RECORD, {"source": str(source), "files": stamps})
        try:
            _replace(work, folder)
        except OSError:  # another process renamed its conversion into place first
            if not _is_current(folder, source):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


__all__ = [
    "ARCHIVE_RECORD",
    "SUFFIX",
    "check_archive",
    "converted_folder",
    "is_trf_archive",
    "is_trf_source",
    "native_folder",
    "trf_native_folder",
]
