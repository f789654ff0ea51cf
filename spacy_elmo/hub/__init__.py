"""Published ELMo models by name: the registry, downloading them into the cache, resolving a
``weights`` value to files, :func:`load_bilm`, the one entry point that loads any of them, and
:func:`load_lm_head`, the one that loads a model's softmax and vocabulary."""

from .lm_head import LMHead, load_lm_head
from .load import load_bilm, read_config

__all__ = ["LMHead", "load_bilm", "load_lm_head", "read_config"]
