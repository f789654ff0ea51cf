"""The scalar mix, ELMo = gamma * sum_j softmax(s)_j * h_j over the biLM layers: the one
implementation behind the component, the ``spacy-elmo.ScalarMix.v1`` layer and the evaluations.

* :func:`mix_logits` / :func:`trainable_mix_logits` / :func:`spec_weights`: a mix spec
  (``"average"``, ``"top"``, ``"layer:N"`` or explicit weights) as logits or normalised weights;
* :func:`apply_mix`: given weights applied to given layers (numpy or torch, differentiable);
* :func:`spec_mix`: a mix spec applied to one Doc's float32 layers (the similarity and sense vectors);
* :class:`FixedMix`: given weights set up once and applied to many Docs' float32 layers (the component);
* :func:`mix_penalty`: the paper's lambda, an L2 pull of the logits toward equal weights;
* :class:`ScalarMix`: the torch module holding the logits and gamma.
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar, Union

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

MixSpec = Union[str, Sequence[float]]
Layers = TypeVar("Layers", np.ndarray, torch.Tensor)
_NEG = -1e4  # softmax weight exactly 0.0 in float32, finite gradients
LN_EPS = 1e-12


def check_mix_spec(spec: MixSpec) -> None:
    """Check the spelling of a mix spec without knowing the biLM's layer count (see :func:`mix_logits`)."""
    if isinstance(spec, str):
        if spec in ("average", "top"):
            return
        if spec.startswith("layer:"):
            try:
                index = int(spec.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"mix {spec!r}: expected 'layer:N' with an integer N") from None
            if index < 0:
                raise ValueError(f"mix {spec!r}: layer numbers start at 0 (the context-free token layer)")
            return
        raise ValueError(f"mix must be 'average', 'top', 'layer:N' or a list of weights, got {spec!r}")
    weights = [float(w) for w in spec]
    if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
        raise ValueError(f"mix weights {weights} must be finite, non-negative and not all zero")


def mix_logits(spec: MixSpec, n_layers: int) -> torch.Tensor:
    """Initial logits ``s`` for a mix spec.

    ``"average"``: equal weights. ``"top"``: the last layer only. ``"layer:N"``: layer N only
    (0 = the context-free token layer). A list of ``n_layers`` non-negative numbers: those
    weights, normalised to sum to 1.
    """
    if isinstance(spec, str):
        if spec == "average":
            return torch.zeros(n_layers)
        if spec == "top":
            spec = f"layer:{n_layers - 1}"
        if spec.startswith("layer:"):
            try:
                index = int(spec.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"mix {spec!r}: expected 'layer:N' with an integer N") from None
            if not 0 <= index < n_layers:
                raise ValueError(f"mix {spec!r}: this biLM has {n_layers} layers, 0..{n_layers - 1} (0 = the context-free token layer)")
            logits = torch.full((n_layers,), _NEG)
            logits[index] = 0.0
            return logits
        raise ValueError(f"mix must be 'average', 'top', 'layer:N' or a list of weights, got {spec!r}")
    weights = [float(w) for w in spec]
    if len(weights) != n_layers:
        raise ValueError(f"mix weights {weights} must have one entry per biLM layer ({n_layers})")
    if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
        raise ValueError(f"mix weights {weights} must be finite, non-negative and not all zero")
    # in log space, scaled by the largest weight: neither the sum of huge weights may overflow
    # nor a tiny weight's share underflow to log(0)
    largest = max(weights)
    log_total = math.log(largest) + math.log(sum(w / largest for w in weights))
    return torch.tensor([math.log(w) - log_total if w > 0 else _NEG for w in weights])


def trainable_mix_logits(spec: MixSpec, n_layers: int) -> torch.Tensor:
    """Starting logits for a mix that will be trained: like :func:`mix_logits`, except that a
    single-layer preset ("top", "layer:N", or weights with zeros) puts 99% of the weight on its
    layer(s) instead of all of it, so that gradients can still move the other weights."""
    logits = mix_logits(spec, n_layers)
    chosen = logits > _NEG / 2
    others = int((~chosen).sum())
    if others:
        logits = torch.where(chosen, logits + math.log(0.99), torch.tensor(math.log(0.01 / others)))
    return logits


def spec_weights(spec: MixSpec, n_layers: int) -> np.ndarray:
    """The normalised float32 layer weights of a mix spec (what :func:`apply_mix` takes)."""
    return torch.softmax(mix_logits(spec if isinstance(spec, str) else list(spec), n_layers), 0).cpu().numpy().astype(np.float32)


def apply_mix(
    layers: Layers,
    weights: Union[Sequence[float], np.ndarray, torch.Tensor],
    gamma: Union[float, torch.Tensor] = 1.0,
    layer_norm: bool = False,
    layer_axis: int = 0,
) -> Layers:
    """``gamma * sum_j weights_j * layers_j`` over ``layer_axis`` (the axis disappears).

    ``weights`` are used as given (normalise them first: :func:`spec_weights`, or a softmax of
    logits). ``layer_norm`` normalises each layer over its last axis (per token: mean 0,
    variance 1, no affine parameters) before mixing. A numpy array in gives a numpy array of
    the same dtype out; torch tensors stay tensors and keep their autograd graph.
    """
    if isinstance(layers, np.ndarray):
        mixed = apply_mix(torch.from_numpy(np.ascontiguousarray(layers)), weights, gamma, layer_norm, layer_axis)
        return mixed.cpu().numpy()  # CPU already: the tensor came from numpy
    if layer_axis != 0:
        layers = layers.movedim(layer_axis, 0)
    weights = torch.as_tensor(weights, dtype=layers.dtype, device=layers.device)
    if weights.shape != layers.shape[:1]:
        raise ValueError(f"apply_mix: {tuple(weights.shape)} weights for {layers.shape[0]} layers")
    if layer_norm:
        layers = F.layer_norm(layers, layers.shape[-1:], eps=LN_EPS)
    gamma = torch.as_tensor(gamma, dtype=layers.dtype, device=layers.device)
    # the product torch.tensordot(weights, layers, dims=1) runs (one pass, no [L, ..., dim]
    # temporary), called directly: tensordot's Python wrapper costs more than the product for one Doc
    rest = layers.shape[1:]
    mixed = torch.mm(weights.unsqueeze(0), layers.reshape(layers.shape[0], math.prod(rest))).view(rest)
    return gamma * mixed


def spec_mix(layers: np.ndarray, spec: MixSpec) -> np.ndarray:
    """float32 ``[..., dim]``: the mix spec applied to float32 ``[L+1, ..., dim]`` layers (weights only: no gamma,
    no layer norm)."""
    layers = np.asarray(layers, dtype=np.float32)
    return apply_mix(layers, spec_weights(spec, layers.shape[0]))


class FixedMix:
    """A mix with fixed weights applied to many float32 NumPy arrays ``[L+1, ..., dim]``, one per
    Doc: the arithmetic of :func:`apply_mix` (the same numbers, bit for bit), with the weights and
    gamma converted once rather than per call, and no autograd. A gamma of exactly 1 is not
    multiplied (``x * 1.0`` is ``x``)."""

    def __init__(
        self, weights: Union[Sequence[float], np.ndarray, torch.Tensor], gamma: Union[float, torch.Tensor] = 1.0, layer_norm: bool = False
    ) -> None:
        with torch.no_grad():
            flat = torch.as_tensor(weights, dtype=torch.float32).detach().cpu().reshape(-1)
            self.n_layers = int(flat.shape[0])
            self._weights = flat.reshape(1, self.n_layers).clone()
            scale = torch.as_tensor(gamma, dtype=torch.float32).detach().cpu().clone()
        self._gamma = None if bool((scale == 1.0).all()) else scale
        self.layer_norm = bool(layer_norm)

    def __call__(self, layers: np.ndarray) -> np.ndarray:
        """float32 ``[..., dim]``: the mix of float32 ``layers`` ``[L+1, ..., dim]``."""
        if layers.shape[0] != self.n_layers:
            raise ValueError(f"mix: {self.n_layers} weights for {layers.shape[0]} layers")
        with torch.no_grad():
            values = torch.from_numpy(np.ascontiguousarray(layers, dtype=np.float32))
            if self.layer_norm:
                values = F.layer_norm(values, values.shape[-1:], eps=LN_EPS)
            rest = values.shape[1:]
            mixed = torch.mm(self._weights, values.reshape(self.n_layers, math.prod(rest))).view(rest)
            if self._gamma is not None:
                mixed = mixed * self._gamma  # as apply_mix: gamma [1] broadcast over [..., dim]
            return mixed.cpu().numpy()  # CPU already (made from NumPy); the device rule


def mix_penalty(logits: torch.Tensor, coef: float) -> torch.Tensor:
    """``coef * ||s - mean(s)||^2``: zero exactly when all layers weigh the same."""
    return coef * ((logits - logits.mean()) ** 2).sum()


class ScalarMix(nn.Module):
    """Task-specific weighted sum of ``n_layers`` same-shaped layers.

    ``layer_norm`` normalises each layer per token over its features (mean 0, variance 1, no
    affine parameters) before mixing; unlike AllenNLP's batch-wide statistics this keeps a
    token's vector independent of the rest of the batch. ``l2_coef`` scales the penalty
    :meth:`regularization` that pulls the weights toward the uniform average.
    """

    def __init__(
        self,
        n_layers: int,
        init: MixSpec = "average",
        gamma: float = 1.0,
        layer_norm: bool = False,
        trainable: bool = True,
        l2_coef: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_layers, self.layer_norm, self.l2_coef = n_layers, layer_norm, l2_coef
        logits = trainable_mix_logits(init, n_layers) if trainable else mix_logits(init, n_layers)
        self.scalar_parameters = nn.Parameter(logits, requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor([float(gamma)]), requires_grad=trainable)

    @property
    def weights(self) -> torch.Tensor:
        """The normalised layer weights ``softmax(s)``."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """layers: ``[n_layers, ..., dim]`` -> ``[..., dim]``."""
        if layers.shape[0] != self.n_layers:
            raise ValueError(f"ScalarMix expects {self.n_layers} layers, got {layers.shape[0]}")
        return apply_mix(layers, self.weights.to(layers.dtype), self.gamma.to(layers.dtype), self.layer_norm)

    def fixed(self) -> FixedMix:
        """This mix's current weights, gamma and layer norm as a :class:`FixedMix` (what
        :meth:`forward` computes, for many float32 NumPy arrays without autograd)."""
        with torch.no_grad():
            return FixedMix(self.weights, self.gamma, self.layer_norm)

    def regularization(self) -> torch.Tensor:
        """``l2_coef * ||s - mean(s)||^2``: zero exactly when all layers weigh the same."""
        return mix_penalty(self.scalar_parameters, self.l2_coef)
