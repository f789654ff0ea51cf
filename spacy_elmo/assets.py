"""Where the evaluation data lives by default, and the one-line error when it is not there.

The spaCy project (``project/``) declares every dataset as an asset; ``spacy project assets
project/`` fetches them and ``spacy project run unpack-assets project/`` unpacks the two zip
packages, into ``project/assets/data/<dataset>/``. Commands take that folder by default, or an
explicit path (a local copy in the same layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Iterable

from .gzipped import open_read

ASSETS_DATA = Path("project") / "assets" / "data"
FETCH = "fetch it with `spacy project assets project/` and `spacy project run unpack-assets project/`"


def require_files(folder: Path, names: Iterable[str], what: str, option: str = "--data") -> Path:
    """``folder`` when it holds every one of ``names`` (each also accepted gzipped), else a
    :class:`FileNotFoundError` in one line naming the folder, the first missing file and the fix."""
    folder = Path(folder)
    for name in names:
        if not ((folder / name).is_file() or (folder / (name + ".gz")).is_file()):
            where = "does not exist" if not folder.is_dir() else f"has no {name}"
            raise FileNotFoundError(f"{what} data not found: {folder} {where}; {FETCH}, or pass {option} FOLDER with a copy")
    return folder


def data_file(path: Path) -> Path:
    """``path``, or its gzipped copy ``path.gz`` when only that exists (a local copy may keep
    either); ``path`` itself when neither does, so the error that follows names it."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    return gz if not path.is_file() and gz.is_file() else path


def open_text(path: Path) -> IO[str]:
    """Open ``path`` (or ``path.gz``, see :func:`data_file`) as UTF-8 text."""
    return open_read(data_file(path), "rt")
