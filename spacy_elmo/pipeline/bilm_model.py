"""Former home of the thinc biLM model, now :mod:`spacy_elmo.layers.bilm_model`: kept so that the
entry points of an existing installation (``spacy-elmo.BiLM.v1``) and code importing from here still work."""

from ..layers.bilm_model import (
    BILM_NODE,
    BiLMShim,
    bilm_from_bytes,
    bilm_to_bytes,
    build_bilm_model,
    configure_bilm_model,
    get_bilm,
    get_shim,
)

__all__ = ["BILM_NODE", "BiLMShim", "bilm_from_bytes", "bilm_to_bytes", "build_bilm_model", "configure_bilm_model", "get_bilm", "get_shim"]
