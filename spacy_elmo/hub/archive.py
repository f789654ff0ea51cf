"""Unpacking a downloaded archive (zip, or gzip tar: :func:`check_tar`, :func:`unpack_tar`) safely.

Every member is checked before anything is written (:func:`check_members`): its name must be a
relative path that stays inside the target folder (no absolute path, drive, backslash, ``..`` or
NUL), it must be a plain file or a folder (a symbolic link or device is refused), not encrypted,
compressed by a method this reader can read (:data:`METHODS`),
and named once (case-insensitively, so that no member overwrites another on a case-insensitive
file system); the archive may hold at most ``max_members`` members and ``max_bytes`` bytes once
unpacked, and no member may expand more than :data:`MAX_RATIO` times (a zip bomb). Unpacking
(:func:`unpack`) then writes the plain files only, counting the bytes it writes against the same
limits rather than trusting the sizes the archive declares, and checks each member's CRC. A gzip
tar is held to the same rules (its members' names, plain files and folders only, the limits
counted while writing), less the per-member ratio and CRC that its format does not have. Any
problem is a one-line :class:`WeightsError`.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import List

from ..bilm.errors import WeightsError

MAX_RATIO = 200  # a member may expand at most this many times (weights compress by a few percent, text a few times)
CHUNK = 1 << 20
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}  # what the published archives use and zlib reads


def _refuse(path: Path, why: str) -> WeightsError:
    return WeightsError(f"{path.name}: {why}: refused, nothing unpacked")


def member_path(path: Path, info: zipfile.ZipInfo) -> PurePosixPath:
    """The relative path a member unpacks to, or a one-line error when it would leave the folder."""
    return _relative(path, info.filename)


def _relative(path: Path, name: str) -> PurePosixPath:
    if "\x00" in name or "\\" in name:
        raise _refuse(path, f"member {name!r} has a NUL or a backslash in its name")
    relative = PurePosixPath(name)
    parts = relative.parts
    if relative.is_absolute() or not parts or ".." in parts or parts[0].endswith(":"):
        raise _refuse(path, f"member {name!r} would be written outside the folder it is unpacked into")
    return relative


def check_members(path: Path, max_members: int, max_bytes: int) -> List[zipfile.ZipInfo]:
    """The members of the zip archive at ``path`` once checked (see the module docstring)."""
    try:
        with zipfile.ZipFile(path) as handle:
            infos = handle.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise WeightsError(f"{path.name} is not a readable zip archive ({err})") from None
    if len(infos) > max_members:
        raise _refuse(path, f"it holds {len(infos):,} members, more than the {max_members:,} allowed")
    seen = set()
    total = 0
    for info in infos:
        relative = member_path(path, info)
        key = str(relative).rstrip("/").casefold()
        if key in seen:
            raise _refuse(path, f"member {info.filename!r} is named twice")
        seen.add(key)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a plain file or folder"
            raise _refuse(path, f"member {info.filename!r} is {what}")
        if info.flag_bits & 0x1:
            raise _refuse(path, f"member {info.filename!r} is encrypted")
        if info.compress_type not in METHODS:
            allowed = ", ".join(f"{k} ({v})" for k, v in METHODS.items())
            raise _refuse(path, f"member {info.filename!r} uses compression method {info.compress_type}; allowed: {allowed}")
        total += info.file_size
        if total > max_bytes:
            raise _refuse(path, f"it unpacks to more than {max_bytes:,} bytes")
        if info.file_size > (1 << 20) and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise _refuse(path, f"member {info.filename!r} expands {info.file_size / max(info.compress_size, 1):,.0f} times (a zip bomb?)")
    return infos


def unpack(path: Path, out_dir: Path, max_members: int, max_bytes: int) -> Path:
    """Unpack the zip archive at ``path`` into ``out_dir`` (created; it must not hold the members
    already), after :func:`check_members`; returns ``out_dir``."""
    infos = check_members(path, max_members, max_bytes)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = out.resolve()
    written = 0
    try:
        with zipfile.ZipFile(path) as handle:
            for info in infos:
                relative = member_path(path, info)
                dest = out.joinpath(*relative.parts)
                if not dest.resolve().is_relative_to(root):  # a folder of the target replaced by a link meanwhile
                    raise _refuse(path, f"member {info.filename!r} would be written outside {out}")
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                member_bytes = 0
                with handle.open(info) as source, open(dest, "xb") as target:
                    for block in iter(lambda: source.read(CHUNK), b""):
                        member_bytes += len(block)
                        written += len(block)
                        if member_bytes > info.file_size or written > max_bytes:
                            raise _refuse(path, f"member {info.filename!r} unpacks to more bytes than it declares")
                        target.write(block)
                    target.flush()
                    os.fsync(target.fileno())
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as err:  # a bad CRC, a damaged stream, a truncated member
        raise WeightsError(f"{path.name}: {err} (a damaged archive): refused") from None
    except FileExistsError as err:
        raise _refuse(path, f"{err.filename} exists already") from None
    return out


def check_tar(path: Path, max_members: int, max_bytes: int) -> List[tarfile.TarInfo]:
    """The members of the gzip tar archive at ``path`` once checked (see the module docstring)."""
    try:
        with tarfile.open(path, "r:gz") as handle:
            infos = []
            for info in handle:
                infos.append(info)
                if len(infos) > max_members:
                    raise _refuse(path, f"it holds more than the {max_members:,} members allowed")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise WeightsError(f"{path.name} is not a readable gzip tar archive ({err})") from None
    seen = set()
    total = 0
    for info in infos:
        key = str(_relative(path, info.name)).rstrip("/").casefold()
        if key in seen:
            raise _refuse(path, f"member {info.name!r} is named twice")
        seen.add(key)
        if not (info.isreg() or info.isdir()):
            what = "a link" if info.issym() or info.islnk() else "not a plain file or folder"
            raise _refuse(path, f"member {info.name!r} is {what}")
        total += info.size
        if total > max_bytes:
            raise _refuse(path, f"it unpacks to more than {max_bytes:,} bytes")
    return infos


def unpack_tar(path: Path, out_dir: Path, max_members: int, max_bytes: int) -> Path:
    """Unpack the gzip tar archive at ``path`` into ``out_dir`` (created; it must not hold the
    members already), after :func:`check_tar`; returns ``out_dir``."""
    infos = {info.name for info in check_tar(path, max_members, max_bytes)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = out.resolve()
    written = 0
    try:
        with tarfile.open(path, "r:gz") as handle:
            for info in handle:
                if info.name not in infos:  # the archive changed since it was checked
                    raise _refuse(path, f"member {info.name!r} was not there when it was checked")
                dest = out.joinpath(*_relative(path, info.name).parts)
                if not dest.resolve().is_relative_to(root):
                    raise _refuse(path, f"member {info.name!r} would be written outside {out}")
                if info.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                if not info.isreg():
                    raise _refuse(path, f"member {info.name!r} is not a plain file or folder")
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = handle.extractfile(info)
                assert source is not None  # a regular member always has its data
                member_bytes = 0
                with source, open(dest, "xb") as target:
                    for block in iter(lambda: source.read(CHUNK), b""):
                        member_bytes += len(block)
                        written += len(block)
                        if member_bytes > info.size or written > max_bytes:
                            raise _refuse(path, f"member {info.name!r} unpacks to more bytes than it declares")
                        target.write(block)
                    target.flush()
                    os.fsync(target.fileno())
    except (tarfile.TarError, EOFError) as err:
        raise WeightsError(f"{path.name}: {err} (a damaged archive): refused") from None
    except FileExistsError as err:
        raise _refuse(path, f"{err.filename} exists already") from None
    return out


__all__ = ["MAX_RATIO", "METHODS", "check_members", "check_tar", "member_path", "unpack", "unpack_tar"]
