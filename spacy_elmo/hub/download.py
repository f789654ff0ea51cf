"""Downloading a published model into the cache, and checking what the cache holds.

Each file streams into ``NAME.part`` (:mod:`.transfer`: resumed only when the server proves it is
the same file, capped at its announced length). Before anything is renamed into place, the files
must pass the check of their kind (options that describe a biLM and an HDF5 file holding every
dataset the options require with the right shapes; an ELMoForManyLangs archive safe to unpack and
holding a model folder, :mod:`.efml_archive`; the LM head has its own, :mod:`.lm_head`) and match
the SHA-256 they must have: the publisher's stated digest, the caller's pin, else the digest of
the first download (:mod:`.first_seen`, trust on first use); files that fail are deleted.
``verified.json`` (written last) records each file's SHA-256, size, mtime, URL and the server's
ETag / Last-Modified: later loads compare size and mtime, hash again only when those changed, and
refuse a file whose content changed (one-line error; ``download --force`` fetches it again, and
the new copy must have the first download's digest). One download per model at a time (a lock
file), so concurrent processes are safe. An archive is then unpacked and converted once
(:func:`.efml_archive.native_folder`).

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
from . import trf_archive
from .efml_archive import check_archive, native_folder
from .first_seen import first_seen, record_first_seen, record_path
from .published import FORMAT_TRF, MIRROR_ENV, PUBLISHED, ModelRef, PublishedModel, model_parameters, published_model
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


class Pin(NamedTuple):
    """The SHA-256 a file must have, and where that digest comes from: ``stated`` (by its
    publisher), ``pinned`` (by the caller) or ``first`` (its first download)."""

    digest: str
    origin: str
    recorded: str = ""  # when the first download was, for ``first``


def check_files(options: Path, weights: Path) -> BiLMConfig:
    """The shape check a download must pass: options that describe a biLM, and an HDF5 file
    holding every dataset those options require, with the right shapes (the values are not
    checked: that is what the SHA-256 record and pins are for)."""
    config = check_options(options)
    check_hdf5(weights, config)
    return config


def check_for(model: PublishedModel) -> Callable[[List[Path]], object]:
    """The check the files of ``model`` (:attr:`PublishedModel.files`, in order) must pass."""
    if model.format == FORMAT_TRF:
        return lambda paths: trf_archive.check_archive(paths[0])
    if model.archive:
        return lambda paths: check_archive(paths[0])
    return lambda paths: check_files(paths[0], paths[1])


def cached_files(model: PublishedModel, file_names: Sequence[str], check: Callable[[List[Path]], object], command: str = "") -> List[Path]:
    """The cached ``file_names`` of a published model, checked against ``verified.json`` (and the
    digests they must have); files placed by hand (no record yet) pass ``check`` and are hashed
    once. Raises a one-line error when one is absent or changed since it was recorded. ``command``:
    the ``download`` command that fetches them, for messages (default: ``download NAME``)."""
    name, folder = model.name, model.cache_dir
    paths = [folder / f for f in file_names]
    command = command or f"download {name}"
    if not all(p.is_file() for p in paths):
        raise WeightsError(
            f"{' and '.join(file_names)} of {name} are not in the cache ({folder}): run `python -m spacy_elmo {command}`, "
            f"or place them there by hand from {model.url('')}"
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
    _check_pins(folder, files, _pins(model, file_names, None), model, command)
    _record_first(model, {f: files[f] for f in file_names})
    if changed:
        _write_record(folder, files, record.get("source", "placed by hand"))
    return paths


def cached_location(model: PublishedModel) -> Location:
    """The cached files of a published model (see :func:`cached_files`); for an archive, its
    conversion, made now from the cached archive when missing or made from another one."""
    paths = cached_files(model, model.files, check_for(model))
    if model.archive:
        entry = _read_record(model.cache_dir).get("files", {}).get(model.archive, {})  # written by cached_files
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        convert = trf_archive.native_folder if model.format == FORMAT_TRF else native_folder
        return Location(True, convert(model, paths[0], digest or _sha256(paths[0])))
    return Location(False, paths[0].parent, paths[0], paths[1])


def is_cached(model: ModelRef, file_names: Optional[Sequence[str]] = None) -> bool:
    """The model's files (or ``file_names``) present with the size and mtime recorded when they
    were checked (no hashing)."""
    model = published_model(model)
    folder = model.cache_dir
    files = model.files if file_names is None else file_names
    return _recorded(folder, files, _read_record(folder).get("files", {}))


def cached_size(model: PublishedModel) -> int:
    """Bytes the model's cache folder holds, its conversion included (0 when absent)."""
    folder = model.cache_dir
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


# ---------------------------------------------------------------------------------------------
# download


def _pins(model: PublishedModel, files: Sequence[str], sha256: Optional[Mapping[str, str]]) -> Dict[str, Pin]:
    """The SHA-256 each file must have: its first download's, overridden by the digest its
    publisher states, overridden by the caller's pin."""
    pins = {k: Pin(v["sha256"].lower(), "first", str(v.get("recorded", ""))) for k, v in first_seen(model).items() if k in files}
    pins.update({k: Pin(v.lower(), "stated") for k, v in model.sha256.items() if k in files})
    for file_name, digest in (sha256 or {}).items():
        if file_name not in files:
            raise WeightsError(f"sha256: {file_name!r} is not a file of {model.name} here; its files are {', '.join(files)}")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
            raise WeightsError(f"sha256 of {file_name}: {digest!r} is not a SHA-256 (64 hex digits)")
        pins[file_name] = Pin(digest.lower(), "pinned")
    return pins


def _check_pins(folder: Path, files: Dict[str, Dict[str, Any]], pins: Mapping[str, Pin], model: PublishedModel, command: str = "") -> None:
    command = command or f"download {model.name}"
    for file_name, pin in pins.items():
        got = files.get(file_name, {}).get("sha256")
        if got is None or got == pin.digest:
            continue
        if pin.origin == "first":
            raise WeightsError(
                f"{folder / file_name} has SHA-256 {got}, not {pin.digest}, the one its first download gave ({pin.recorded}; "
                f"recorded in {record_path()}): refused, it is another file (tampered with, another mirror's, or a new upload); "
                f"to trust the new file, remove {model.name}'s entry from that record and run `python -m spacy_elmo {command}` again"
            )
        whose, what = ("", "the file you pinned") if pin.origin == "pinned" else (" its publisher states", "the published file")
        raise WeightsError(
            f"{folder / file_name} has SHA-256 {got}, not the pinned {pin.digest}{whose}: it is not {what} "
            f"(check the pin, or run `python -m spacy_elmo {command} --force` to fetch it again)"
        )


def _record_first(model: PublishedModel, files: Mapping[str, Mapping[str, Any]], pinned: Sequence[str] = ()) -> None:
    """Record the digests of files whose publisher states none (:mod:`.first_seen`): the first
    seen, or one the caller pinned (``pinned``: those file names)."""
    fresh = {k: v for k, v in files.items() if k not in model.sha256 and isinstance(v, Mapping) and v.get("sha256")}
    known = first_seen(model)
    new = {k: v for k, v in fresh.items() if k not in known}
    repinned = {k: v for k, v in fresh.items() if k in pinned and k in known and known[k].get("sha256") != v.get("sha256")}
    if new:
        record_first_seen(model, new)
    if repinned:
        record_first_seen(model, repinned, replace=True)


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
    with FileLock(str(model.lock_file)):
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
    pins: Mapping[str, Pin],
    command: str,
) -> Path:
    name = model.name
    record = _read_record(folder)
    recorded: Dict[str, Dict[str, Any]] = record.get("files", {})
    if not force and _recorded(folder, files, recorded):
        _check_pins(folder, recorded, pins, model, command)
        _record_first(model, {f: recorded[f] for f in files}, [f for f, pin in pins.items() if pin.origin == "pinned"])
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
            fetched[file_name] = fetch(
                model.url(file_name), dest, progress=progress, known_size=model.sizes.get(file_name), redirects=model.redirects
            )
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
        _check_pins(folder, {k: {"sha256": v} for k, v in digests.items()}, pins, model, command)
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
    _write_record(folder, recorded, model.url(""))
    _record_first(model, {f: recorded[f] for f in files}, [f for f, pin in pins.items() if pin.origin == "pinned"])
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
    """Download a published model's files into the cache (or check the cached copy), convert an
    archive once, and return its folder. ``sha256``: ``{file name: hex digest}`` that the files
    must have (pinning)."""
    model = published_model(model)
    folder = fetch_files(model, model.files, check_for(model), force=force, progress=progress, sha256=sha256)
    if model.archive:
        cached_location(model)  # the conversion
    return folder


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
        if all((model.cache_dir / f).is_file() for f in model.files):
            return cached_location(model)  # placed by hand, or touched: check instead of downloading
        download(model)
    return cached_location(model)


def published_config(model: PublishedModel, *, download: bool = True) -> BiLMConfig:
    """The architecture of a published model: known by its shape, else read from its options
    file, cached or (``download``) fetched alone (a few hundred bytes; the weights are not)."""
    if model.shape_known:
        return model.config
    if model.archive:  # the configuration is inside the archive: read from its conversion
        location = ensure_downloaded(model) if download else cached_location(model)
        assert location.folder is not None  # an archive's location is its native folder
        return check_options_of(location.folder)
    check = lambda paths: check_options(paths[0])  # noqa: E731
    (options,) = ensure_files(model, [model.options_name], check, download=download)
    return check_options(options)


def check_options_of(folder: Path) -> BiLMConfig:
    """The architecture recorded in a native folder's ``config.json`` (one-line error otherwise)."""
    path = folder / "config.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return BiLMConfig.from_options(meta.get("options") if isinstance(meta, dict) else None, source=str(path))
    except (OSError, ValueError) as err:
        raise WeightsError(f"{path}: {err}") from None


def check_options(options: Path) -> BiLMConfig:
    """Options that describe a biLM (one-line error otherwise)."""
    try:
        return BiLMConfig.from_options(read_options(options), source=f"options file {options}")
    except OptionsError as err:
        raise WeightsError(str(err)) from None


def describe(names: Optional[Iterable[ModelRef]] = None) -> List[Dict[str, Any]]:
    """One row per published model: name, language, format, shape, licence, where it comes from,
    its stated download size, parameters, cache size and state (no network)."""
    rows = []
    for model in map(published_model, names or PUBLISHED):
        rows.append(
            {
                "name": model.name,
                "language": model.language,
                "format": model.format,
                "shape": model.shape,
                "trained_on": model.about,
                "reported": model.reported,
                "licence": model.licence,
                "url": model.url(model.files[0]),
                "page": model.page,
                "download_size": model.download_size,
                "cached": is_cached(model),
                "size_on_disk": cached_size(model),
                "folder": str(model.cache_dir),
                "parameters": model_parameters(model),
            }
        )
    return rows
