"""The thinc side of the scalar mix: a layer ``List[Floats3d] -> List[Floats2d]`` that learns the
mix of :mod:`spacy_elmo.bilm.scalar_mix` with the downstream component.

The arithmetic and its gradients are torch's (:func:`~spacy_elmo.bilm.scalar_mix.apply_mix`
under autograd); the logits ``s`` and ``gamma`` stay thinc parameters, so thinc's optimizer
updates them and saved pipelines keep their layout.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
import torch
from thinc.api import Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d, FloatsXd

from ..bilm.scalar_mix import apply_mix, check_mix_spec, mix_penalty, trainable_mix_logits

MIX_NODE = "elmo-scalar-mix"


def build_scalar_mix(
    init: Union[str, List[float]] = "average",
    gamma: float = 1.0,
    layer_norm: bool = False,
    dropout: float = 0.0,
    l2: float = 0.0,
) -> Model[List[Floats3d], List[Floats2d]]:
    """A trainable mix of ``[L+1, n_tokens, dim]`` layers (see ``spacy-elmo.ScalarMix.v1``)."""
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
    return trainable_mix_logits(spec, n_layers).cpu().numpy().astype(np.float32)


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
    model.set_param("s", model.ops.asarray1f(logits.tolist()))
    model.set_param("gamma", model.ops.asarray1f([float(model.attrs["gamma_init"])]))


def _grad(tensor: torch.Tensor) -> FloatsXd:
    """The gradient a backward pass left on ``tensor``, as a thinc (NumPy or CuPy) array."""
    if tensor.grad is None:  # pragma: no cover - backward ran through every input
        raise RuntimeError("ScalarMix: no gradient reached the mix")
    return cast(FloatsXd, torch2xp(tensor.grad))


def _mix_forward(model: Model, layers: List[Floats3d], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    xp = model.ops.xp
    if not layers:
        return [], lambda d: []
    n_layers = model.get_dim("nL")
    for array in layers:
        if array.shape[0] != n_layers:
            raise ValueError(f"ScalarMix: expects {n_layers} biLM layers, got an input with {array.shape[0]}")
    lengths = [a.shape[1] for a in layers]
    X = xp.ascontiguousarray(xp.concatenate(layers, axis=1) if len(layers) > 1 else layers[0])  # [L+1, N, D]
    l2 = model.attrs["l2"]
    with torch.set_grad_enabled(is_train):
        s = xp2torch(model.get_param("s"), requires_grad=is_train)
        gamma = xp2torch(model.get_param("gamma"), requires_grad=is_train)
        Xt = xp2torch(X, requires_grad=is_train)
        Yt = apply_mix(Xt, torch.softmax(s, 0).to(Xt.dtype), gamma.to(Xt.dtype), model.attrs["layer_norm"])
        penalty = mix_penalty(s, l2) if is_train and l2 > 0 else None
    Y = torch2xp(Yt.detach())
    rate = model.attrs["mix_dropout"]
    mask = None
    if is_train and rate > 0:
        mask = (xp.random.uniform(0.0, 1.0, Y.shape) >= rate).astype(Y.dtype) / (1.0 - rate)
        Y = Y * mask
    splits = np.cumsum(lengths)[:-1].tolist()
    outputs = xp.split(Y, splits, axis=0)

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        dY = xp.concatenate(dYs, axis=0) if len(dYs) > 1 else dYs[0]
        if mask is not None:
            dY = dY * mask
        tensors, grads = [Yt], [xp2torch(xp.ascontiguousarray(dY, dtype=Y.dtype))]
        if penalty is not None:
            tensors.append(penalty)
            grads.append(torch.ones_like(penalty))
        torch.autograd.backward(tensors, grads)
        model.inc_grad("s", _grad(s))
        model.inc_grad("gamma", _grad(gamma))
        return xp.split(_grad(Xt), splits, axis=1)

    return outputs, backprop


def mix_summary(model: Model) -> Dict[str, Any]:
    """The learned layer weights (softmax of s) and gamma of one ScalarMix node."""
    if not model.has_param("s") or model.get_param("s") is None:
        return {"weights": None, "gamma": None}
    weights = torch.softmax(torch.from_numpy(model.ops.to_numpy(model.get_param("s"))), 0).tolist()
    return {"weights": [round(float(w), 4) for w in weights], "gamma": round(float(model.ops.to_numpy(model.get_param("gamma"))[0]), 4)}
