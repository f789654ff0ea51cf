"""Which ELMo vector of a token the sense tools use: the Doc's mix or a layer choice of its own.

A *layer spec* is ``None`` (the vector the ``elmo`` component wrote: ``token._.elmo``, the mix of
``doc.tensor``) or any mix spec of the component (``"average"``, ``"top"``, ``"layer:N"`` or a
list of L+1 non-negative weights), applied to the raw layers in ``doc._.elmo_layers``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

from ..bilm.scalar_mix import MixSpec, check_mix_spec, spec_mix, spec_weights

LayerSpec = Optional[Union[str, Sequence[float]]]


class NoElmoError(ValueError):
    """A Doc without the ELMo data a sense tool needs."""


def layer_weights(spec: LayerSpec, n_layers: int) -> Optional[np.ndarray]:
    """The normalised layer weights of ``spec`` (``None`` for the Doc's own mix)."""
    return None if spec is None else spec_weights(spec, n_layers)


def check_spec(spec: LayerSpec) -> LayerSpec:
    """Validate the spelling of a spec now (the layer count is checked on first use)."""
    if spec is None:
        return None
    check_mix_spec(spec)
    return spec if isinstance(spec, str) else [float(w) for w in spec]


def doc_vectors(doc: Doc, spec: LayerSpec) -> np.ndarray:
    """float32 ``[len(doc), dim]``: each token's vector under ``spec``; a clear error without ELMo."""
    if spec is None:
        vectors = doc._.elmo_vectors if Doc.has_extension("elmo_vectors") else None
        if vectors is None:
            raise NoElmoError(
                f"this Doc ({doc.text[:40]!r}) has no ELMo vectors: run the 'elmo' component on it first (nlp.add_pipe('elmo'))"
            )
        return np.asarray(vectors, dtype=np.float32)
    layers = doc._.elmo_layers if Doc.has_extension("elmo_layers") else None
    if layers is None:
        raise NoElmoError(
            f"layer choice {spec!r} needs the raw biLM layers, but this Doc ({doc.text[:40]!r}) has none "
            "(doc._.elmo_layers is None): run 'elmo' with store_layers=true, or use the Doc's mix (layer=None)"
        )
    return spec_mix(layers, spec)


def token_vector(token: Token, spec: LayerSpec) -> np.ndarray:
    """One token's vector under ``spec``."""
    if spec is None:
        return doc_vectors(token.doc, None)[token.i]
    layers = token.doc._.elmo_layers if Doc.has_extension("elmo_layers") else None
    if layers is None:
        return doc_vectors(token.doc, spec)[token.i]  # no layers: raises the explanatory error
    return spec_mix(layers[:, token.i], spec)


def span_vector(span: Span, spec: LayerSpec) -> np.ndarray:
    """Mean vector of a Span's non-whitespace tokens under ``spec``."""
    vectors = doc_vectors(span.doc, spec)
    rows: List[int] = [t.i for t in span if not t.is_space]
    if not rows:
        return np.zeros(vectors.shape[1], dtype=np.float32)
    return vectors[rows].mean(0)


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def candidate_mixes(n_layers: int) -> Dict[str, MixSpec]:
    """The layer choices the evaluations compare: each layer, the average of all, the contextual average."""
    out: Dict[str, MixSpec] = {f"layer {i}": f"layer:{i}" for i in range(n_layers)}
    out["average (all layers)"] = "average"
    if n_layers > 2:
        out[f"average of layers 1-{n_layers - 1}"] = [0.0] + [1.0] * (n_layers - 1)
    return out
