"""The SHA-256 each file of a published model must have, and recording the digests of first downloads.

A file's digest comes from its first download (:mod:`.first_seen`), overridden by the one its
publisher states, overridden by the caller's pin. :func:`check_pins` compares digests with them
(one-line error naming where the expected digest comes from); :func:`record_first` records the
digests of files that passed every check, and only those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence

from ..bilm.errors import WeightsError
from .first_seen import first_seen, record_first_seen, record_path
from .published import PublishedModel


class Pin(NamedTuple):
    """The SHA-256 a file must have, and where that digest comes from: ``stated`` (by its
    publisher), ``pinned`` (by the caller) or ``first`` (its first download)."""

    digest: str
    origin: str
    recorded: str = ""  # when the first download was, for ``first``


def pins_for(model: PublishedModel, files: Sequence[str], sha256: Optional[Mapping[str, str]] = None) -> Dict[str, Pin]:
    """The SHA-256 each of ``files`` must have: its first download's, overridden by the digest
    its publisher states, overridden by the caller's pin (``sha256``)."""
    pins = {k: Pin(v["sha256"].lower(), "first", str(v.get("recorded", ""))) for k, v in first_seen(model).items() if k in files}
    pins.update({k: Pin(v.lower(), "stated") for k, v in model.sha256.items() if k in files})
    for file_name, digest in (sha256 or {}).items():
        if file_name not in files:
            raise WeightsError(f"sha256: {file_name!r} is not a file of {model.name} here; its files are {', '.join(files)}")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
            raise WeightsError(f"sha256 of {file_name}: {digest!r} is not a SHA-256 (64 hex digits)")
        pins[file_name] = Pin(digest.lower(), "pinned")
    return pins


def pinned_names(pins: Mapping[str, Pin]) -> list:
    """The files whose digest the caller pinned."""
    return [f for f, pin in pins.items() if pin.origin == "pinned"]


def check_pins(folder: Path, digests: Mapping[str, Optional[str]], pins: Mapping[str, Pin], model: PublishedModel, command: str) -> None:
    """Each digest in ``digests`` (``{file name: SHA-256}``) equals its pin (one-line error otherwise)."""
    for file_name, pin in pins.items():
        got = digests.get(file_name)
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


def record_first(model: PublishedModel, files: Mapping[str, Mapping[str, Any]], pinned: Sequence[str] = ()) -> None:
    """Record the digests of verified files whose publisher states none (:mod:`.first_seen`): the
    first seen, or one the caller pinned (``pinned``: those file names)."""
    fresh = {k: v for k, v in files.items() if k not in model.sha256 and isinstance(v, Mapping) and v.get("sha256")}
    known = first_seen(model)
    new = {k: v for k, v in fresh.items() if k not in known}
    repinned = {k: v for k, v in fresh.items() if k in pinned and k in known and known[k].get("sha256") != v.get("sha256")}
    if new:
        record_first_seen(model, new)
    if repinned:
        record_first_seen(model, repinned, replace=True)


__all__ = ["Pin", "check_pins", "pinned_names", "pins_for", "record_first"]
