"""The verify step: everything that can be checked about a published model's fetched files before
anything is recorded or kept.

In order: each file's SHA-256 against its pin (:mod:`.pins`; the transfer already held each file
to its announced or known size), the check of its kind (options that describe a biLM and an HDF5
file holding what they require; an archive's listing: safe names, compression methods, limits, a
model folder; the LM head has its own), and for an ELMoForManyLangs archive the unpacking (every
member's CRC) and the conversion itself, in a scratch folder. :func:`verify_download` removes files
that fail and says so; nothing is recorded before every check has passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence

from ..bilm.errors import WeightsError
from ..bilm.layout import check_hdf5, read_options
from ..bilm.model import BiLMConfig, OptionsError
from . import trf_archive
from .efml_archive import check_archive, convert_archive
from .pins import Pin, check_pins
from .published import FORMAT_TRF, PublishedModel
from .transfer import discard
from .verified import sha256_of

Check = Callable[[List[Path]], object]


class Verified(NamedTuple):
    """Files that passed every check: their paths (the parts, or files already in place), their
    SHA-256, and for an archive its finished conversion in a scratch folder."""

    files: List[str]
    paths: List[Path]
    digests: Dict[str, str]
    conversion: Optional[Path] = None


def check_options(options: Path) -> BiLMConfig:
    """Options that describe a biLM (one-line error otherwise)."""
    try:
        return BiLMConfig.from_options(read_options(options), source=f"options file {options}")
    except OptionsError as err:
        raise WeightsError(str(err)) from None


def check_files(options: Path, weights: Path) -> BiLMConfig:
    """The shape check of an options file and its HDF5 weights: options that describe a biLM, and
    every dataset they require, with the right shapes (the values are what the digests are for)."""
    config = check_options(options)
    check_hdf5(weights, config)
    return config


def check_for(model: PublishedModel) -> Check:
    """The check the files of ``model`` (:attr:`PublishedModel.files`, in order) must pass."""
    if model.format == FORMAT_TRF:
        return lambda paths: trf_archive.check_archive(paths[0])
    if model.archive:
        return lambda paths: check_archive(paths[0])
    return lambda paths: check_files(paths[0], paths[1])


def verify(
    model: PublishedModel, folder: Path, files: Sequence[str], paths: List[Path], check: Check, pins: Mapping[str, Pin], command: str
) -> Verified:
    """Check ``paths`` (``files`` of ``model``, in order) as the module docstring says; raises the
    first failure (one line). A conversion it returns is the caller's to move into place or remove."""
    digests = {file_name: sha256_of(path) for file_name, path in zip(files, paths)}
    check_pins(folder, digests, pins, model, command)
    check(paths)
    conversion = None
    if (
        model.archive and model.archive in files and model.format != FORMAT_TRF
    ):  # an ELMoForManyLangs archive: converted before it is recorded
        conversion = convert_archive(model, paths[list(files).index(model.archive)], digests[model.archive])
    return Verified(list(files), paths, digests, conversion)


def verify_download(
    model: PublishedModel, folder: Path, files: Sequence[str], paths: List[Path], check: Check, pins: Mapping[str, Pin], command: str
) -> Verified:
    """:func:`verify` on downloaded files; files that fail are removed (with their parts), and the
    one-line error says what failed and that running the command again fetches them again."""
    try:
        return verify(model, folder, files, paths, check, pins, command)
    except WeightsError as err:
        for file_name, path in zip(files, paths):  # nothing that failed stays in the cache
            path.unlink(missing_ok=True)
            discard(folder / file_name)
        raise WeightsError(
            f"{model.name}: the downloaded files failed the checks and were removed ({err}); nothing was recorded, "
            f"and running `python -m spacy_elmo {command}` again fetches them again"
        ) from None


__all__ = ["Check", "Verified", "check_files", "check_for", "check_options", "verify", "verify_download"]
