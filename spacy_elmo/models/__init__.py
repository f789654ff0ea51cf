"""The embedded default English biLM, shipped inside the package (no download): its weights and card
live in ``en_default/``; :func:`default_model_path` (defined with the rest of weight resolution in
:mod:`spacy_elmo.hub.resolve`) gives its folder."""

from ..hub.resolve import DEFAULT_MODEL, default_model_path

__all__ = ["DEFAULT_MODEL", "default_model_path"]
