"""The package's cache folder: published models' files and the compiled LSTM step live under it."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SPACY_ELMO_CACHE"


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
