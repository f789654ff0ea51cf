"""The ``elmo`` component's side of spaCy's listener protocol: which downstream layers read it.

spaCy's ``nlp.add_pipe``/``replace_listeners`` and ``find_listeners`` call these methods on any
component that others listen to (spaCy's own ``Tok2Vec`` has the same set); the
:class:`~spacy_elmo.pipeline.component.Elmo` component inherits them from :class:`ListenerRegistry`.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional

from spacy.language import Language
from thinc.api import Model

from ..layers.listener import ElmoListener, guard_initialisation


class ListenerRegistry:
    """Keeps ``listener_map`` (component name -> its ElmoListener layers) for an upstream component.

    The class using it sets ``self.listener_map = {}``, ``self.name`` and ``self._nlp_ref`` (a
    weak reference to the pipeline, or None).
    """

    listener_map: Dict[str, List[ElmoListener]]
    name: str
    _nlp_ref: Optional[Callable[[], Any]]

    @property
    def listeners(self) -> List[ElmoListener]:
        """The listener layers of downstream components (internals)."""
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        current = listener.upstream()
        if current is not None and current is not self and listener in current.listeners and _same_pipeline(current, self):
            raise ValueError(
                f"{listener.where()} matches two 'elmo' components, '{current.name}' and '{self.name}': set "
                f"upstream to the name of the one it should read"
            )
        listener._upstream = weakref.ref(self)
        listener._component = component_name
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            if listener.upstream() is self:
                listener._upstream = None
            return True
        return False

    def find_listeners(self, component: Any) -> None:
        """Link the ElmoListener layers of ``component`` whose upstream is "*" or this name, and
        mark the initialisation of its model on them (they may give zeros only then)."""
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            found = False
            for node in model.walk():
                if isinstance(node, ElmoListener) and node.upstream_name in ("*", self.name):
                    self.add_listener(node, component.name)
                    found = True
            if found:
                guard_initialisation(model)


def _same_pipeline(a: Any, b: Any) -> bool:
    """Both components sit in the same live pipeline (one listener cannot read two of them)."""
    nlp_a: Optional[Language] = a._nlp_ref() if a._nlp_ref is not None else None
    nlp_b: Optional[Language] = b._nlp_ref() if b._nlp_ref is not None else None
    if nlp_a is None or nlp_a is not nlp_b:
        return False
    return any(proc is a for _, proc in nlp_a.pipeline)
