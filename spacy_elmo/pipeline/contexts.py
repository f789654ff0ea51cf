"""Former home of the context getters, now :mod:`spacy_elmo.layers.contexts`: kept so that the entry
points of an existing installation (``spacy-elmo.sentence_contexts.v1``) and code importing from here still work."""

from ..layers.contexts import Context, ContextGetter, SentenceContexts, configure_sentence_contexts, split_windows

__all__ = ["Context", "ContextGetter", "SentenceContexts", "configure_sentence_contexts", "split_windows"]
