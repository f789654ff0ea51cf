"""Give a deserialised Doc back what spaCy does not serialise: ``doc.tensor`` (DocBin) and the hooks.

The ELMo vectors themselves travel as user data (``doc._.elmo_vectors``, ``doc._.elmo_layers``)
through ``Doc.to_bytes``, ``DocBin(store_user_data=True)`` and ``nlp.pipe(n_process=...)``. What
does not travel:

* the ``.vector``/``.similarity`` hooks: spaCy never serialises user hooks (its warning W109), so
  Docs that come back from worker processes or from bytes have none, and ``token.similarity``
  falls back to spaCy's own (warnings W007/W008, and zeros after a DocBin);
* ``doc.tensor`` after a ``DocBin``: a DocBin does not store tensors.

:func:`restore` puts both back from ``doc._.elmo_vectors``; :func:`restore_all` does it for a stream::

    docs = spacy_elmo.restore_all(doc_bin.get_docs(nlp.vocab))
    docs = spacy_elmo.restore_all(nlp.pipe(texts, n_process=2))
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
from spacy.tokens import Doc


def restore(doc: Doc, tensor: bool = True, hooks: bool = True) -> Doc:
    """Restore ``doc.tensor`` (only when it is empty) and the ELMo hooks of one Doc; returns the Doc.

    A Doc without ELMo vectors (not processed by the `elmo` component) is returned unchanged.
    """
    from .pipeline.extensions import install_extensions, set_hooks

    install_extensions()
    vectors = doc._.elmo_vectors
    if vectors is None:
        return doc
    if tensor and getattr(doc.tensor, "size", 0) == 0:
        doc.tensor = np.asarray(vectors, dtype=np.float32)
    if hooks:
        set_hooks(doc)
    return doc


def restore_all(docs: Iterable[Doc], tensor: bool = True, hooks: bool = True) -> Iterator[Doc]:
    """:func:`restore` every Doc of a stream, lazily."""
    for doc in docs:
        yield restore(doc, tensor=tensor, hooks=hooks)


def silence_worker_hook_warning() -> None:
    """Hide spaCy's W109 where ``nlp.pipe(n_process=N)``'s workers serialise Docs that carry our hooks.

    spaCy's worker calls ``doc.to_bytes()`` on every Doc it sends back, and ``Doc.to_bytes`` warns
    (W109) whenever a Doc has user hooks. The hooks are dropped there by design (see :func:`restore`),
    so the warning says nothing new, and any change of the warning filters in between (a
    ``warnings.catch_warnings()`` anywhere, ``python -W always``) lets it through once per Doc.
    The filter matches only warnings raised from ``spacy.language`` (the worker), so a
    ``doc.to_bytes()`` in your own code still warns. Idempotent.
    """
    import warnings

    warnings.filterwarnings("ignore", message=r"\[W109\]", category=UserWarning, module=r"spacy\.language")
