"""Word senses from a sense inventory: the mean ELMo vector of each labelled sense (nearest-centroid
WSD), the ``elmo_senses`` component that tags tokens with it, and which vector of a token the
sense tools use."""

from .component import ElmoSenses, install_sense_extensions, make_elmo_senses
from .inventory import SenseInventory, SensePrediction, token_key
from .vectors import NoElmoError, doc_vectors, span_vector, token_vector

__all__ = [
    "ElmoSenses",
    "NoElmoError",
    "SenseInventory",
    "SensePrediction",
    "doc_vectors",
    "install_sense_extensions",
    "make_elmo_senses",
    "span_vector",
    "token_key",
    "token_vector",
]
