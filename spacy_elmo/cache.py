"""The package's cache folder: published models' files and the compiled LSTM step live under it."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SPACY_ELMO_CACHE"
PRIVATE_MODE = 0o700


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


def make_private_folders(path: Path) -> Path:
    """Create ``path`` and the folders missing above it, each 0700 whatever the umask (a plain
    ``mkdir`` gives 0775 under umask 002, and the compiled kernels refuse a cache folder that group
    or others can write). Folders that exist are left as they are; one made meanwhile by another
    process too. Returns ``path``."""
    path = Path(path)
    missing = []
    for part in [path, *path.parents]:
        if os.path.lexists(part):
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            os.mkdir(part, PRIVATE_MODE)
        except FileExistsError:
            continue
        os.chmod(part, PRIVATE_MODE)  # mkdir's mode is masked by the umask: set it whole
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a folder")
    return path
