"""The spaCy side: the ``elmo`` component, context getters and Doc/Span/Token extensions."""
from .architectures import ElmoListener, learned_mixes
from .component import Elmo, make_elmo
from .contexts import Context, configure_sentence_contexts
from .extensions import install_extensions, set_hooks

__all__ = ["Context", "Elmo", "ElmoListener", "learned_mixes", "configure_sentence_contexts", "install_extensions", "make_elmo", "set_hooks"]
