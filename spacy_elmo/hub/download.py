"""Downloading a published model into the cache, and checking what the cache holds: the steps in order.

A name is resolved once, where it enters (:func:`download`, :func:`is_cached`, :func:`describe`);
everything else takes the :class:`PublishedModel` record. A download then runs these steps, each
handing its result to the next:

1. **lock**: one download per model at a time (a lock file), in a cache folder made private;
2. **fetch**: each file streams into a private ``NAME.part`` (:mod:`.transfer`: resumed only when
   the server proves it is the same file, held to its announced or known length);
3. **verify** (:mod:`.verify`): each file's SHA-256 against the digest it must have (:mod:`.pins`:
   the publisher's, the caller's pin, else the first download's), the check of its kind, and for
   an ELMoForManyLangs archive every member's CRC and the conversion itself, in a scratch folder.
   Files that fail are removed, and nothing about them is recorded;
4. **record and move into place** (:mod:`.place`): the first-seen digests, then the files under
   their names, ``verified.json`` (:mod:`.verified`: each file's SHA-256, size, mtime, URL and
   validators) and the archive's conversion.

Later loads compare size and mtime with ``verified.json``, hash again only when those changed, and
refuse a file whose content changed (one-line error; ``download --force`` fetches it again, and
the new copy must have the first download's digest). Files placed by hand go through the same
verify and record steps the first time they are read.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..bilm.errors import WeightsError
from ..bilm.model import BiLMConfig
from ..cache import make_private_folders
from . import trf_archive
from .efml_archive import native_folder
from .pins import Pin, check_pins, pinned_names, pins_for, record_first
from .place import record_and_place
from .published import FORMAT_TRF, MIRROR_ENV, PUBLISHED, ModelRef, PublishedModel, model_parameters, published_model
from .transfer import Fetched, Unreachable, discard, fetch, part_path, sidecar_path
from .verified import RECORD_NAME, read_verified, recorded_files, sha256_of, stamp, unchanged, write_verified
from .verify import Check, check_files, check_for, check_options, verify, verify_download


class Location(NamedTuple):
    """Files to load: ``native`` (config.json + weights.pt in ``folder``) or the original pair."""

    native: bool
    folder: Optional[Path]
    options: Optional[Path] = None
    weights: Optional[Path] = None


# ---------------------------------------------------------------------------------------------
# the steps of a download


def lock(model: PublishedModel) -> Any:
    """Step 1: the model's lock, its cache folder made private first (0700 whatever the umask: the
    kernels refuse a wider cache folder)."""
    from filelock import FileLock

    make_private_folders(model.cache_dir.parent)
    return FileLock(str(model.lock_file))


def fetch_parts(
    model: PublishedModel, folder: Path, files: Sequence[str], progress: bool, command: str
) -> Tuple[List[Path], Dict[str, Fetched]]:
    """Step 2: each of ``files`` as a complete part (or the file already in place: placed by hand,
    or renamed by an earlier run after its checks), and what the server said of those fetched."""
    paths: List[Path] = []
    fetched: Dict[str, Fetched] = {}
    for file_name in files:
        dest = folder / file_name
        if dest.is_file():
            paths.append(dest)
            continue
        try:
            fetched[file_name] = fetch(
                model.url(file_name), dest, progress=progress, known_size=model.sizes.get(file_name), redirects=model.redirects
            )
        except Unreachable as err:
            raise WeightsError(
                f"{model.name} is not cached in {folder} and {err.url} cannot be reached ({err}): download it where there is "
                f"network (`python -m spacy_elmo {command}`) and copy the folder, set {MIRROR_ENV} to a mirror, "
                f"or place {' and '.join(files)} in {folder} by hand"
            ) from None
        paths.append(fetched[file_name].part)
    return paths, fetched


def fetch_files(
    model: PublishedModel,
    files: Sequence[str],
    check: Check,
    *,
    force: bool = False,
    progress: bool = True,
    sha256: Optional[Mapping[str, str]] = None,
    command: str = "",
) -> Path:
    """Download ``files`` of ``model`` into its cache folder (or check the recorded copies)
    through the steps of the module docstring; ``check``: the check of their kind (:mod:`.verify`);
    ``sha256``: ``{file name: hex digest}`` pins; ``command``: the ``download`` command that
    fetches them, for messages (default: ``download NAME``). Returns the folder."""
    folder = model.cache_dir
    command = command or f"download {model.name}"
    pins = pins_for(model, files, sha256)
    with lock(model):
        created = not folder.is_dir()  # made here, under the lock: removed again if a failure leaves it empty
        make_private_folders(folder)
        try:
            recorded = recorded_files(folder)
            if not force and unchanged(folder, files, recorded):
                check_pins(folder, {f: recorded[f].get("sha256") for f in files}, pins, model, command)
                record_first(model, {f: recorded[f] for f in files}, pinned_names(pins))
                return folder
            if force:
                for file_name in files:
                    (folder / file_name).unlink(missing_ok=True)
                    discard(folder / file_name)
                    recorded.pop(file_name, None)
            paths, fetched = fetch_parts(model, folder, files, progress, command)
            verified = verify_download(model, folder, files, paths, check, pins, command)
            record_and_place(model, folder, verified, fetched, recorded, pinned_names(pins), model.url(""))
            return folder
        except BaseException:
            _drop_useless_parts(folder, files)
            if created:
                remove_created_folder(folder)
            raise


def _drop_useless_parts(folder: Path, files: Sequence[str]) -> None:
    """A part with no byte, or no sidecar to resume it with, is of no use; nor a sidecar without its part."""
    for file_name in files:
        part = part_path(folder / file_name)
        if part.is_file() and (part.stat().st_size == 0 or not sidecar_path(folder / file_name).is_file()):
            discard(folder / file_name)
        elif not part.exists():
            sidecar_path(folder / file_name).unlink(missing_ok=True)


def remove_created_folder(folder: Path) -> None:
    """Remove ``folder`` if it is empty; another process may have put something in it, or removed
    it, meanwhile (both are fine)."""
    try:
        folder.rmdir()
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise


# ---------------------------------------------------------------------------------------------
# the cache


def cached_files(model: PublishedModel, file_names: Sequence[str], check: Check, command: str = "") -> List[Path]:
    """The cached ``file_names`` of a published model, checked against ``verified.json`` (and the
    digests they must have); files placed by hand (no record yet) go through the verify and record
    steps once. Raises a one-line error when one is absent or changed since it was recorded.
    ``command``: the ``download`` command that fetches them, for messages."""
    name, folder = model.name, model.cache_dir
    paths = [folder / f for f in file_names]
    command = command or f"download {name}"
    if not all(p.is_file() for p in paths):
        raise WeightsError(
            f"{' and '.join(file_names)} of {name} are not in the cache ({folder}): run `python -m spacy_elmo {command}`, "
            f"or place them there by hand from {model.url('')}"
        )
    pins = pins_for(model, file_names)
    files = recorded_files(folder)
    if any(not isinstance(files.get(f), dict) for f in file_names):  # placed by hand: verified whole, then recorded
        with lock(model):
            verified = verify(model, folder, file_names, paths, check, pins, command)
            record_and_place(model, folder, verified, {}, files, (), str(read_verified(folder).get("source", "placed by hand")))
        return paths
    changed = False
    for path in paths:
        entry = files[path.name]
        if unchanged(folder, [path.name], files):
            continue
        if sha256_of(path) != entry.get("sha256"):
            raise WeightsError(
                f"{path} changed since it was recorded (its SHA-256 differs from {RECORD_NAME}): refused, not "
                f"downloaded again; delete {folder} or run `python -m spacy_elmo {command} --force`"
            )
        files[path.name] = {**entry, **stamp(path)}  # touched, same content
        changed = True
    check_pins(folder, {f: files[f].get("sha256") for f in file_names}, pins, model, command)
    record_first(model, {f: files[f] for f in file_names})
    if changed:
        write_verified(folder, files, str(read_verified(folder).get("source", "placed by hand")))
    return paths


def cached_location(model: PublishedModel) -> Location:
    """The cached files of a published model (see :func:`cached_files`); for an archive, its
    conversion, made now from the recorded archive when missing or made from another one."""
    paths = cached_files(model, model.files, check_for(model))
    if model.archive:
        entry = recorded_files(model.cache_dir).get(model.archive, {})
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        convert = trf_archive.native_folder if model.format == FORMAT_TRF else native_folder
        return Location(True, convert(model, paths[0], digest or sha256_of(paths[0])))
    return Location(False, paths[0].parent, paths[0], paths[1])


def is_cached(model: ModelRef, file_names: Optional[Sequence[str]] = None) -> bool:
    """The model's files (or ``file_names``) present with the size and mtime recorded when they
    were checked (no hashing)."""
    model = published_model(model)
    folder = model.cache_dir
    return unchanged(folder, model.files if file_names is None else file_names, recorded_files(folder))


def cached_size(model: PublishedModel) -> int:
    """Bytes the model's cache folder holds, its conversion included (0 when absent)."""
    folder = model.cache_dir
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


# ---------------------------------------------------------------------------------------------
# entry points


def download(model: ModelRef, *, force: bool = False, progress: bool = True, sha256: Optional[Mapping[str, str]] = None) -> Path:
    """Download a published model's files into the cache (or check the cached copy), convert an
    archive once, and return its folder. ``sha256``: ``{file name: hex digest}`` that the files
    must have (pinning)."""
    model = published_model(model)
    folder = fetch_files(model, model.files, check_for(model), force=force, progress=progress, sha256=sha256)
    if model.archive:
        cached_location(model)  # the conversion, when the archive was recorded before it was made
    return folder


def ensure_files(model: PublishedModel, files: Sequence[str], check: Check, *, download: bool = True, command: str = "") -> List[Path]:
    """The checked ``files`` of ``model`` in the cache (see :func:`cached_files`), fetched first
    (see :func:`fetch_files`) when ``download`` and they are not all recorded as checked."""
    folder = model.cache_dir
    if download and not unchanged(folder, files, recorded_files(folder)):
        folder = fetch_files(model, files, check, command=command)
        return [folder / f for f in files]
    return cached_files(model, files, check, command)


def ensure_downloaded(model: PublishedModel) -> Location:
    """The cached files of ``model``, downloading them first when absent or incomplete."""
    if not is_cached(model) and not all((model.cache_dir / f).is_file() for f in model.files):
        fetch_files(model, model.files, check_for(model))  # placed by hand, or touched: checked below instead
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


__all__ = [
    "RECORD_NAME",
    "Location",
    "Pin",
    "cached_files",
    "cached_location",
    "cached_size",
    "check_files",
    "check_for",
    "check_options",
    "describe",
    "download",
    "ensure_downloaded",
    "ensure_files",
    "fetch_files",
    "is_cached",
    "published_config",
    "remove_created_folder",
    "sha256_of",
]
