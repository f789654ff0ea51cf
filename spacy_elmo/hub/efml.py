"""An ELMoForManyLangs folder given as ``weights``: converted once into the cache, then read there.

``weights=FOLDER`` (the component, :func:`.load.load_bilm`, the command line) accepts an
ELMoForManyLangs model folder as its authors ship it. The first use converts it
(:func:`spacy_elmo.bilm.efml_folder.convert_efml`) into ``<cache>/efml/<key>`` (the key: a digest
of the folder's resolved path), a folder in our native format with ``source.json``, the record of
the source (its path and each file's size, change time and SHA-256). Later uses read the converted
folder while the source's files keep the recorded sizes and change times; a changed file means a
new conversion. Conversions are written to a temporary folder and renamed into place, so a reader
never sees half of one and concurrent first uses do not clash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Dict

from ..bilm.efml_folder import RECORD_NAME, check_efml_folder, convert_efml, source_files
from ..bilm.errors import WeightsError
from ..bilm.weights import CONFIG_NAME
from ..cache import cache_root, make_private_folders
from ..files import read_record, temporary_name

EFML_CACHE = "efml"


def converted_folder(source: Path) -> Path:
    """Where the conversion of ``source`` lives (whether or not it exists yet)."""
    key = hashlib.sha256(str(Path(source).resolve()).encode("utf-8")).hexdigest()[:20]
    return cache_root() / EFML_CACHE / key


def _record(folder: Path) -> Dict[str, Any]:
    return read_record(folder / RECORD_NAME)


def is_current(folder: Path, source: Path) -> bool:
    """True when ``folder`` holds a finished conversion of ``source`` as its files are now."""
    record = _record(folder)
    if record.get("source") != str(Path(source).resolve()) or not (folder / CONFIG_NAME).is_file():
        return False
    recorded = record.get("files")
    if not isinstance(recorded, dict):
        return False
    source = Path(source).resolve()
    try:
        files = source_files(source)
    except (WeightsError, OSError):  # a source that no longer reads: not current (converting says what is wrong)
        return False
    if len(files) != len(recorded):
        return False
    for path in files:
        key = os.path.relpath(path, source) if path.is_relative_to(source) else str(path)
        entry = recorded.get(key)
        try:
            stat = path.stat()
        except OSError:
            return False
        if not isinstance(entry, dict) or entry.get("size") != stat.st_size or entry.get("mtime_ns") != stat.st_mtime_ns:
            return False
    return True


def efml_native_folder(source: Path, convert: bool = True) -> Path:
    """The native folder of the ELMoForManyLangs model in ``source``: its current conversion, made
    now when missing or stale. With ``convert=False`` only the source is checked (configs and
    files, no weights read) and the folder is returned whether or not it exists yet."""
    source = Path(source)
    folder = converted_folder(source)
    if is_current(folder, source):
        return folder
    check_efml_folder(source)
    if not convert:
        return folder
    make_private_folders(folder.parent)  # 0700 whatever the umask: the kernels refuse a wider cache folder
    work = temporary_name(folder)
    try:
        convert_efml(source, make_private_folders(work))
        if folder.exists():  # stale, or another process's conversion finished meanwhile
            if is_current(folder, source):
                return folder
            old = temporary_name(folder)
            folder.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            work.rename(folder)
        except OSError:  # another process renamed its conversion into place first
            if not is_current(folder, source):
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return folder


__all__ = ["converted_folder", "efml_native_folder", "is_current"]
