"""Which of spaCy's or thinc's calls is running: initialising a model, or loading a saved pipeline.

Some answers depend on the call we are inside, not on the objects at hand: a listener may give
zeros of the right shape only while thinc initialises the model that holds it (spaCy hands that
model raw training Docs that no ``elmo`` component has seen), and a saved pipeline's config may
name weights that no longer exist (the saved biLM replaces them right after). Both are read off
the running call stack, so they hold for exactly that call and never outlive it.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Iterator, Optional

from thinc.api import Model


def _frames() -> Iterator[FrameType]:
    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def initialising(node: Model) -> bool:
    """True while ``Model.initialize`` runs for a model that contains ``node`` (e.g. inside a
    component's ``initialize``, which ``nlp.initialize`` calls)."""
    code = Model.initialize.__code__
    for frame in _frames():
        if frame.f_code is code:
            model = frame.f_locals.get("self")
            if isinstance(model, Model) and any(layer is node for layer in model.walk()):
                return True
    return False


def loading_saved_pipeline() -> bool:
    """True while spaCy builds a pipeline from a saved folder or package (``spacy.load``), whose
    components then read their own saved data."""
    from spacy.util import load_model_from_path

    code = load_model_from_path.__code__
    return any(frame.f_code is code for frame in _frames())
