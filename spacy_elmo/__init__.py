"""spacy-elmo: ELMo deep contextualized word representations for spaCy v3."""

from typing import Any

from .bilm import BiLM, BiLMConfig, ScalarMix, WeightsError, save_native, save_original
from .hub.load import load_bilm
from .moved import install as _install_moved

_install_moved()  # the old paths of modules that moved (spacy_elmo.senses.induce, ...) still import

__version__ = "0.1.0"

__all__ = [
    "BiLM",
    "BiLMConfig",
    "ScalarMix",
    "WeightsError",
    "load_bilm",
    "save_native",
    "save_original",
    "restore",
    "restore_all",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # restore/restore_all need spaCy: imported on first use, so that the raw biLM stays spaCy-free
    if name in ("restore", "restore_all"):
        from . import roundtrip

        return getattr(roundtrip, name)
    raise AttributeError(f"module 'spacy_elmo' has no attribute {name!r}")
