"""Published ELMo models by name: where they live, the local cache, download and verification.

``resolve_weights(spec)`` turns anything the ``weights`` setting accepts (a published name, the
embedded default's name, a folder, or the two published files) into the files to load, and
downloads a published model on first use:

* the files come from ``PUBLISHED_BASE`` + the model's path; ``SPACY_ELMO_MIRROR`` replaces the
  base (everything up to and including ``allennlp/``) and keeps the rest of the path;
* they are cached in ``SPACY_ELMO_CACHE`` (default: the user's cache folder) under the model's
  name, with the published file names, so the folder also loads as a plain path;
* a transfer streams into ``NAME.part`` and resumes with an HTTP Range request after an
  interruption; the result must have the announced size, parse as options and hold every HDF5
  dataset the options require, with the right shapes, before it is renamed into place; a file
  that fails is deleted. ``verified.json`` (written last) records each file's SHA-256, size and
  mtime: later loads compare size and mtime, and hash again only when those changed;
* one download per model at a time (a lock file), so concurrent processes are safe.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Union

from .errors import WeightsError
from .layout import check_hdf5, read_options
from .model import BiLMConfig, OptionsError

PUBLISHED_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/"
MIRROR_ENV, CACHE_ENV = "SPACY_ELMO_MIRROR", "SPACY_ELMO_CACHE"
DEFAULT_NAMES = ("en_default", "default")  # the embedded default English model
NATIVE_CONFIG, NATIVE_WEIGHTS = "config.json", "weights.pt"
HDF5_SUFFIXES = (".hdf5", ".h5")
RECORD_NAME = "verified.json"
CHUNK = 1 << 20  # hashing
STREAM_CHUNK = 1 << 16  # an interrupted read loses at most this much of what was received

WeightsSpec = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


@dataclass(frozen=True)
class PublishedModel:
    """One published biLM: its name here, its shape and where its two files live."""

    name: str
    shape: str
    folder: str  # path below the published base
    options_name: str
    weights_name: str
    about: str
    reported: str  # the quality its authors report

    def url(self, file_name: str) -> str:
        return published_base() + self.folder + file_name

    @property
    def options_url(self) -> str:
        return self.url(self.options_name)

    @property
    def weights_url(self) -> str:
        return self.url(self.weights_name)


def _allennlp(name: str, shape: str, about: str, reported: str) -> PublishedModel:
    return PublishedModel(
        name, shape.replace("_5.5B", ""), f"models/elmo/{shape}/", f"elmo_{shape}_options.json", f"elmo_{shape}_weights.hdf5",
        about, reported,
    )


PUBLISHED: Dict[str, PublishedModel] = {
    m.name: m
    for m in (
        _allennlp("elmo-small", "2x1024_128_2048cnn_1xhighway", "1B Word Benchmark", "SRL F1 83.62, constituency F1 93.12"),
        _allennlp("elmo-medium", "2x2048_256_2048cnn_1xhighway", "1B Word Benchmark", "SRL F1 84.04, constituency F1 93.60"),
        _allennlp("elmo-original", "2x4096_512_2048cnn_2xhighway", "1B Word Benchmark", "SRL F1 84.63, constituency F1 93.85"),
        _allennlp(
            "elmo-original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B", "Wikipedia + WMT news 2008-2012, 5.5B tokens",
            "SRL F1 84.93, constituency F1 94.01",
        ),
        PublishedModel(
            "elmo-pubmed", "2x4096_512_2048cnn_2xhighway", "models/elmo/contributed/pubmed/",
            "elmo_2x4096_512_2048cnn_2xhighway_options.json", "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
            "PubMed abstracts (contributed)", "no task figures published with it",
        ),
    )
}


class Location(NamedTuple):
    """Files to load: ``native`` (config.json + weights.pt in ``folder``) or the original pair."""

    native: bool
    folder: Optional[Path]
    options: Optional[Path] = None
    weights: Optional[Path] = None


# ---------------------------------------------------------------------------------------------
# settings


def published_base() -> str:
    """``SPACY_ELMO_MIRROR`` (with a trailing slash) or the published location."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return PUBLISHED_BASE
    return mirror if mirror.endswith("/") else mirror + "/"


def cache_root() -> Path:
    """``SPACY_ELMO_CACHE``, else the user's cache folder (platformdirs, XDG_CACHE_HOME or ~/.cache) + spacy-elmo."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
        return Path(base) / "spacy-elmo"
    return Path(user_cache_dir("spacy-elmo", appauthor=False))


def model_dir(name: str) -> Path:
    """Cache folder of a published model (it holds the two files under their published names)."""
    return cache_root() / published_model(name).name


def published_model(name: str) -> PublishedModel:
    if name not in PUBLISHED:
        raise WeightsError(f"unknown ELMo model name {name!r}: use one of {', '.join(PUBLISHED)}, en_default, or a folder")
    return PUBLISHED[name]


# ---------------------------------------------------------------------------------------------
# resolution


def is_name(spec: Any) -> bool:
    """True for a published model's name that is not also an existing path."""
    return isinstance(spec, str) and spec in PUBLISHED and not Path(spec).exists()


def normalise_spec(spec: Any) -> Union[str, List[str]]:
    """The ``weights`` setting as stored in a config: a string, or a list of the two files."""
    if isinstance(spec, (str, os.PathLike)):
        return str(spec)
    if isinstance(spec, (list, tuple)):
        return [str(p) for p in spec]
    raise WeightsError(f"weights={spec!r}: use a published model name, a folder, or a list of the options.json and .hdf5 files")


def check_weights_spec(spec: Any) -> None:
    """Validate a ``weights`` value without loading or downloading anything (one-line errors)."""
    if spec is None or (isinstance(spec, str) and spec in DEFAULT_NAMES):
        return
    value = normalise_spec(spec)
    if isinstance(value, list):
        _pair(value)
        return
    if value in PUBLISHED or Path(value).exists():
        return
    raise WeightsError(
        f"weights={value!r}: no such folder, and not a model name; use one of {', '.join(PUBLISHED)}, en_default, "
        f"a model folder, or the options.json and .hdf5 files as a list"
    )


def _pair(files: Sequence[str]) -> Location:
    if len(files) != 2:
        raise WeightsError(f"weights={list(files)!r}: a list must hold exactly two files, options.json and the .hdf5 weights")
    paths = [Path(f) for f in files]
    options = [p for p in paths if p.suffix.lower() == ".json"]
    weights = [p for p in paths if p.suffix.lower() in HDF5_SUFFIXES]
    if len(options) != 1 or len(weights) != 1:
        raise WeightsError(f"weights={list(files)!r}: expected one .json options file and one .hdf5 weights file")
    for path in paths:
        if not path.is_file():
            raise WeightsError(f"weights: file not found: {path}")
    return Location(False, None, options[0], weights[0])


def find_original_files(directory: Path) -> Location:
    """The options file (``options.json`` or one ``*options.json``) and the one HDF5 file in ``directory``."""
    options = directory / "options.json"
    if not options.is_file():
        named = sorted(p for p in directory.glob("*options.json") if p.is_file())
        if len(named) > 1:
            raise WeightsError(f"{directory}: several options files ({', '.join(p.name for p in named)}); pass the two files explicitly")
        if not named:
            raise WeightsError(
                f"{directory}: neither {NATIVE_CONFIG} (spacy-elmo format) nor options.json (original format; or the published *_options.json) found"
            )
        options = named[0]
    candidates = sorted(p for p in directory.iterdir() if p.suffix.lower() in HDF5_SUFFIXES and p.is_file())
    if not candidates:
        raise WeightsError(f"{directory}: {options.name} found but no .hdf5 weights file beside it")
    if len(candidates) > 1:
        preferred = [p for p in candidates if "weight" in p.name.lower()]
        if len(preferred) != 1:
            names = ", ".join(p.name for p in candidates)
            raise WeightsError(f"{directory}: several .hdf5 files ({names}); pass weight_file= to choose one")
        candidates = preferred
    return Location(False, directory, options, candidates[0])


def resolve_weights(spec: WeightsSpec, *, download: bool = True) -> Location:
    """The files behind a ``weights`` value: a published name (cached, else downloaded unless
    ``download=False``), ``en_default``, a folder (spacy-elmo format, ``options.json`` + one
    ``.hdf5``, or the published file names), or a list of the options and weights files."""
    value = normalise_spec(spec)
    if isinstance(value, list):
        return _pair(value)
    if value in DEFAULT_NAMES and not Path(value).exists():
        from ..models import default_model_path

        return Location(True, default_model_path())
    if is_name(value):
        return cached_location(value) if not download else ensure_downloaded(value)
    path = Path(value)
    if not path.exists():
        raise WeightsError(
            f"ELMo weights not found: {path} does not exist (model names: {', '.join(PUBLISHED)}, en_default)"
        )
    if path.is_file():
        raise WeightsError(f"{path} is a file: pass its folder, or the options.json and .hdf5 files as a list")
    if (path / NATIVE_CONFIG).is_file():
        return Location(True, path)
    return find_original_files(path)


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
    tmp = folder / (RECORD_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"source": source, "files": files}, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, folder / RECORD_NAME)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


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
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name, disable=not progress,
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
        _fsync_dir(folder)
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
        rows.append({
            "name": model.name, "shape": model.shape, "trained_on": model.about, "reported": model.reported,
            "cached": is_cached(name), "size_on_disk": cached_size(name), "folder": str(model_dir(name)),
            "parameters": parameter_count(model.shape),
        })
    return rows


def shape_options(shape: str) -> Dict[str, Any]:
    """options.json of a published shape ``{layers}x{cell}_{proj}_2048cnn_{k}xhighway``."""
    import re

    match = re.fullmatch(r"(\d+)x(\d+)_(\d+)_2048cnn_(\d+)xhighway", shape)
    if match is None:
        raise WeightsError(f"not a published ELMo shape: {shape!r}")
    layers, cell, proj, highway = (int(g) for g in match.groups())
    filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    return {
        "lstm": {"use_skip_connections": True, "projection_dim": proj, "cell_clip": 3, "proj_clip": 3, "dim": cell, "n_layers": layers},
        "char_cnn": {
            "activation": "relu", "filters": filters, "n_highway": highway, "embedding": {"dim": 16},
            "n_characters": 262, "max_characters_per_token": 50,
        },
    }


def parameter_count(shape: str) -> int:
    """Parameters of the biLM (char CNN + LSTMs, no softmax) for a published shape."""
    from .layout import hdf5_datasets

    config = BiLMConfig.from_options(shape_options(shape), source=shape)
    total = 0
    for dims in hdf5_datasets(config).values():
        count = 1
        for d in dims:
            count *= d
        total += count
    return total
