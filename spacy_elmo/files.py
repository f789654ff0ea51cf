"""Every file spacy-elmo writes goes through here: whole or not at all.

A file is written to a unique temporary name in its own folder, flushed to disk (``fsync``) and
renamed over the target, so a reader sees the old file or the new one, never a mix; a crash
leaves at most a ``.NAME.HOST-PID-TOKEN.tmp`` file behind. :func:`remove_stale_temporary` clears
those of writers that are gone (this host, a dead PID) or older than a day, never a live writer's.

A folder of several files (a token index, a biLM) counts as complete only when its manifest
exists: :func:`start_folder` removes an old manifest before anything else is replaced,
the files are written, and :func:`finish_folder` writes the manifest last, with each file's
size. :func:`check_folder` then refuses a partial folder with a message that names it.

A command's whole output (several files and folders in a folder the user names) goes through
:func:`write_into`: it is written into a scratch folder on the target's file system and moved in
only when it is complete, so a failed run leaves the previous output as it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, TypeVar, Union

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")


class IncompleteFolderError(ValueError):
    """A folder whose save did not finish (no manifest), or whose files do not match its manifest."""


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk, where the platform allows."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


STALE_SECONDS = 24 * 3600  # a temporary file this old is removed whoever wrote it
_HOST = hashlib.sha256(socket.gethostname().encode("utf-8")).hexdigest()[:8]  # a shared folder may see other hosts
_OWNED = re.compile(r"\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+\.tmp$")


def temporary_name(path: Path) -> Path:
    """A unique hidden name next to ``path`` for its content in progress, naming this host and process."""
    return path.with_name(f".{path.name}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:16]}.tmp")


def _alive(pid: int) -> bool:
    if os.name == "nt":  # pragma: no cover - no signal 0 there: age decides
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _stale(path: Path, now: float) -> bool:
    """A temporary file whose writer is gone: on this host with a dead PID, or older than a day."""
    match = _OWNED.search(path.name)
    if match is not None and match["host"] == _HOST and not _alive(int(match["pid"])):
        return True
    try:
        return now - path.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:  # its writer renamed or removed it meanwhile
        return False


def write_atomic(path: PathLike, write: Callable[[Any], Any], by_path: bool = False) -> Path:
    """Call ``write`` on an open binary temporary file next to ``path`` (or, with ``by_path``,
    on the temporary file's path, for writers that open it themselves), flush it to disk, then
    rename it to ``path``. The folder must exist. Returns ``path``."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        if by_path:
            write(tmp)
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
        else:
            with open(tmp, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return write_atomic(path, lambda handle: handle.write(data))


def write_json(path: PathLike, data: Any, indent: Optional[int] = 1) -> Path:
    """Write ``data`` as UTF-8 JSON (and a final newline) to ``path`` atomically."""
    return write_bytes(path, (json.dumps(data, indent=indent) + "\n").encode("utf-8"))  # ASCII: lone surrogates stay escaped


def read_record(path: PathLike) -> Dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when it is missing, unreadable or not an object."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def save_npy(path: PathLike, array: Any) -> Path:
    """``numpy.save`` to ``path`` atomically (no pickles)."""
    import numpy as np

    return write_atomic(path, lambda handle: np.save(handle, array, allow_pickle=False))


def _temporaries(folder: Path) -> List[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp") and p.is_file()]


def remove_stale_temporary(folder: Path) -> int:
    """Delete temporary files left in ``folder`` by writers killed mid-write (a dead PID on this
    host, or older than a day); a live writer's are kept. Returns how many were removed."""
    now = time.time()
    stale = [p for p in _temporaries(folder) if _stale(p, now)]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def remove_temporary(folder: Path) -> int:
    """Delete every temporary file in ``folder``, whoever wrote it: only for a folder that no one
    else writes to (e.g. a finished corpus run's output); otherwise :func:`remove_stale_temporary`.
    Returns how many were removed."""
    found = _temporaries(folder)
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)


def start_folder(folder: PathLike, manifest: str) -> Path:
    """Create ``folder`` (or reuse it) for a new save: its old ``manifest`` is removed first, so
    that the folder reads as incomplete until :func:`finish_folder`."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} exists and is a file: save to a folder")
    folder.mkdir(parents=True, exist_ok=True)
    old = folder / manifest
    if old.exists():
        old.unlink()
        fsync_dir(folder)
    remove_stale_temporary(folder)  # another process may be saving into the same folder: keep its files
    return folder


def finish_folder(folder: PathLike, manifest: str, data: Dict[str, Any], files: Iterable[str]) -> Path:
    """Write ``manifest`` last, recording the byte size of each of ``files`` under ``"files"``."""
    folder = Path(folder)
    sizes = {name: (folder / name).stat().st_size for name in files}
    return write_json(folder / manifest, {**data, "files": sizes})


def check_folder(folder: PathLike, manifest: str, what: str, members: Iterable[str] = ()) -> Dict[str, Any]:
    """Read a folder's manifest and check that every file it lists is there with its size.

    ``members``: file names that only this kind of folder holds; if the manifest is missing but
    one of them is there, the folder is a partial save (named in the error) rather than a
    foreign one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{what} not found: {folder} is not a folder")
    path = folder / manifest
    if not path.is_file():
        present = sorted(name for name in members if (folder / name).exists())
        if present:
            raise IncompleteFolderError(
                f"{folder} is an incomplete {what} (it has {', '.join(present)} but no {manifest}, which is written last: "
                f"its save was interrupted); save it again"
            )
        raise FileNotFoundError(f"{folder} is not a {what} folder (no {manifest})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise IncompleteFolderError(f"{path} is not valid JSON ({err}): the {what} is damaged; save it again") from None
    if not isinstance(data, dict):
        raise IncompleteFolderError(f"{path} is not a {what} manifest")
    for name, size in dict(data.get("files") or {}).items():
        member = folder / name
        if not member.is_file():
            raise IncompleteFolderError(f"{folder}: {name} is missing, though {manifest} lists it: the {what} is incomplete; save it again")
        if member.stat().st_size != size:
            raise IncompleteFolderError(
                f"{folder}: {name} has {member.stat().st_size:,} bytes, {manifest} says {size:,}: the {what} was changed "
                f"after it was saved; save it again"
            )
    return data


def _remove(path: Path) -> None:
    """Delete a file, a link or a folder tree (nothing if it is not there)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def _rename(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target``; across file systems (EXDEV), copy it beside ``target``
    first and rename the copy, so that ``target`` still changes in one step."""
    try:
        os.replace(source, target)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        copy = temporary_name(target)
        try:
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, copy, symlinks=True)
            else:
                shutil.copy2(source, copy, follow_symlinks=False)
            os.replace(copy, target)
        finally:
            _remove(copy)
        _remove(source)


def _move_in(entry: Path, target: Path) -> None:
    """Put ``entry`` at ``target``: a file is renamed over the old one; a folder replaces the old one
    whole (the old one renamed aside first, then removed, or put back when the move fails), so none
    of the old folder's files stays and a failed move loses nothing."""
    if entry.is_dir() and not entry.is_symlink() and (target.exists() or target.is_symlink()):
        aside = target.with_name(f".{target.name}.{uuid.uuid4().hex[:16]}.old")
        target.rename(aside)
        try:
            _rename(entry, target)
        except BaseException:
            aside.rename(target)
            raise
        _remove(aside)
        return
    if target.is_dir() and not target.is_symlink():
        _remove(target)
    _rename(entry, target)


def output_folder(out: PathLike) -> Path:
    """The folder ``out`` names, checked before any work: a link is followed to its target (a
    dangling one to the path it names, when that path's folder exists; refused otherwise); a file
    is refused."""
    out = Path(out)
    if out.is_symlink():
        target = Path(os.path.realpath(out))
        if not target.exists() and not target.parent.is_dir():
            raise FileNotFoundError(f"{out} is a link to {target}, whose folder does not exist: create it, or give another output folder")
        out = target
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file: give a folder to write into")
    return out


def scratch_parent(out: Path) -> Path:
    """Where the scratch folder of ``out`` goes: beside it, on the file system ``out`` lives on;
    inside it when ``out`` is on another file system than its parent (a mount point)."""
    if out.is_dir() and os.stat(out).st_dev != os.stat(out.parent).st_dev:
        return out
    return out.parent


def write_into(out: PathLike, write: Callable[[Path], T], owned: Iterable[str] = ()) -> T:
    """Fill the folder ``out`` whole or not at all, and return what ``write`` returns.

    ``out`` is checked first (:func:`output_folder`: a link is followed, a dangling one resolved or
    refused, before any work). ``write(scratch)`` writes into a new folder on ``out``'s file system
    (:func:`scratch_parent`); only when it returns is each entry moved into ``out`` (files renamed
    over the old ones, JSON files last; folders replacing the old ones whole, the old one put back
    if the move fails), and each name of ``owned`` (what this writer makes in ``out``) that it did
    not make this time is removed from ``out``. Anything else in ``out`` is left alone. If ``write``
    raises, ``out`` is as it was. The scratch folder is removed either way."""
    out = output_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=scratch_parent(out)))
    try:
        result = write(scratch)
        out.mkdir(parents=True, exist_ok=True)
        made = sorted(scratch.iterdir(), key=lambda p: (p.suffix == ".json", p.name))  # a JSON file last: it names the rest
        for entry in made:
            _move_in(entry, out / entry.name)
        for name in sorted(set(owned) - {p.name for p in made}):
            _remove(out / name)
        fsync_dir(out)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def replace_folder(out: PathLike, write: Callable[[Path], T]) -> T:
    """Replace the folder ``out`` whole, or not at all, and return what ``write`` returns.

    ``write(folder)`` fills a new folder beside ``out`` (on its file system, a dot name that ends in
    ``.partial``); only when it returns does that folder take ``out``'s place, the old ``out`` and
    every file in it removed once the new one is there (put back if the move fails). If ``write``
    raises, ``out`` is as it was and the new folder is removed. Unlike :func:`write_into`, nothing of
    the old ``out`` is kept: for a folder that is one thing (a model)."""
    out = output_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{uuid.uuid4().hex[:16]}.partial"
    staging.mkdir()
    try:
        result = write(staging)
        _move_in(staging, out)
        fsync_dir(out.parent)
        return result
    finally:
        _remove(staging)
