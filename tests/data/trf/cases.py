"""The sentences and random archives of the transformer ELMo reference (read without allennlp)."""

SENTENCES = [
    ["The", "bank", "of", "the", "river", "flooded", "."],
    ["Geld", "für", "die", "Bank", "—", "naïve", "café", "<S>", "x" * 60],
    ["A"],
    ["She", "sat", "on", "the", "bank", "and", "watched", "the", "water", "go", "by", "slowly", "."],
]
# (shape, config shape, pre-1.6 torch format, seed) of each archive spacy_elmo.hub.trf_random writes
CASES = (("tiny", "2.x", False, 11), ("small", "2019", True, 12))
