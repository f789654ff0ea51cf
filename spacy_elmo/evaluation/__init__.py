"""Evaluation against sense benchmarks: WiC, all-words WSD (Raganato et al.), SemEval-2010 WSI
scoring, the pseudoword check of sense induction on a corpus of one's own, and the hand-written
sense probe that the default model's ship rule reads."""
