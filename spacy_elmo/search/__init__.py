"""Nearest-neighbour search over token occurrences: the token index (exact or HNSW)."""
