"""Registered thinc architectures for training spaCy components on ELMo.

* ``spacy-elmo.ScalarMix.v1``: the paper's task-specific mix ``gamma * sum_j softmax(s)_j h_j``
  (``List[Floats3d] -> List[Floats2d]``), learned by the downstream component.
* ``spacy-elmo.ElmoListener.v1``: a tok2vec for any component that reads the biLM layers of an
  upstream ``elmo`` component (one biLM pass per batch serves every listener).
* ``spacy-elmo.ElmoTok2Vec.v1``: the same stack with its own biLM (what
  ``nlp.replace_listeners`` produces).

The stack: layers ``[L+1, n, D]`` -> mix ``[n, D]`` (+ an optional context-free ``embed``,
concatenated) -> Maxout projection to ``width`` -> optional ``encode`` -> optionally
``[encoded; second mix]`` projected linearly back (the paper's "ELMo at the output too").
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.errors import Errors
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Linear, Maxout, Model, chain, with_array
from thinc.types import Floats1d, Floats2d, Floats3d

from ..bilm.scalar_mix import check_mix_spec, trainable_mix_logits
from .bilm_model import BILM_NODE, configure_bilm_model, get_bilm
from .extensions import install_extensions
from .scope import initialising

MIX_NODE = "elmo-scalar-mix"
LISTENER_NODE = "elmo-listener"
TOK2VEC_NODE = "elmo-tok2vec"
LN_EPS = 1e-12

# --------------------------------------------------------------------------------------------
# ScalarMix
# --------------------------------------------------------------------------------------------


@registry.architectures("spacy-elmo.ScalarMix.v1")
def ScalarMix_v1(
    init: Union[str, List[float]] = "average",
    gamma: float = 1.0,
    layer_norm: bool = False,
    dropout: float = 0.0,
    l2: float = 0.0,
) -> Model[List[Floats3d], List[Floats2d]]:
    """A trainable scalar mix of the biLM layers, one per downstream use.

    init: starting weights: "average", "top", "layer:N" (0 = the context-free token layer) or a
        list of L+1 non-negative numbers. "top"/"layer:N" start at 99% on that layer (not 100%,
        so that training can still move them).
    gamma: starting scale.
    layer_norm: normalise each layer per token (mean 0, variance 1) before mixing.
    dropout: dropout on the mixed vectors while training (its own rate, not spaCy's global one).
    l2: the paper's lambda: adds ``l2 * ||s - mean(s)||^2`` to the loss, pulling the layer
        weights toward the equal average.
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"ScalarMix: dropout must be in [0, 1), got {dropout}")
    if l2 < 0:
        raise ValueError(f"ScalarMix: l2 must be >= 0, got {l2}")
    if isinstance(init, str):
        try:
            check_mix_spec(init)  # the spelling; the layer count is checked at initialisation
        except ValueError as error:
            raise ValueError(f"ScalarMix init: {error}") from None
    else:
        init = [float(w) for w in init]
    return Model(
        MIX_NODE,
        _mix_forward,
        init=_mix_init,
        params={"s": None, "gamma": None},
        dims={"nL": None, "nO": None},
        attrs={"init": init, "gamma_init": float(gamma), "layer_norm": bool(layer_norm), "mix_dropout": float(dropout), "l2": float(l2)},
    )


def trainable_logits(spec: Union[str, Sequence[float]], n_layers: int) -> np.ndarray:
    """Starting logits; a single-layer preset gets 99% of the weight instead of all of it."""
    return trainable_mix_logits(spec, n_layers).numpy().astype(np.float32)


def _mix_init(model: Model, X: Optional[List[Floats3d]] = None, Y: Any = None) -> None:
    if X is not None and len(X):
        n_layers, dim = int(X[0].shape[0]), int(X[0].shape[-1])
        if model.has_dim("nL") and model.get_dim("nL") not in (None, n_layers):
            raise ValueError(f"ScalarMix: built for {model.get_dim('nL')} layers, the biLM gives {n_layers}")
        model.set_dim("nL", n_layers)
        model.set_dim("nO", dim)
    if not model.has_dim("nL"):
        return
    n_layers = model.get_dim("nL")
    try:
        logits = trainable_logits(model.attrs["init"], n_layers)
    except ValueError as error:
        raise ValueError(f"ScalarMix: {error}") from None
    model.set_param("s", model.ops.asarray1f(logits))
    model.set_param("gamma", model.ops.asarray1f(np.array([model.attrs["gamma_init"]], dtype=np.float32)))


def _softmax(xp: Any, s: Floats1d) -> Floats1d:
    e = xp.exp(s - s.max())
    return e / e.sum()


def _mix_forward(model: Model, layers: List[Floats3d], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    xp = model.ops.xp
    if not layers:
        return [], lambda d: []
    n_layers = model.get_dim("nL")
    for array in layers:
        if array.shape[0] != n_layers:
            raise ValueError(f"ScalarMix: expects {n_layers} biLM layers, got an input with {array.shape[0]}")
    lengths = [a.shape[1] for a in layers]
    X = xp.concatenate(layers, axis=1) if len(layers) > 1 else layers[0]  # [L+1, N, D]
    if model.attrs["layer_norm"]:
        mean = X.mean(-1, keepdims=True)
        inv_std = 1.0 / xp.sqrt(X.var(-1, keepdims=True) + LN_EPS)
        Xn = (X - mean) * inv_std
    else:
        Xn, inv_std = X, None
    s, gamma = model.get_param("s"), model.get_param("gamma")
    w = _softmax(xp, s)
    M = xp.tensordot(w, Xn, axes=(0, 0))  # [N, D]
    Y = gamma[0] * M
    rate = model.attrs["mix_dropout"]
    mask = None
    if is_train and rate > 0:
        mask = (model.ops.xp.random.uniform(0.0, 1.0, Y.shape) >= rate).astype(Y.dtype) / (1.0 - rate)
        Y = Y * mask
    splits = np.cumsum(lengths)[:-1].tolist()
    outputs = xp.split(Y, splits, axis=0)

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        dY = xp.concatenate(dYs, axis=0) if len(dYs) > 1 else dYs[0]
        if mask is not None:
            dY = dY * mask
        d_gamma = (dY * M).sum()
        dM = gamma[0] * dY
        d_w = xp.tensordot(Xn, dM, axes=([1, 2], [0, 1]))  # [L+1]
        d_s = w * (d_w - (w * d_w).sum())
        l2 = model.attrs["l2"]
        if l2 > 0:
            d_s = d_s + 2.0 * l2 * (s - s.mean())
        model.inc_grad("s", d_s.astype(s.dtype))
        model.inc_grad("gamma", xp.asarray([d_gamma], dtype=gamma.dtype))
        dXn = w[:, None, None] * dM[None]
        if inv_std is not None:
            dX = inv_std * (dXn - dXn.mean(-1, keepdims=True) - Xn * (dXn * Xn).mean(-1, keepdims=True))
        else:
            dX = dXn
        return xp.split(dX.astype(np.float32), splits, axis=1)

    return outputs, backprop


def mix_summary(model: Model) -> Dict[str, Any]:
    """The learned layer weights (softmax of s) and gamma of one ScalarMix node."""
    if not model.has_param("s") or model.get_param("s") is None:
        return {"weights": None, "gamma": None}
    s = model.ops.to_numpy(model.get_param("s"))
    weights = np.exp(s - s.max())
    weights /= weights.sum()
    return {"weights": [round(float(w), 4) for w in weights], "gamma": round(float(model.ops.to_numpy(model.get_param("gamma"))[0]), 4)}


def _default_mix(mix: Optional[Model]) -> Model:
    if mix is None:
        return ScalarMix_v1()
    if mix.name != MIX_NODE:
        raise ValueError(f"ElmoListener: 'mix' must be a spacy-elmo.ScalarMix.v1 block, got a {mix.name!r} model")
    return mix


# --------------------------------------------------------------------------------------------
# Listener
# --------------------------------------------------------------------------------------------


class ElmoListener(Model):
    """Receives the biLM layers of an upstream ``elmo`` component.

    In training, ``elmo.update`` hands each listener the batch's layers and a backprop callback
    (checked against the batch's content); when ``elmo`` only annotates (e.g. it is in
    ``frozen_components`` and ``annotating_components``), and at prediction, the layers are
    read from ``doc._.elmo_layers``. A Doc without layers gets zeros of the right shape only
    while thinc initialises the model that holds this listener (spaCy initialises it on raw
    training Docs); anywhere else it is an error that says what to run.
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
        state.update(_upstream=None, _batch_id=None, _outputs=None, _backprop=None)
        slots = {name: getattr(self, name) for cls in type(self).__mro__ for name in getattr(cls, "__slots__", ()) if hasattr(self, name)}
        return state, slots

    def where(self) -> str:
        component = f" in '{self._component}'" if self._component else ""
        return f"ElmoListener(upstream={self.upstream_name!r}){component}"


def _listener_init(model: ElmoListener, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    """Nothing to set: the listener has no weights (see :func:`_listener_forward` for the zeros
    it gives while its model is being initialised)."""


def _listener_forward(model: ElmoListener, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        if batch_id != model._batch_id:
            raise ValueError(Errors.E953.format(id1=batch_id, id2=model._batch_id))
        outputs, backprop = model._outputs, model._backprop
        model.clear()
        return outputs, backprop
    outputs = []
    # spaCy initialises a downstream model with raw training Docs that no elmo component has
    # processed: zeros of the right shape, but only within that initialisation call (never in
    # training or prediction, where zeros would be a silent wrong answer)
    zeros = None
    if not is_train and any(doc._.elmo_layers is None for doc in docs) and initialising(model):
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
    bilm = upstream.bilm
    return np.zeros((bilm.n_output_layers, n_tokens, bilm.output_dim), dtype=np.float32)


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


# --------------------------------------------------------------------------------------------
# The tok2vec stack around a layer source (listener or own biLM)
# --------------------------------------------------------------------------------------------


def build_elmo_tok2vec(
    source: Model[List[Doc], List[Floats3d]],
    width: int,
    mix: Optional[Model] = None,
    embed: Optional[Model] = None,
    encode: Optional[Model] = None,
    output_mix: Optional[Model] = None,
) -> Model[List[Doc], List[Floats2d]]:
    if width < 1:
        raise ValueError(f"ElmoListener: width must be >= 1, got {width}")
    mix = _default_mix(mix)
    out_width = width
    if encode is not None:
        # spaCy's encoders keep their width (residual connections): nI = nO = their width
        n_in = encode.maybe_get_dim("nI") or encode.maybe_get_dim("nO")
        if n_in not in (None, width):
            raise ValueError(
                f"ElmoListener: the encode block reads vectors of width {n_in} but the listener projects to "
                f"width {width}: set the same width in both"
            )
        out_width = encode.maybe_get_dim("nO") or width
    refs = {"source": source, "mix": mix, "project": with_array(Maxout(width, nP=3, dropout=0.0, normalize=True))}
    if embed is not None:
        refs["embed"] = embed
    if encode is not None:
        refs["encode"] = encode
    if output_mix is not None:
        if output_mix.name != MIX_NODE:
            raise ValueError(f"ElmoListener: 'output_mix' must be a spacy-elmo.ScalarMix.v1 block, got {output_mix.name!r}")
        refs["output_mix"] = output_mix
        refs["output_project"] = with_array(Linear(out_width))
    model: Model[List[Doc], List[Floats2d]] = Model(
        TOK2VEC_NODE,
        _tok2vec_forward,
        init=_tok2vec_init,
        layers=list(refs.values()),
        refs=refs,
        dims={"nO": out_width},
    )
    return model


def _hstack(ops: Any, a: List[Floats2d], b: List[Floats2d]) -> List[Floats2d]:
    return [ops.xp.hstack((x, y)) for x, y in zip(a, b)]


def _tok2vec_init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    refs = {name: model.get_ref(name) for name in model.ref_names if model.has_ref(name)}
    if X is None:
        _init_without_sample(model, refs)
        return
    source = refs["source"]
    source.initialize(X=X)
    layers = source.predict(X)
    refs["mix"].initialize(X=layers)
    features = refs["mix"].predict(layers)
    if "embed" in refs:
        refs["embed"].initialize(X=X)
        features = _hstack(model.ops, features, refs["embed"].predict(X))
    refs["project"].initialize(X=features)
    hidden = refs["project"].predict(features)
    if "encode" in refs:
        refs["encode"].initialize(X=hidden)
        hidden = refs["encode"].predict(hidden)
    if "output_mix" in refs:
        refs["output_mix"].initialize(X=layers)
        joined = _hstack(model.ops, hidden, refs["output_mix"].predict(layers))
        refs["output_project"].initialize(X=joined)


def _layer_shape(source: Model) -> Tuple[int, int]:
    """(number of layers, width) of what ``source`` gives, from its biLM's config."""
    if isinstance(source, ElmoListener):
        upstream = source.upstream()
        if upstream is None:
            raise ValueError(
                f"{source.where()} is not connected to an 'elmo' component, so its widths are unknown: add one "
                f"earlier in the pipeline (nlp.add_pipe('elmo', first=True)) or set upstream to the name of an "
                f"existing 'elmo' component (or '*')"
            )
        bilm = upstream.bilm
    else:
        bilm = get_bilm(source)
    return bilm.n_output_layers, bilm.output_dim


def _output_width(layer: Model) -> int:
    """The output width of ``layer``: its own nO, else that of its last layer that has one."""
    if layer.has_dim("nO"):
        return layer.get_dim("nO")
    for child in reversed(layer.layers):
        try:
            return _output_width(child)
        except ValueError:
            continue
    raise ValueError(f"ElmoListener: cannot tell the output width of the embed block {layer.name!r}; give it a width (nO)")


def _set_input_width(layer: Model, width: int) -> None:
    node: Optional[Model] = layer
    while node is not None:  # with_array(chain(maxout, layernorm)): down the first layers
        if node.has_dim("nI") is None:
            node.set_dim("nI", width)
        node = node.layers[0] if node.layers else None


def _init_without_sample(model: Model, refs: Dict[str, Model]) -> None:
    """Set every width from the biLM's config (spaCy initialises some components without data)."""
    n_layers, dim = _layer_shape(refs["source"])
    refs["source"].initialize()
    mixes = [refs[name] for name in ("mix", "output_mix") if name in refs]
    for mix in mixes:
        if mix.has_dim("nL") and mix.get_dim("nL") != n_layers:
            raise ValueError(f"ScalarMix: built for {mix.get_dim('nL')} layers, the biLM gives {n_layers}")
        mix.set_dim("nL", n_layers)
        mix.set_dim("nO", dim)
        mix.initialize()
    n_features = dim
    if "embed" in refs:
        refs["embed"].initialize()
        n_features += _output_width(refs["embed"])
    _set_input_width(refs["project"], n_features)
    refs["project"].initialize()
    if "encode" in refs:
        refs["encode"].initialize()
    if "output_project" in refs:
        _set_input_width(refs["output_project"], model.get_dim("nO") + dim)
        refs["output_project"].initialize()


def _tok2vec_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops = model.ops
    source = model.get_ref("source")
    layers, bp_layers = source(docs, is_train)
    mixed, bp_mix = model.get_ref("mix")(layers, is_train)
    features = mixed
    bp_embed = None
    if model.has_ref("embed"):
        embedded, bp_embed = model.get_ref("embed")(docs, is_train)
        features = _hstack(ops, mixed, embedded)
    hidden, bp_project = model.get_ref("project")(features, is_train)
    bp_encode = bp_out_mix = bp_out_project = None
    if model.has_ref("encode"):
        hidden, bp_encode = model.get_ref("encode")(hidden, is_train)
    output = hidden
    if model.has_ref("output_mix"):
        out_mixed, bp_out_mix = model.get_ref("output_mix")(layers, is_train)
        output, bp_out_project = model.get_ref("output_project")(_hstack(ops, hidden, out_mixed), is_train)
    n_hidden = hidden[0].shape[1] if hidden else 0
    n_mix = mixed[0].shape[1] if mixed else 0

    def backprop(d_output: List[Floats2d]) -> List:
        d_layers_out = None
        d_hidden = d_output
        if bp_out_project is not None:
            d_joined = bp_out_project(d_output)
            d_hidden = [d[:, :n_hidden] for d in d_joined]
            d_layers_out = bp_out_mix([ops.xp.ascontiguousarray(d[:, n_hidden:]) for d in d_joined])
        if bp_encode is not None:
            d_hidden = bp_encode(d_hidden)
        d_features = bp_project(d_hidden)
        d_mixed = d_features
        if bp_embed is not None:
            d_mixed = [ops.xp.ascontiguousarray(d[:, :n_mix]) for d in d_features]
            bp_embed([ops.xp.ascontiguousarray(d[:, n_mix:]) for d in d_features])
        d_layers = bp_mix(d_mixed)
        if d_layers_out is not None:
            d_layers = [a + b for a, b in zip(d_layers, d_layers_out)]
        bp_layers(d_layers)
        return []

    return output, backprop


# --------------------------------------------------------------------------------------------
# Registered tok2vec architectures
# --------------------------------------------------------------------------------------------


@registry.architectures("spacy-elmo.ElmoListener.v1")
def ElmoListener_v1(
    width: int,
    upstream: str = "*",
    mix: Optional[Model] = None,
    embed: Optional[Model[List[Doc], List[Floats2d]]] = None,
    encode: Optional[Model[List[Floats2d], List[Floats2d]]] = None,
    output_mix: Optional[Model] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A tok2vec that reads an upstream ``elmo`` component (any tagger, parser, ner, textcat...).

    width: the output width (the mix, and ``embed`` if given, are projected to it by a Maxout).
    upstream: name of the ``elmo`` component, or "*" for the only one in the pipeline.
    mix: a ``spacy-elmo.ScalarMix.v1`` block, learned with this component (default: average).
    embed: optional context-free features (e.g. ``spacy.MultiHashEmbed.v2``) concatenated with the mix.
    encode: optional contextual encoder of width ``width`` (e.g. ``spacy.MaxoutWindowEncoder.v2``).
    output_mix: optional second ScalarMix concatenated with the encoder output and projected
        back to the output width (the paper's ELMo at the output too).
    """
    return build_elmo_tok2vec(ElmoListener(upstream), width, mix, embed, encode, output_mix)


@registry.architectures("spacy-elmo.ElmoTok2Vec.v1")
def ElmoTok2Vec_v1(
    bilm: Model[List[Doc], List[Floats3d]],
    width: int,
    mix: Optional[Model] = None,
    embed: Optional[Model[List[Doc], List[Floats2d]]] = None,
    encode: Optional[Model[List[Floats2d], List[Floats2d]]] = None,
    output_mix: Optional[Model] = None,
    frozen: bool = True,
    grad_factor: float = 1.0,
) -> Model[List[Doc], List[Floats2d]]:
    """The ElmoListener stack with its own biLM (a ``spacy-elmo.BiLM.v1`` block) and no upstream.

    frozen: keep the biLM's weights fixed (no gradients, no optimizer step).
    grad_factor: with ``frozen = false``, the biLM's learning rate as a factor of the optimizer's
        (0.1 = the biLM learns at a tenth of the task's rate; acts under Adam too).
    """
    if bilm.name != BILM_NODE:
        raise ValueError(f"ElmoTok2Vec: 'bilm' must be a spacy-elmo.BiLM.v1 block, got a {bilm.name!r} model")
    configure_bilm_model(bilm, frozen=frozen, grad_factor=grad_factor)
    return build_elmo_tok2vec(bilm, width, mix, embed, encode, output_mix)


def find_listeners(model: Model) -> List[ElmoListener]:
    return [node for node in model.walk() if isinstance(node, ElmoListener)]


def learned_mixes(nlp: Any) -> Dict[str, List[Dict[str, Any]]]:
    """Per component: the layer weights and gamma of each trainable ScalarMix in its model
    (the input mix first, then the output mix where there is one)."""
    found: Dict[str, List[Dict[str, Any]]] = {}
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if node.name == TOK2VEC_NODE:
                for role in ("mix", "output_mix"):
                    if node.has_ref(role):
                        found.setdefault(name, []).append({"role": role, **mix_summary(node.get_ref(role))})
    return found


__all__ = ["ElmoListener", "ElmoListener_v1", "ElmoTok2Vec_v1", "ScalarMix_v1", "find_listeners", "learned_mixes", "mix_summary"]
