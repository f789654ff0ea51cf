"""Published ELMo models by name: the registry, downloading them into the cache, resolving a
``weights`` value to files, and :func:`load_bilm`, the one entry point that loads any of them."""

from .load import load_bilm, read_config

__all__ = ["load_bilm", "read_config"]
