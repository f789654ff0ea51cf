"""The old import paths of modules that moved: each still imports, as the module it became.

``spacy_elmo.senses`` once held sense induction, the benchmarks, the token index and the explore
page; they now live in ``induction``, ``evaluation``, ``search`` and ``explore``. Code written
against an old path (``from spacy_elmo.senses.induce import induce``) gets the new module itself
(the same object, so its names and anything set on it are shared). This table is the one place
that knows the old paths; the package root installs the finder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Dict, Optional, Sequence

MOVED: Dict[str, str] = {
    **{
        f"spacy_elmo.senses.{name}": f"spacy_elmo.induction.{name}"
        for name in ("clustering", "context", "corpus", "forms", "induce", "induced", "naming", "substitutes")
    },
    **{
        f"spacy_elmo.senses.{name}": f"spacy_elmo.evaluation.{name}"
        for name in ("wic", "wsd", "wsd_data", "wsi_check", "wsi_data", "wsi_eval", "wsi_score")
    },
    "spacy_elmo.senses.index": "spacy_elmo.search.index",
    "spacy_elmo.senses.explore": "spacy_elmo.explore.page",
    "spacy_elmo.senses.projection": "spacy_elmo.explore.projection",
}


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the new module."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def exec_module(self, module: ModuleType) -> None:
        # the import system returns what sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once), after the ordinary finders."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
