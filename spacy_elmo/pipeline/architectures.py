"""Former home of the thinc layers, now in :mod:`spacy_elmo.layers`: kept so that the entry
points of an existing installation and code importing ``learned_mixes`` from here still work."""

from ..layers.architectures import ElmoListener_v1, ElmoTok2Vec_v1, ScalarMix_v1
from ..layers.listener import LISTENER_NODE, ElmoListener, find_listeners
from ..layers.scalar_mix import MIX_NODE, mix_summary, trainable_logits
from ..layers.tok2vec import TOK2VEC_NODE, build_elmo_tok2vec, learned_mixes

__all__ = [
    "LISTENER_NODE",
    "MIX_NODE",
    "TOK2VEC_NODE",
    "ElmoListener",
    "ElmoListener_v1",
    "ElmoTok2Vec_v1",
    "ScalarMix_v1",
    "build_elmo_tok2vec",
    "find_listeners",
    "learned_mixes",
    "mix_summary",
    "trainable_logits",
]
