"""Makes a docs block's Python see only the extras the block names (see tests/test_readme.py).

``tests/test_readme.py`` puts this folder first on ``PYTHONPATH`` when it runs a README or docs
block, and sets ``SPACY_ELMO_DOCS_HIDDEN`` to the comma-separated top-level modules of setup.cfg's
optional packages that the block's extras do not bring. Python imports ``sitecustomize`` at
start-up, in every process of the block (a command's workers too); this one wraps each finder on
``sys.meta_path`` so that none of them finds a hidden module: ``import h5py`` raises
``ModuleNotFoundError: No module named 'h5py'`` and ``importlib.util.find_spec("h5py")`` is None,
as in an install without that extra (libraries that probe for optional packages see them absent).
A ``sitecustomize`` further along the path still runs after this one.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any, FrozenSet

HIDDEN: FrozenSet[str] = frozenset(filter(None, os.environ.get("SPACY_ELMO_DOCS_HIDDEN", "").split(",")))


class HidingFinder:
    """A meta-path finder that finds what ``inner`` finds, except the hidden modules."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        if name.partition(".")[0] in HIDDEN:
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def __getattr__(self, attribute: str) -> Any:  # invalidate_caches, find_distributions, ...
        return getattr(self.inner, attribute)


if HIDDEN:
    sys.meta_path[:] = [f if isinstance(f, HidingFinder) else HidingFinder(f) for f in sys.meta_path]

# run the sitecustomize this one shadows, if there is one
_HERE = os.path.dirname(os.path.abspath(__file__))
_OTHER = importlib.machinery.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _HERE])
if _OTHER is not None and _OTHER.loader is not None:
    _module = importlib.util.module_from_spec(_OTHER)
    _OTHER.loader.exec_module(_module)
