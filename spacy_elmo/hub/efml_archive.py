"""An ELMoForManyLangs model published as a zip archive: checked, unpacked safely, converted once.

The archive is downloaded like any published file (:mod:`.download`: resumable, its SHA-256
recorded and compared with the first download's). Before it is kept, :func:`check_archive` reads
its listing only: the safety rules of :mod:`.archive` (compression methods it can read, limits: :data:`MAX_MEMBERS` members,
:data:`MAX_BYTES` unpacked) and the files of a model folder, at its top or in its one top-level
folder. :func:`native_folder` then unpacks it into a temporary folder inside the model's cache
folder, converts the model there into our native format (:func:`spacy_elmo.bilm.efml_folder.
convert_efml`: the weights read with PyTorch's restricted unpickler, tensors only), records the
archive's SHA-256 beside the conversion (:data:`ARCHIVE_RECORD`) and removes the unpacked files
(:func:`convert_archive`); a download does this before the archive is recorded or kept, so that an
archive that cannot be unpacked or converted is never recorded. :func:`install_conversion` then
renames the conversion into place as ``<cache>/<name>/native``. Later loads read the conversion while the
archive's recorded digest is the one the conversion was made from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List

from ..bilm.efml_folder import CHAR_DIC, ENCODER_PKL, RECORD_NAME, SETTINGS_NAME, TOKEN_EMBEDDER_PKL, check_efml_folder, convert_efml
from ..bilm.errors import WeightsError
from ..bilm.weights import CONFIG_NAME
from ..cache import make_private_folders
from ..files import read_record, temporary_name, write_json
from .archive import check_members, member_path, unpack
from .published import PublishedModel

NATIVE = "native"  # the conversion, inside the model's cache folder
ARCHIVE_RECORD = "archive.json"
MAX_MEMBERS = 256
MAX_BYTES = 16 << 30  # the published models unpack to well under 2 GiB
REQUIRED = (SETTINGS_NAME, CHAR_DIC, TOKEN_EMBEDDER_PKL, ENCODER_PKL)


def _model_root(path: Path, names: List[PurePosixPath]) -> PurePosixPath:
    """The folder inside the archive that holds the model: its top, else its one top-level folder."""
    files = {str(n) for n in names}
    for root in (PurePosixPath("."), *sorted({PurePosixPath(n.parts[0]) for n in names if len(n.parts) > 1})):
        if all(str(root / name) in files for name in REQUIRED):
            return root
    raise WeightsError(
        f"{path.name} holds no ELMoForManyLangs model folder ({', '.join(REQUIRED)} at its top or in one folder at its top): refused"
    )


def check_archive(path: Path) -> PurePosixPath:
    """Check a downloaded archive from its listing alone (no member is read): safe to unpack and
    holding a model folder. Returns that folder's path inside the archive."""
    infos = check_members(path, MAX_MEMBERS, MAX_BYTES)
    return _model_root(path, [member_path(path, info) for info in infos if not info.is_dir()])


def _record(folder: Path) -> Dict[str, Any]:
    return read_record(folder / ARCHIVE_RECORD)


def is_current(folder: Path, digest: str) -> bool:
    """True when ``folder`` holds a finished conversion of the archive whose SHA-256 is ``digest``."""
    return (folder / CONFIG_NAME).is_file() and _record(folder).get("sha256") == digest


def convert_archive(model: PublishedModel, archive: Path, digest: str) -> Path:
    """Unpack ``archive`` (SHA-256 ``digest``) into a scratch folder inside the model's cache
    folder (every member's CRC checked), check the model folder it holds and convert it there;
    returns the finished conversion, in a scratch folder of its own for :func:`install_conversion`
    to move into place (the caller removes it when it does not). The unpacked files are removed."""
    folder = model.cache_dir / NATIVE
    unpacked, work = temporary_name(model.cache_dir / "unpacked"), temporary_name(folder)
    try:
        root = check_archive(archive)
        unpack(archive, make_private_folders(unpacked), MAX_MEMBERS, MAX_BYTES)
        source = unpacked.joinpath(*root.parts)
        check_efml_folder(source, within=unpacked)
        convert_efml(source, make_private_folders(work), within=unpacked)
        record = json.loads((work / RECORD_NAME).read_text(encoding="utf-8"))
        record["source"] = model.url(model.archive)  # not the unpacked folder, which is removed
        write_json(work / RECORD_NAME, record)
        write_json(work / ARCHIVE_RECORD, {"model": model.name, "archive": model.archive, "sha256": digest})
    except BaseException:
        remove_folder(work)
        raise
    finally:
        remove_folder(unpacked)
    return work


def install_conversion(model: PublishedModel, work: Path) -> Path:
    """Move the finished conversion ``work`` into place as the model's ``native`` folder,
    replacing a stale one whole; returns the folder."""
    folder = model.cache_dir / NATIVE
    if folder.exists():  # a stale conversion (another archive), replaced whole
        old = temporary_name(folder)
        folder.rename(old)
        remove_folder(old)
    work.rename(folder)
    return folder


def remove_folder(path: Path) -> None:
    """Remove a scratch folder if it exists."""
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def native_folder(model: PublishedModel, archive: Path, digest: str) -> Path:
    """The native folder of ``model`` converted from its recorded ``archive`` (SHA-256 ``digest``):
    the current conversion, or one made now (one process at a time: the model's lock)."""
    from filelock import FileLock

    folder = model.cache_dir / NATIVE
    if is_current(folder, digest):
        return folder
    with FileLock(str(model.lock_file)):
        if is_current(folder, digest):  # another process converted it meanwhile
            return folder
        work = convert_archive(model, archive, digest)
        try:
            return install_conversion(model, work)
        finally:
            remove_folder(work)


__all__ = [
    "ARCHIVE_RECORD",
    "MAX_BYTES",
    "MAX_MEMBERS",
    "NATIVE",
    "check_archive",
    "convert_archive",
    "install_conversion",
    "is_current",
    "native_folder",
]
