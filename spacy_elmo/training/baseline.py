"""The unigram baseline that a trained biLM's perplexity is compared with."""
from __future__ import annotations

import math
from pathlib import Path

from .data import Vocabulary, read_shard, shard_files


def unigram_perplexity(vocab: Vocabulary, data_dir: Path, split: str, limit: int = 0) -> float:
    """Perplexity of add-one unigram probabilities from the vocabulary's train counts.

    Scored on the same predictions as the biLM (every token plus one sentence end per
    sentence, OOV tokens as <UNK>). The vocabulary does not record how many training sentences
    there were, so the </S> count is estimated from the held-out sentence rate, which can only
    favour the baseline.
    """
    counts = list(vocab.counts)
    total_nll, n, sentences, tokens = 0.0, 0, 0, 0
    ids = []
    for path in shard_files(Path(data_dir), split):
        for sentence in read_shard(path, 10**9):
            ids.append(vocab.ids(sentence) + [vocab.EOS])
            sentences += 1
            tokens += len(sentence)
            if limit and sentences >= limit:
                break
        if limit and sentences >= limit:
            break
    train_tokens = sum(counts)
    counts[vocab.EOS] = max(counts[vocab.EOS], int(train_tokens * sentences / max(tokens, 1)))
    total = sum(counts) + len(counts)
    logp = [math.log((c + 1) / total) for c in counts]
    for row in ids:
        total_nll -= sum(logp[i] for i in row)
        n += len(row)
    return math.exp(total_nll / max(n, 1))
