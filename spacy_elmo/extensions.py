"""Doc/Span/Token attributes and the ``.vector``/``.similarity`` hooks.

Stored on the Doc (so they survive ``Doc.to_bytes``, ``DocBin(store_user_data=True)`` and
``nlp.pipe(n_process=...)``):

* ``doc._.elmo_vectors``: float32 ``[n_tokens, dim]``, the scalar mix per token (also written to
  ``doc.tensor`` by default);
* ``doc._.elmo_layers``: float32 ``[L+1, n_tokens, dim]``, the raw biLM layers (optional);
* ``doc._.elmo_similarity_vectors``: float32 ``[n_tokens, dim]`` or None, the mix ``.similarity``
  compares when the component's ``similarity`` option names one (None: the mix above);
* ``doc._.elmo_hooks``: True once :func:`set_hooks` ran, so that a Doc back from a worker
  process gets its hooks again (hooks themselves are never serialised).

Everything else is a getter over those two arrays. Whitespace tokens get zero vectors and are
left out of the Span/Doc means.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Type, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

Floats = np.ndarray


def _doc_vectors(doc: Doc) -> Optional[Floats]:
    return doc._.elmo_vectors


def _similarity_vectors(doc: Doc) -> Optional[Floats]:
    vectors = doc._.elmo_similarity_vectors
    return _doc_vectors(doc) if vectors is None else vectors


def _mean(doc: Doc, start: int, end: int, of=_doc_vectors) -> Optional[Floats]:
    vectors = of(doc)
    if vectors is None:
        return None
    rows = [i for i in range(start, end) if not doc[i].is_space]
    if not rows:
        return np.zeros(vectors.shape[1], dtype=np.float32)
    return vectors[rows].mean(axis=0)


def _token_elmo(token: Token) -> Optional[Floats]:
    vectors = _doc_vectors(token.doc)
    return None if vectors is None else vectors[token.i]


def _token_layers(token: Token) -> Optional[Floats]:
    layers = token.doc._.elmo_layers
    return None if layers is None else layers[:, token.i]


def _span_elmo(span: Span) -> Optional[Floats]:
    return _mean(span.doc, span.start, span.end)


def _span_layers(span: Span) -> Optional[Floats]:
    layers = span.doc._.elmo_layers
    return None if layers is None else layers[:, span.start : span.end]


def _doc_elmo(doc: Doc) -> Optional[Floats]:
    return _mean(doc, 0, len(doc))


def _norm(vector: Optional[Floats]) -> float:
    """The L2 norm of a vector; 0.0 for none (as spaCy's ``vector_norm`` without vectors)."""
    return 0.0 if vector is None else float(np.linalg.norm(vector))


def install_extensions() -> None:
    """Register the ``._.elmo*`` attributes (idempotent)."""
    for name in ("elmo_vectors", "elmo_layers", "elmo_similarity_vectors"):
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=None)
    if not Doc.has_extension("elmo_hooks"):
        Doc.set_extension("elmo_hooks", default=False)
    getters: Dict[Union[Type[Doc], Type[Span], Type[Token]], Dict[str, Callable[..., Any]]] = {
        Doc: {"elmo": _doc_elmo},
        Span: {"elmo": _span_elmo, "elmo_layers": _span_layers},
        Token: {"elmo": _token_elmo, "elmo_layers": _token_layers},
    }
    for cls, attrs in getters.items():
        for name, getter in attrs.items():
            if not cls.has_extension(name):
                cls.set_extension(name, getter=getter)


# ----------------------------------------------------------------------------------------------
# hooks
# ----------------------------------------------------------------------------------------------

Similar = Union[Doc, Span, Token]


def _cosine(a: Floats, b: Floats, what: str) -> float:
    if a.shape != b.shape:
        raise ValueError(
            f"{what}.similarity: ELMo vectors have shape {a.shape} but the other object's vector has "
            f"{b.shape}; compare objects processed by the same 'elmo' component"
        )
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 0.0 if norm == 0.0 else float(np.dot(a, b) / norm)


def _vector_of(obj: Similar) -> Floats:
    """What ``.similarity`` compares: the similarity mix if set, else the ELMo mix, else ``.vector``."""
    value = None
    if isinstance(obj, Token):
        vectors = _similarity_vectors(obj.doc)
        value = None if vectors is None else vectors[obj.i]
    elif isinstance(obj, Span):
        value = _mean(obj.doc, obj.start, obj.end, _similarity_vectors)
    elif isinstance(obj, Doc):
        value = _mean(obj, 0, len(obj), _similarity_vectors)
    return np.asarray(obj.vector if value is None else value, dtype=np.float32)


def _doc_vector_norm(doc: Doc) -> float:
    return _norm(_doc_elmo(doc))


def _span_vector_norm(span: Span) -> float:
    return _norm(_span_elmo(span))


def _token_vector_norm(token: Token) -> float:
    return _norm(_token_elmo(token))


def _has_vector(obj: Similar) -> bool:
    return True


def _doc_similarity(doc: Doc, other: Similar) -> float:
    return _cosine(_vector_of(doc), _vector_of(other), "Doc")


def _span_similarity(span: Span, other: Similar) -> float:
    return _cosine(_vector_of(span), _vector_of(other), "Span")


def _token_similarity(token: Token, other: Similar) -> float:
    return _cosine(_vector_of(token), _vector_of(other), "Token")


_DOC_HOOKS: Dict[str, Callable[..., Any]] = {
    "vector": _doc_elmo,
    "vector_norm": _doc_vector_norm,
    "has_vector": _has_vector,
    "similarity": _doc_similarity,
}
_SPAN_HOOKS: Dict[str, Callable[..., Any]] = {
    "vector": _span_elmo,
    "vector_norm": _span_vector_norm,
    "has_vector": _has_vector,
    "similarity": _span_similarity,
}
_TOKEN_HOOKS: Dict[str, Callable[..., Any]] = {
    "vector": _token_elmo,
    "vector_norm": _token_vector_norm,
    "has_vector": _has_vector,
    "similarity": _token_similarity,
}


def set_hooks(doc: Doc) -> Doc:
    """Make ``.vector``, ``.vector_norm``, ``.has_vector`` and ``.similarity`` use ELMo.

    Hooks live on the Doc object only and do not survive serialisation. Docs from
    ``nlp.pipe(n_process=N)`` get them back by themselves; call this again (or
    ``spacy_elmo.restore``) on a Doc read from bytes or a DocBin: it needs only ``doc._.elmo_vectors``.
    """
    if doc._.elmo_vectors is None:
        raise ValueError("set_hooks: this Doc has no ELMo vectors (doc._.elmo_vectors is None); run the 'elmo' component first")
    return attach_hooks(doc)


def attach_hooks(doc: Doc) -> Doc:
    """:func:`set_hooks` for a Doc whose ``doc._.elmo_vectors`` the caller has just set (not checked again)."""
    doc._.elmo_hooks = True
    doc.user_hooks.update(_DOC_HOOKS)
    doc.user_span_hooks.update(_SPAN_HOOKS)
    doc.user_token_hooks.update(_TOKEN_HOOKS)
    return doc
