"""Downloading a published model into the cache, and checking what the cache holds.

Each file streams into ``NAME.part`` (:mod:`.transfer`: resumed only when the server proves it is
the same file, capped at its announced length). Before anything is renamed into place, the files
must pass the shape check (options that describe a biLM, an HDF5 file holding every dataset the
options require with the right shapes; the LM head has its own, :mod:`.lm_head`) and match any
pinned SHA-256; files that fail are deleted. ``verified.json`` (written last) records each file's
SHA-256, size, mtime, URL and the server's ETag / Last-Modified at the first download: later loads
compare size and mtime, hash again only when those changed, and refuse a file whose content
changed (one-line error; ``download --force`` fetches it again). One download per model at a time
(a lock file), so concurrent processes are safe.

The entry points (:func:`download`, :func:`is_cached`, :func:`describe`) take a name or a record
and look the name up once; every other function takes the :class:`PublishedModel` record.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence

from ..bilm.errors import WeightsError
from ..bilm.layout import check_hdf5, read_options
from ..bilm.model import BiLMConfig, OptionsError
from ..cache import make_private_folders
from ..files import fsync_dir, write_json
from .published import MIRROR_ENV, PUBLISHED, ModelRef, PublishedModel, parameter_count, published_base, published_model
from .transfer import Fetched, Unreachable, discard, fetch, part_path, sidecar_path

RECORD_NAME = "verified.json"
CHUNK = 1 << 20  # hashing


class Location(NamedTuple):
    """Files to load: ``native`` (config.json + weights.pt in ``folder``) or the original pair."""

    native: bool
    folder: Optional[Path]
    options: Optional[Path] = None
    weights: Optional[Path] = None


# ---------------------------------------------------------------------------------------------
# cache


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> Dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _read_record(folder: Path) -> Dict[str, Any]:
    try:
        record = json.loads((folder / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else {}


def _write_record(folder: Path, files: Dict[str, Dict[str, Any]], source: str) -> None:
    write_json(folder / RECORD_NAME, {"source": source, "files": files}, indent=2)


def check_files(options: Path, weights: Path) -> BiLMConfig:
    """The shape check a download must pass: options that describe a biLM, and an HDF5 file
    holding every dataset those options require, with the right shapes (the values are not
    checked: that is what the SHA-256 record and pins are for)."""
    try:
        config = BiLMConfig.from_options(read_options(options), source=f"options file {options}")
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    check_hdf5(weights, config)
    return config


def cached_files(model: PublishedModel, file_names: Sequence[str], check: Callable[[List[Path]], object], command: str = "") -> List[Path]:
    """The cached ``file_names`` of a published model, checked against ``verified.json`` (and the
    registry's pins); files placed by hand (no record yet) pass ``check`` and are hashed once.
    Raises a one-line error when one is absent or changed since it was recorded. ``command``: the
    ``download`` command that fetches them, for messages (default: ``download NAME``)."""
    name, folder = model.name, model.cache_dir
    paths = [folder / f for f in file_names]
    command = command or f"download {name}"
    if not all(p.is_file() for p in paths):
        raise WeightsError(
            f"{' and '.join(file_names)} of {name} are not in the cache ({folder}): run `python -m spacy_elmo {command}`, "
            f"or place them there by hand from {model.folder} of the published location"
        )
    record = _read_record(folder)
    files = record.get("files", {})
    changed = False
    for path in paths:
        entry = files.get(path.name)
        if isinstance(entry, dict) and {k: entry.get(k) for k in ("size", "mtime_ns")} == _stamp(path):
            continue
        if not isinstance(entry, dict):  # placed by hand: check once, then record
            check(paths)
            files[path.name] = {"sha256": _sha256(path), **_stamp(path)}
        elif _sha256(path) == entry.get("sha256"):  # touched, same content
            files[path.name] = {**entry, **_stamp(path)}
        else:
            raise WeightsError(
                f"{path} changed since it was recorded (its SHA-256 differs from {RECORD_NAME}): refused, not "
                f"downloaded again; delete {folder} or run `python -m spacy_elmo {command} --force`"
            )
        changed = True
    _check_pins(folder, files, _pins(model, file_names, None), model)
    if changed:
        _write_record(folder, files, record.get("source", "placed by hand"))
    return paths


def cached_location(model: PublishedModel) -> Location:
    """The cached files of a published model (see :func:`cached_files`)."""
    options, weights = cached_files(model, model.files, lambda paths: check_files(paths[0], paths[1]))
    return Location(False, options.parent, options, weights)


def is_cached(model: ModelRef, file_names: Optional[Sequence[str]] = None) -> bool:
    """The model's files (or ``file_names``) present with the size and mtime recorded when they
    were checked (no hashing)."""
    model = published_model(model)
    folder = model.cache_dir
    files = model.files if file_names is None else file_names
    return _recorded(folder, files, _read_record(folder).get("files", {}))


def cached_size(model: PublishedModel) -> int:
    """Bytes the model's cache folder holds (0 when absent)."""
    folder = model.cache_dir
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


# ---------------------------------------------------------------------------------------------
# download


def _pins(model: PublishedModel, files: Sequence[str], sha256: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The SHA-256 each file must have: the registry's known digests, then the caller's."""
    pins = {k: v.lower() for k, v in model.sha256.items() if k in files}
    for file_name, digest in (sha256 or {}).items():
        if file_name not in files:
            raise WeightsError(f"sha256: {file_name!r} is not a file of {model.name} here; its files are {', '.join(files)}")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
            raise WeightsError(f"sha256 of {file_name}: {digest!r} is not a SHA-256 (64 hex digits)")
        pins[file_name] = digest.lower()
    return pins


def _check_pins(folder: Path, files: Dict[str, Dict[str, Any]], pins: Mapping[str, str], model: PublishedModel) -> None:
    for file_name, digest in pins.items():
        got = files.get(file_name, {}).get("sha256")
        if got is not None and got != digest:
            raise WeightsError(
                f"{folder / file_name} has SHA-256 {got}, not the pinned {digest}: it is not the file you pinned "
                f"(check the pin, or run `python -m spacy_elmo download {model.name} --force` to fetch it again)"
            )


def remove_created_folder(folder: Path) -> None:
    """Remove ``folder`` if it is empty; another process may have put something in it, or removed
    it, meanwhile (both are fine)."""
    try:
        folder.rmdir()
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise


def fetch_files(
    model: PublishedModel,
    files: Sequence[str],
    check: Callable[[List[Path]], object],
    *,
    force: bool = False,
    progress: bool = True,
    sha256: Optional[Mapping[str, str]] = None,
    command: str = "",
) -> Path:
    """Download ``files`` of the published ``model`` into its cache folder (or check the
    cached copies): each is transferred into its ``.part``, then ``check`` runs on all of them
    (in ``files`` order), their SHA-256 is taken and compared with any pin, and only then are they
    renamed into place and recorded. One download per model at a time (a lock file). ``command``:
    the ``download`` command that fetches them, for messages (default: ``download NAME``)."""
    from filelock import FileLock

    folder = model.cache_dir
    pins = _pins(model, files, sha256)
    make_private_folders(folder.parent)  # the cache folder: 0700 whatever the umask (the kernels refuse a wider one)
    with FileLock(str(folder.parent / f".{model.name}.lock")):
        created = not folder.is_dir()  # made here, under the lock: removed again if a failure leaves it empty
        make_private_folders(folder)
        try:
            return _fetch_files_locked(model, folder, files, check, force, progress, pins, command or f"download {model.name}")
        except BaseException:
            for file_name in files:  # a part with no byte, or no sidecar to resume it with, is of no use
                part = part_path(folder / file_name)
                if part.is_file() and (part.stat().st_size == 0 or not sidecar_path(folder / file_name).is_file()):
                    discard(folder / file_name)
                elif not part.exists():
                    sidecar_path(folder / file_name).unlink(missing_ok=True)
            if created:
                remove_created_folder(folder)
            raise


def _fetch_files_locked(
    model: PublishedModel,
    folder: Path,
    files: Sequence[str],
    check: Callable[[List[Path]], object],
    force: bool,
    progress: bool,
    pins: Mapping[str, str],
    command: str,
) -> Path:
    name = model.name
    record = _read_record(folder)
    recorded: Dict[str, Dict[str, Any]] = record.get("files", {})
    if not force and _recorded(folder, files, recorded):
        _check_pins(folder, recorded, pins, model)
        return folder
    if force:
        for file_name in files:
            (folder / file_name).unlink(missing_ok=True)
            discard(folder / file_name)
            recorded.pop(file_name, None)
    paths: List[Path] = []
    fetched: Dict[str, Fetched] = {}
    for file_name in files:
        dest = folder / file_name
        if dest.is_file():  # complete from an earlier run (renamed only after the checks), or placed by hand
            paths.append(dest)
            continue
        try:
            fetched[file_name] = fetch(model.url(file_name), dest, progress=progress, known_size=model.sizes.get(file_name))
        except Unreachable as err:
            raise WeightsError(
                f"{name} is not cached in {folder} and {err.url} cannot be reached ({err}): download it where there is "
                f"network (`python -m spacy_elmo {command}`) and copy the folder, set {MIRROR_ENV} to a mirror, "
                f"or place {' and '.join(files)} in {folder} by hand"
            ) from None
        paths.append(fetched[file_name].part)
    try:
        check(paths)
        digests = {file_name: _sha256(path) for file_name, path in zip(files, paths)}
        _check_pins(folder, {k: {"sha256": v} for k, v in digests.items()}, pins, model)
    except WeightsError as err:
        for file_name, path in zip(files, paths):  # nothing that failed stays in the cache
            path.unlink(missing_ok=True)
            discard(folder / file_name)
        raise WeightsError(f"{name}: the downloaded files failed the checks and were removed ({err})") from None
    for file_name, path in zip(files, paths):
        dest = folder / file_name
        if path != dest:
            os.replace(path, dest)
            sidecar_path(dest).unlink(missing_ok=True)
        entry = {"sha256": digests[file_name], **_stamp(dest)}
        source = fetched.get(file_name)
        if source is not None:
            entry.update({"url": source.url, "etag": source.etag, "last_modified": source.last_modified})
        elif isinstance(recorded.get(file_name), dict):
            entry = {**recorded[file_name], **entry}
        recorded[file_name] = entry
    fsync_dir(folder)
    _write_record(folder, recorded, published_base() + model.folder)
    return folder


def _recorded(folder: Path, files: Sequence[str], recorded: Dict[str, Any]) -> bool:
    """Every file present with the size and mtime recorded when it was checked."""
    for file_name in files:
        path, entry = folder / file_name, recorded.get(file_name)
        if not path.is_file() or not isinstance(entry, dict):
            return False
        if {k: entry.get(k) for k in ("size", "mtime_ns")} != _stamp(path):
            return False
    return True


def download(model: ModelRef, *, force: bool = False, progress: bool = True, sha256: Optional[Mapping[str, str]] = None) -> Path:
    """Download a published model's two files into the cache (or check the cached copy) and return
    its folder. ``sha256``: ``{file name: hex digest}`` that the files must have (pinning)."""
    model = published_model(model)
    return fetch_files(model, model.files, lambda paths: check_files(paths[0], paths[1]), force=force, progress=progress, sha256=sha256)


def ensure_files(
    model: PublishedModel, files: Sequence[str], check: Callable[[List[Path]], object], *, download: bool = True, command: str = ""
) -> List[Path]:
    """The checked ``files`` of ``model`` in the cache (see :func:`cached_files`), fetched first
    (see :func:`fetch_files`) when ``download`` and they are not all recorded as checked."""
    folder = model.cache_dir
    if download and not _recorded(folder, files, _read_record(folder).get("files", {})):
        folder = fetch_files(model, files, check, command=command)
        return [folder / f for f in files]
    return cached_files(model, files, check, command)


def ensure_downloaded(model: PublishedModel) -> Location:
    """The cached files of ``model``, downloading them first when absent or incomplete."""
    if not is_cached(model):
        folder = model.cache_dir
        if (folder / model.options_name).is_file() and (folder / model.weights_name).is_file():
            return cached_location(model)  # placed by hand, or touched: check instead of downloading
        download(model)
    return cached_location(model)


def describe(names: Optional[Iterable[ModelRef]] = None) -> List[Dict[str, Any]]:
    """One row per published model: name, shape, parameters, cache size and state (no network)."""
    rows = []
    for model in map(published_model, names or PUBLISHED):
        rows.append(
            {
                "name": model.name,
                "shape": model.shape,
                "trained_on": model.about,
                "reported": model.reported,
                "cached": is_cached(model),
                "size_on_disk": cached_size(model),
                "folder": str(model.cache_dir),
                "parameters": parameter_count(model.shape),
            }
        )
    return rows
