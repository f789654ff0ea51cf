"""The spaCy side: the ``elmo`` component (and, re-exported, its context getters and Doc/Span/Token extensions)."""

from typing import Any

from ..extensions import install_extensions, set_hooks
from ..layers.contexts import Context, configure_sentence_contexts

__all__ = [
    "Context",
    "Elmo",
    "ElmoListener",
    "learned_mixes",
    "configure_sentence_contexts",
    "install_extensions",
    "make_elmo",
    "set_hooks",
]


def __getattr__(name: str) -> Any:
    # imported on first use: importing this package (say, for a context getter) does not load the component
    if name in ("Elmo", "make_elmo"):
        from . import component

        return getattr(component, name)
    if name in ("ElmoListener", "learned_mixes"):
        from .. import layers

        return getattr(layers, name)
    raise AttributeError(f"module 'spacy_elmo.pipeline' has no attribute {name!r}")
