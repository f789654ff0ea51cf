"""The registered thinc architectures for training spaCy components on ELMo (all in one place).

* ``spacy-elmo.ScalarMix.v1``: the paper's task-specific mix ``gamma * sum_j softmax(s)_j h_j``
  (``List[Floats3d] -> List[Floats2d]``), learned by the downstream component.
* ``spacy-elmo.ElmoListener.v1``: a tok2vec for any component that reads the biLM layers of an
  upstream ``elmo`` component.
* ``spacy-elmo.ElmoTok2Vec.v1``: the same stack with its own biLM (what
  ``nlp.replace_listeners`` produces).
"""

from __future__ import annotations

from typing import List, Optional, Union

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d, Floats3d

from .bilm_model import BILM_NODE, configure_bilm_model
from .listener import ElmoListener
from .scalar_mix import build_scalar_mix
from .tok2vec import build_elmo_tok2vec


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
    return build_scalar_mix(init, gamma, layer_norm, dropout, l2)


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
