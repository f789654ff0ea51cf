"""The embedded default English biLM, shipped inside the package (no download)."""
from __future__ import annotations

from pathlib import Path

from ..bilm.errors import WeightsError

DEFAULT_MODEL = "en_default"


def default_model_path() -> Path:
    """Directory of the embedded default English biLM (spacy-elmo native format)."""
    path = Path(__file__).resolve().parent / DEFAULT_MODEL
    if not (path / "config.json").is_file():
        raise WeightsError(
            f"the embedded default model is missing from this installation ({path}); "
            "reinstall spacy-elmo or pass config={'weights': PATH}"
        )
    return path
