"""Thinc layers for ELMo in spaCy: the biLM model (and the contexts it cuts Docs into), the scalar
mix, the listener and the tok2vec stack, each in its own module; the registrations of the listener
layers in :mod:`.architectures`."""

from .architectures import ElmoListener_v1, ElmoTok2Vec_v1, ScalarMix_v1
from .listener import LISTENER_NODE, ElmoListener, find_listeners
from .scalar_mix import MIX_NODE, build_scalar_mix, mix_summary, trainable_logits
from .tok2vec import TOK2VEC_NODE, build_elmo_tok2vec, learned_mixes

__all__ = [
    "LISTENER_NODE",
    "MIX_NODE",
    "TOK2VEC_NODE",
    "ElmoListener",
    "ElmoListener_v1",
    "ElmoTok2Vec_v1",
    "ScalarMix_v1",
    "build_elmo_tok2vec",
    "build_scalar_mix",
    "find_listeners",
    "learned_mixes",
    "mix_summary",
    "trainable_logits",
]
