"""Give a deserialised Doc back what spaCy does not serialise: ``doc.tensor`` (DocBin) and the hooks.

The ELMo vectors themselves travel as user data (``doc._.elmo_vectors``, ``doc._.elmo_layers``)
through ``Doc.to_bytes``, ``DocBin(store_user_data=True)`` and ``nlp.pipe(n_process=...)``. What
does not travel:

* the ``.vector``/``.similarity`` hooks: spaCy never serialises user hooks (its warning W109), so
  Docs read from bytes have none, and ``token.similarity`` falls back to spaCy's own (1.0 for
  any two tokens of the same word, zeros after a DocBin);
* ``doc.tensor`` after a ``DocBin``: a DocBin does not store tensors.

:func:`restore` puts both back from ``doc._.elmo_vectors``; :func:`restore_all` does it for a stream::

    docs = spacy_elmo.restore_all(doc_bin.get_docs(nlp.vocab))

Docs from ``nlp.pipe(texts, n_process=N)`` need no call: the ``elmo`` component has the pipeline
give every Doc that had hooks in its worker process its hooks back as it arrives
(:func:`keep_hooks_across_processes`).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, Iterable, Iterator

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc

from .extensions import install_extensions, set_hooks


def restore(doc: Doc, tensor: bool = True, hooks: bool = True) -> Doc:
    """Restore ``doc.tensor`` (only when it is empty) and the ELMo hooks of one Doc; returns the Doc.

    A Doc without ELMo vectors (not processed by the `elmo` component) is returned unchanged.
    """
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


def restore_hooks(doc: Doc) -> Doc:
    """Give back the hooks of a Doc that had them before it was serialised (``doc._.elmo_hooks``)."""
    if Doc.has_extension("elmo_hooks") and doc._.elmo_hooks and "similarity" not in doc.user_token_hooks and doc._.elmo_vectors is not None:
        set_hooks(doc)
    return doc


class _RestoringPipe:
    """``nlp._multiprocessing_pipe`` that restores each Doc's hooks as it comes back from a worker."""

    def __init__(self, nlp: Language) -> None:
        self._nlp = weakref.ref(nlp)

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Doc]:
        nlp = self._nlp()
        if nlp is None:  # pragma: no cover - the pipeline owns this object
            raise RuntimeError("spacy-elmo: the pipeline of this nlp.pipe call no longer exists")
        return (restore_hooks(doc) for doc in type(nlp)._multiprocessing_pipe(nlp, *args, **kwargs))

    def __deepcopy__(self, memo: Dict[int, Any]) -> "_RestoringPipe":
        nlp = self._nlp()
        if nlp is None:  # pragma: no cover - the pipeline owns this object
            raise RuntimeError("spacy-elmo: the pipeline of this nlp.pipe call no longer exists")
        return _RestoringPipe(memo.get(id(nlp), nlp))

    def __reduce__(self) -> Any:
        return (_RestoringPipe, (self._nlp(),))


def keep_hooks_across_processes(nlp: Language) -> None:
    """Have ``nlp.pipe(n_process=N)`` give Docs their ELMo hooks back as they arrive from the
    workers (hooks do not survive the bytes they travel as). Idempotent; only this ``nlp`` changes.
    """
    if isinstance(nlp.__dict__.get("_multiprocessing_pipe"), _RestoringPipe):
        return
    if not callable(getattr(type(nlp), "_multiprocessing_pipe", None)):  # pragma: no cover - another spaCy
        warnings.warn(
            "spacy-elmo: this spaCy version has no Language._multiprocessing_pipe, so Docs from "
            "nlp.pipe(n_process>1) come back without ELMo .similarity hooks: wrap the call in spacy_elmo.restore_all()",
            UserWarning,
            stacklevel=3,
        )
        return
    nlp._multiprocessing_pipe = _RestoringPipe(nlp)  # type: ignore[method-assign]
