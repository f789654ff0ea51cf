"""Downloading a published model into the cache, and checking what the cache holds.

A transfer streams into ``NAME.part`` (with a progress bar) and resumes with an HTTP Range request
after an interruption; the result must have the announced size, parse as options and hold every
HDF5 dataset the options require, with the right shapes, before it is renamed into place; files
that fail are deleted. ``verified.json`` (written last) records each file's SHA-256, size and
mtime: later loads compare size and mtime, and hash again only when those changed. One download
per model at a time (a lock file), so concurrent processes are safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional

from ..bilm.errors import WeightsError
from ..bilm.layout import check_hdf5, read_options
from ..bilm.model import BiLMConfig, OptionsError
from ..files import fsync_dir, write_json
from .published import MIRROR_ENV, PUBLISHED, model_dir, parameter_count, published_base, published_model

RECORD_NAME = "verified.json"
CHUNK = 1 << 20  # hashing
STREAM_CHUNK = 1 << 16  # an interrupted read loses at most this much of what was received


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


def verify_files(options: Path, weights: Path) -> BiLMConfig:
    """The checks a download must pass: options that describe a biLM, and an HDF5 file holding
    every dataset those options require, with the right shapes."""
    try:
        config = BiLMConfig.from_options(read_options(options), source=f"options file {options}")
    except OptionsError as err:
        raise WeightsError(str(err)) from None
    check_hdf5(weights, config)
    return config


def cached_location(name: str) -> Location:
    """The cached files of a published model, checked against ``verified.json``; a folder filled
    by hand (no record yet) is verified and hashed once. Raises a one-line error when absent."""
    model = published_model(name)
    folder = model_dir(name)
    options, weights = folder / model.options_name, folder / model.weights_name
    if not (options.is_file() and weights.is_file()):
        raise WeightsError(
            f"{name} is not in the cache ({folder}): run `python -m spacy_elmo download {name}`, or place "
            f"{model.options_name} and {model.weights_name} from {model.folder} of the published location there by hand"
        )
    record = _read_record(folder)
    files = record.get("files", {})
    changed = False
    for path in (options, weights):
        entry = files.get(path.name)
        if isinstance(entry, dict) and {k: entry.get(k) for k in ("size", "mtime_ns")} == _stamp(path):
            continue
        if not isinstance(entry, dict):  # placed by hand: verify once, then record
            verify_files(options, weights)
            files[path.name] = {"sha256": _sha256(path), **_stamp(path)}
        elif _sha256(path) == entry.get("sha256"):  # touched, same content
            files[path.name] = {**entry, **_stamp(path)}
        else:
            raise WeightsError(
                f"{path} changed since it was verified (SHA-256 differs from {RECORD_NAME}): delete {folder} "
                f"or run `python -m spacy_elmo download {name} --force`"
            )
        changed = True
    if changed:
        _write_record(folder, files, record.get("source", "placed by hand"))
    return Location(False, folder, options, weights)


def is_cached(name: str) -> bool:
    """Both files present and their size and mtime as recorded at verification (no hashing)."""
    model = published_model(name)
    folder = model_dir(name)
    files = _read_record(folder).get("files", {})
    for file_name in (model.options_name, model.weights_name):
        path, entry = folder / file_name, files.get(file_name)
        if not path.is_file() or not isinstance(entry, dict):
            return False
        if {k: entry.get(k) for k in ("size", "mtime_ns")} != _stamp(path):
            return False
    return True


def cached_size(name: str) -> int:
    """Bytes the model's cache folder holds (0 when absent)."""
    folder = model_dir(name)
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


# ---------------------------------------------------------------------------------------------
# download


class _Interrupted(WeightsError):
    pass


def _fetch(url: str, dest: Path, progress: bool) -> Path:
    """Stream ``url`` into ``dest.part``, resuming a previous part with a Range request."""
    import requests

    from ..progress import progress_bar

    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=(15, 60))
    except requests.RequestException as err:
        raise _Unreachable(url, err) from None
    with response:
        if response.status_code == 416 and have:  # the part is longer than the file: start again
            part.unlink()
            return _fetch(url, dest, progress)
        if response.status_code == 206 and have:
            total = _range_total(response.headers.get("Content-Range", ""), have, url)
            mode = "ab"
        elif response.status_code == 200:
            have, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        else:
            raise WeightsError(f"{url}: HTTP {response.status_code} {response.reason}; check the model name or {MIRROR_ENV}")
        bar = progress_bar(
            total=total,
            initial=have,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=dest.name,
            disable=not progress,
            file=sys.stderr,
        )
        try:
            with open(part, mode) as handle:
                try:
                    for block in response.iter_content(STREAM_CHUNK):
                        handle.write(block)
                        bar.update(len(block))
                except (requests.RequestException, OSError) as err:
                    handle.flush()
                    os.fsync(handle.fileno())
                    done = handle.tell()
                    raise _Interrupted(
                        f"download of {url} interrupted at {done:,} of {total or '?':,} bytes ({type(err).__name__}); "
                        f"run the same command again to resume"
                    ) from None
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            bar.close()
    size = part.stat().st_size
    if total is not None and size < total:
        raise _Interrupted(f"download of {url} stopped at {size:,} of {total:,} bytes; run the same command again to resume")
    if total is not None and size > total:
        part.unlink()
        raise WeightsError(f"download of {url} gave {size:,} bytes, more than the announced {total:,}: removed; run again")
    return part


def _range_total(content_range: str, start: int, url: str) -> Optional[int]:
    # "bytes START-END/TOTAL"
    try:
        unit, rest = content_range.split(" ", 1)
        span, total = rest.split("/", 1)
        first = int(span.split("-", 1)[0])
    except ValueError:
        raise WeightsError(f"{url}: the server answered a resumed download with a malformed Content-Range {content_range!r}") from None
    if unit != "bytes" or first != start:
        raise WeightsError(f"{url}: the server resumed at byte {first}, not {start}; delete the .part file and run again")
    return int(total) if total.isdigit() else None


class _Unreachable(WeightsError):
    def __init__(self, url: str, err: BaseException) -> None:
        reason = getattr(err, "reason", None) or type(err).__name__
        super().__init__(str(reason))
        self.url = url


def download(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """Download a published model into the cache (or check the cached copy) and return its folder."""
    from filelock import FileLock

    model = published_model(name)
    folder = model_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{name}.lock")):
        if not force and is_cached(name):
            return folder
        if force:
            for file_name in (RECORD_NAME, model.options_name, model.weights_name):
                (folder / file_name).unlink(missing_ok=True)
        targets = [(model.options_url, folder / model.options_name), (model.weights_url, folder / model.weights_name)]
        parts: List[Path] = []
        for url, dest in targets:
            if dest.is_file() and not force:  # complete from an earlier run (renamed only after checks)
                parts.append(dest)
                continue
            try:
                parts.append(_fetch(url, dest, progress))
            except _Unreachable as err:
                if not any(folder.iterdir()):
                    folder.rmdir()  # leave no empty folder behind
                raise WeightsError(
                    f"{name} is not cached in {folder} and {err.url} cannot be reached ({err}): download it where there is "
                    f"network (`python -m spacy_elmo download {name}`) and copy the folder, set {MIRROR_ENV} to a mirror, "
                    f"or place {model.options_name} and {model.weights_name} in {folder} by hand"
                ) from None
        try:
            verify_files(parts[0], parts[1])
        except WeightsError as err:
            for part in parts:  # nothing that failed stays in the cache
                part.unlink(missing_ok=True)
            raise WeightsError(f"{name}: the downloaded files failed verification and were removed ({err})") from None
        files: Dict[str, Dict[str, Any]] = {}
        for part, (url, dest) in zip(parts, targets):
            digest = _sha256(part)
            if part != dest:
                os.replace(part, dest)
            files[dest.name] = {"sha256": digest, **_stamp(dest)}
        fsync_dir(folder)
        _write_record(folder, files, published_base() + model.folder)
    return folder


def ensure_downloaded(name: str) -> Location:
    """The cached files of ``name``, downloading them first when absent or incomplete."""
    if not is_cached(name):
        model = published_model(name)
        folder = model_dir(name)
        if (folder / model.options_name).is_file() and (folder / model.weights_name).is_file():
            return cached_location(name)  # placed by hand, or touched: verify instead of downloading
        download(name)
    return cached_location(name)


def describe(names: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
    """One row per published model: name, shape, parameters, cache size and state (no network)."""
    rows = []
    for name in names or PUBLISHED:
        model = published_model(name)
        rows.append(
            {
                "name": model.name,
                "shape": model.shape,
                "trained_on": model.about,
                "reported": model.reported,
                "cached": is_cached(name),
                "size_on_disk": cached_size(name),
                "folder": str(model_dir(name)),
                "parameters": parameter_count(model.shape),
            }
        )
    return rows
