"""What the ``elmo`` component decides from the pipeline around it.

* ``doc.tensor``: written unless an earlier component writes it for a listener that comes later
  (spaCy's ``Tok2Vec`` and its listeners), see :func:`find_tensor_conflict`;
* a warning when later trainable components could read ELMo but none does
  (:func:`trains_without_elmo`).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from spacy.language import Language
from thinc.api import Model

from ..layers.bilm_model import BILM_NODE
from ..layers.listener import LISTENER_NODE
from ..layers.tok2vec import TOK2VEC_NODE

# the model nodes through which a component reads ELMo
ELMO_NODES = (LISTENER_NODE, TOK2VEC_NODE, BILM_NODE)


def trains_without_elmo(pipe: Any) -> bool:
    """A component with a model in which nothing reads ELMo (no listener, no biLM of its own)."""
    model = getattr(pipe, "model", None)
    if not isinstance(model, Model):
        return False
    return not any(node.name in ELMO_NODES for node in model.walk())


def find_tensor_conflict(nlp: Language, name: str) -> Optional[Tuple[str, str]]:
    """(tok2vec, listener) when a component before ``name`` writes doc.tensor for a listener after it."""
    names = nlp.pipe_names
    if name not in names:
        return None
    position = names.index(name)
    for upstream in names[:position]:
        pipe = nlp.get_pipe(upstream)
        listeners = getattr(pipe, "listening_components", None)
        if not listeners or not writes_doc_tensor(pipe):
            continue
        for listener in listeners:
            if listener in names and names.index(listener) > position:
                return upstream, listener
    return None


def writes_doc_tensor(pipe: Any) -> bool:
    from spacy.pipeline import Tok2Vec

    return isinstance(pipe, Tok2Vec)
