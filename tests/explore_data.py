"""WordSenses for the explore tests: synthetic ones, and real ones from the default model's vectors
of "bank" in tests/data/senses/bank.tsv (its two senses the sentences' own labels, not induced)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

from spacy_elmo.induction.induced import Occurrence, Sense, WordSenses

BANK = Path(__file__).resolve().parent / "data" / "senses" / "bank.tsv"
HOSTILE = [
    "The <script>window.__pwned = 1</script> bank was robbed.",
    'A bank <img src=x onerror="window.__pwned = 2"> & "quotes" \u2028 </script><b>bold</b>.',
]


def synthetic(sizes: Sequence[int] = (12, 10, 8), dim: int = 16, seed: int = 0, texts: Sequence[str] = ()) -> WordSenses:
    """Well-separated clusters, one per sense; ``texts`` replace the first sentences (each must contain "bank")."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), dim)) * 4
    occurrences: List[Occurrence] = []
    vectors, labels = [], []
    for k, size in enumerate(sizes):
        for i in range(size):
            text = f"Sentence {i} of sense {k}: the bank was here."
            if len(occurrences) < len(texts):
                text = texts[len(occurrences)]
            start = text.index("bank")
            occurrences.append(Occurrence(text, start, start + 4, f"doc{k}:{i}"))
            vectors.append(centres[k] + rng.normal(size=dim))
            labels.append(k)
    return _word_senses("bank", occurrences, np.array(vectors, dtype=np.float32), labels, [f"sense{k}" for k in range(len(sizes))])


def bank_sentences() -> List[Tuple[str, str]]:
    """(sense, sentence) pairs of tests/data/senses/bank.tsv."""
    rows = [line.rstrip("\n").split("\t") for line in BANK.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return [(sense, sentence) for sense, sentence in rows]


def real_bank() -> WordSenses:
    """"bank" in the test sentences, each occurrence's vector the embedded default model's ``token._.elmo``."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    pairs = bank_sentences()
    names = sorted({sense for sense, _ in pairs})
    occurrences, vectors, labels = [], [], []
    for (sense, _), doc in zip(pairs, nlp.pipe(sentence for _, sentence in pairs)):
        token = next(t for t in doc if t.lower_ == "bank")
        occurrences.append(Occurrence(doc.text, token.idx, token.idx + len(token), f"{BANK.name}:{len(occurrences) + 3}"))
        vectors.append(token._.elmo)
        labels.append(names.index(sense))
    return _word_senses("bank", occurrences, np.array(vectors, dtype=np.float32), labels, names, representation="elmo")


def _word_senses(word, occurrences, vectors, labels, names, representation="synthetic") -> WordSenses:
    k = len(names)
    weights = np.full((len(occurrences), k), 0.1 / max(k - 1, 1) if k > 1 else 0.0, dtype=np.float32)
    weights[np.arange(len(occurrences)), labels] = 0.9 if k > 1 else 1.0
    senses = [
        Sense(i, f"{word}: {name}", [f"{name}-a", f"{name}-b"], labels.count(i), [j for j, label in enumerate(labels) if label == i][:5])
        for i, name in enumerate(names)
    ]
    return WordSenses(word, [word], occurrences, senses, weights, vectors, representation=representation)
