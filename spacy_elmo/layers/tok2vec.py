"""The tok2vec stack around a source of biLM layers (an :class:`ElmoListener` or a biLM of its own).

Layers ``[L+1, n, D]`` -> mix ``[n, D]`` (+ an optional context-free ``embed``, concatenated) ->
Maxout projection to ``width`` -> optional ``encode`` -> optionally ``[encoded; second mix]``
projected linearly back (the paper's "ELMo at the output too").

One combinator node with its own forward rather than ``chain``/``concatenate``: the source's
layers feed both mixes, so a chain would run the biLM twice, and the node keeps the layout of
pipelines saved by earlier versions.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, cast

from spacy.tokens import Doc
from thinc.api import Linear, Maxout, Model, with_array
from thinc.types import Floats2d, Floats3d

from .bilm_model import get_shim
from .listener import ElmoListener, initialising
from .scalar_mix import MIX_NODE, build_scalar_mix, mix_summary

TOK2VEC_NODE = "elmo-tok2vec"


def _default_mix(mix: Optional[Model]) -> Model:
    if mix is None:
        return build_scalar_mix()
    if mix.name != MIX_NODE:
        raise ValueError(f"ElmoListener: 'mix' must be a spacy-elmo.ScalarMix.v1 block, got a {mix.name!r} model")
    return mix


def build_elmo_tok2vec(
    source: Model[List[Doc], List[Floats3d]],
    width: int,
    mix: Optional[Model] = None,
    embed: Optional[Model] = None,
    encode: Optional[Model] = None,
    output_mix: Optional[Model] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """The tok2vec stack (see the module docstring) over ``source``'s layers."""
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
        refs=cast(Dict[str, Optional[Model]], refs),  # thinc's refs are a dict of optional models (an invariant type)
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
    with initialising([source] if isinstance(source, ElmoListener) else []):
        layers = source.predict(X)  # a listener's zeros: spaCy initialises on raw training Docs
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
    """(number of layers, width) of what ``source`` gives, from its biLM's config (no weights are loaded)."""
    if isinstance(source, ElmoListener):
        upstream = source.upstream()
        if upstream is None:
            raise ValueError(
                f"{source.where()} is not connected to an 'elmo' component, so its widths are unknown: add one "
                f"earlier in the pipeline (nlp.add_pipe('elmo', first=True)) or set upstream to the name of an "
                f"existing 'elmo' component (or '*')"
            )
        return upstream.layer_shape()
    return get_shim(source).layer_shape()


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
    bp_encode: Optional[Callable] = None
    bp_out_mix: Optional[Callable] = None
    bp_out_project: Optional[Callable] = None
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
        if bp_out_project is not None and bp_out_mix is not None:  # set together
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
