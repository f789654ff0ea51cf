"""Sense induction: a word's senses found in a corpus without labels, from the biLM's substitutes
and the words around each occurrence, clustered (with the number-of-senses rule) and named; the
corpus reading and target forms it needs, and the induced senses' files."""
