"""Word senses and neighbours with ELMo: sense inventories (nearest-centroid WSD), the
``elmo_senses`` component, a nearest-neighbour index over token occurrences, and the WiC and
all-words WSD evaluations."""

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
