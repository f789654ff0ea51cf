"""``ElmoListener``: the layer that receives the biLM layers of an upstream ``elmo`` component
(one biLM pass per batch serves every listener), ``List[Doc] -> List[Floats3d]``."""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from spacy.errors import Errors
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from ..extensions import install_extensions

LISTENER_NODE = "elmo-listener"


class ElmoListener(Model):
    """Receives the biLM layers of an upstream ``elmo`` component.

    In training, ``elmo.update`` hands each listener the batch's layers and a backprop callback
    (checked against the batch's content); when ``elmo`` only annotates (e.g. it is in
    ``frozen_components`` and ``annotating_components``), and at prediction, the layers are
    read from ``doc._.elmo_layers``. A Doc without layers gets zeros of the right shape only
    while thinc initialises the model that holds this listener (spaCy initialises it on raw
    training Docs): :func:`guard_initialisation` marks that call on the listener
    (:attr:`initialising`); anywhere else it is an error that says what to run.
    """

    name = LISTENER_NODE

    def __init__(self, upstream_name: str) -> None:
        install_extensions()
        Model.__init__(self, name=self.name, forward=_listener_forward, init=_listener_init, attrs={"upstream_name": upstream_name})
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None
        self._upstream: Optional[weakref.ReferenceType] = None
        self._component: Optional[str] = None
        self._initialising = 0  # depth of the init calls, of models that hold this listener, running now

    @property
    def initialising(self) -> bool:
        """True while thinc initialises a model that holds this listener (see :func:`guard_initialisation`)."""
        return getattr(self, "_initialising", 0) > 0  # listeners unpickled from older versions lack the counter

    @property
    def upstream_name(self) -> str:
        return self.attrs["upstream_name"]

    @classmethod
    def get_batch_id(cls, inputs: Sequence[Doc]) -> int:
        """A content hash of a batch of Docs (the same as spaCy's Tok2VecListener)."""
        return sum(sum(token.orth for token in doc) for doc in inputs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        self._batch_id, self._outputs, self._backprop = batch_id, outputs, backprop

    def clear(self) -> None:
        self._batch_id = self._outputs = self._backprop = None

    def upstream(self) -> Optional[Any]:
        return self._upstream() if self._upstream is not None else None

    def __getstate__(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        # the link to the upstream component and a batch in flight do not travel (spawn workers
        # read the layers from the Docs)
        state = dict(self.__dict__)
        state.update(_upstream=None, _batch_id=None, _outputs=None, _backprop=None, _initialising=0)
        slots = {name: getattr(self, name) for cls in type(self).__mro__ for name in getattr(cls, "__slots__", ()) if hasattr(self, name)}
        return state, slots

    def where(self) -> str:
        component = f" in '{self._component}'" if self._component else ""
        return f"ElmoListener(upstream={self.upstream_name!r}){component}"


@contextmanager
def initialising(listeners: Sequence[ElmoListener]) -> Iterator[None]:
    """Within this block the ``listeners`` are being initialised (they may give zeros)."""
    for listener in listeners:
        listener._initialising = getattr(listener, "_initialising", 0) + 1
    try:
        yield
    finally:
        for listener in listeners:
            listener._initialising -= 1


def guard_initialisation(model: Model) -> None:
    """Mark ``model``'s initialisation on the ElmoListener layers it holds: its init function is
    wrapped (once) so that, while it runs, those listeners give zeros of the right shape for Docs
    without ELMo layers. The ``elmo`` component calls this for each component that listens to it."""
    init = model.init
    if isinstance(init, partial) and init.func is _init_marking_listeners:
        return
    setattr(model, "init", partial(_init_marking_listeners, init))


def _init_marking_listeners(init: Callable, model: Model, X: Any = None, Y: Any = None) -> Any:
    with initialising(find_listeners(model)):
        return init(model, X=X, Y=Y)


def _listener_init(model: ElmoListener, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    """Nothing to set: the listener has no weights (see :func:`_listener_forward` for the zeros
    it gives while its model is being initialised)."""


def _listener_forward(model: ElmoListener, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        if batch_id != model._batch_id:
            raise ValueError(Errors.E953.format(id1=batch_id, id2=model._batch_id))
        outputs, backprop = model._outputs, model._backprop
        assert outputs is not None and backprop is not None  # stored together with the batch id
        model.clear()
        return outputs, backprop
    outputs = []
    # spaCy initialises a downstream model with raw training Docs that no elmo component has
    # processed: zeros of the right shape, but only within that initialisation call (never in
    # training or prediction, where zeros would be a silent wrong answer)
    zeros = None
    if not is_train and model.initialising and any(doc._.elmo_layers is None for doc in docs):
        zeros = _zeros_like_upstream
    for doc in docs:
        layers = doc._.elmo_layers
        if layers is None:
            if zeros is None:
                raise ValueError(_missing_layers_message(model, is_train))
            layers = zeros(model, len(doc))
        outputs.append(model.ops.asarray3f(layers))
    return outputs, _no_backprop


def _zeros_like_upstream(model: ElmoListener, n_tokens: int) -> np.ndarray:
    upstream = model.upstream()
    if upstream is None:
        raise ValueError(
            f"{model.where()} is not connected to an 'elmo' component: add one earlier in the pipeline "
            f"(nlp.add_pipe('elmo', first=True)) or set upstream to the name of an existing 'elmo' component (or '*')"
        )
    n_layers, width = upstream.layer_shape()
    return np.zeros((n_layers, n_tokens, width), dtype=np.float32)


def _missing_layers_message(model: ElmoListener, is_train: bool) -> str:
    if model.upstream() is None:
        return (
            f"{model.where()} is not connected to an 'elmo' component and this Doc has no ELMo layers: add "
            f"an 'elmo' component before it (nlp.add_pipe('elmo', first=True)), or set upstream to the name of "
            f"an existing 'elmo' component (or '*')"
        )
    if is_train:
        return (
            f"{model.where()}: this training Doc has no ELMo layers and the 'elmo' component sent none for this "
            f"batch. Train with nlp.update (it runs 'elmo' first), not the component's update alone; if 'elmo' "
            f"is in [training] frozen_components, also list it in [training] annotating_components"
        )
    return (
        f"{model.where()}: this Doc has no ELMo layers (doc._.elmo_layers is None). Run the 'elmo' component "
        f"before this one, and drop _.elmo_layers (doc_cleaner) only after every component that listens to it"
    )


def _no_backprop(d_outputs: Any) -> List:
    return []


def find_listeners(model: Model) -> List[ElmoListener]:
    """Every ElmoListener node in ``model``."""
    return [node for node in model.walk() if isinstance(node, ElmoListener)]
