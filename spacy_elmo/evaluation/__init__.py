"""Evaluation against sense benchmarks: WiC, all-words WSD (Raganato et al.), SemEval-2010 WSI
scoring, and the pseudoword check of sense induction on a corpus of one's own."""
