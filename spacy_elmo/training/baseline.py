"""The unigram baseline that a trained biLM's perplexity is compared with."""

from __future__ import annotations

import math
from pathlib import Path

from .data import Vocabulary, evaluation_shards


def unigram_perplexity(vocab: Vocabulary, data_dir: Path, split: str, limit: int = 0, max_length: int = 50) -> float:
    """Perplexity of add-one unigram probabilities from the vocabulary's train counts.

    Scored on exactly the predictions the biLM's perplexity scores: the same sentences cut at
    ``max_length`` tokens, every token plus one sentence end per piece, out-of-vocabulary tokens
    as ``<UNK>`` with ``<UNK>``'s real train count (the tokens left out of the vocabulary), which
    ``prepare`` writes into vocab.txt. A vocabulary from an older ``prepare`` has no count for
    ``</S>``: it is then estimated from the held-out sentence rate.
    """
    counts = list(vocab.counts)
    rows = [vocab.ids(s) + [vocab.EOS] for shard in evaluation_shards(Path(data_dir), split, max_length, limit) for s in shard]
    if counts[vocab.EOS] == 0:
        tokens = sum(len(row) - 1 for row in rows)
        counts[vocab.EOS] = int(sum(counts) * len(rows) / max(tokens, 1))
    total = sum(counts) + len(counts)
    logp = [math.log((c + 1) / total) for c in counts]
    total_nll = -sum(logp[i] for row in rows for i in row)
    n = sum(len(row) for row in rows)
    return math.exp(total_nll / max(n, 1))
