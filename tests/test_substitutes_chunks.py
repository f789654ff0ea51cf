"""Substitutes are scored in chunks sized by a memory budget, not a fixed number of rows."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from spacy_elmo.induction.substitutes import SCORE_BUDGET, SCORE_COPIES, LMHead, score_rows

PUBLISHED_WORDS = 793_471  # elmo-original's vocabulary


def test_the_budget_bounds_the_scores_of_the_published_head():
    rows = score_rows(PUBLISHED_WORDS)
    assert rows == 169 and SCORE_BUDGET == 1 << 30
    assert SCORE_COPIES * 4 * PUBLISHED_WORDS * rows <= SCORE_BUDGET  # at most 1 GiB of [rows, V] float32
    assert score_rows(PUBLISHED_WORDS, budget=1) == 1  # never zero rows


def random_head(words: int = 500, dim: int = 16) -> LMHead:
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(words, dim, generator=generator), torch.randn(words, generator=generator)
    return LMHead.from_arrays([f"w{i}" for i in range(words)], weight, bias)


def test_chunks_follow_the_budget_and_change_nothing(monkeypatch):
    head = random_head()
    states = torch.randn(50, head.dim, generator=torch.Generator().manual_seed(1))
    prior = torch.log_softmax(torch.randn(len(head)), -1)
    exclude = torch.zeros(len(head), dtype=torch.bool)
    exclude[:5] = True
    whole = head.top_substitutes(states, 7, exclude, prior, 0.75, chunk=len(states))
    seen = []
    scores = head.log_probs
    monkeypatch.setattr(head, "log_probs", lambda chunk: seen.append(len(chunk)) or scores(chunk))
    budget = SCORE_COPIES * 4 * len(head) * 8  # room for 8 rows
    chunked = head.top_substitutes(states, 7, exclude, prior, 0.75, budget=budget)
    assert seen == [8] * 6 + [2]
    np.testing.assert_array_equal(whole[0], chunked[0])
    np.testing.assert_allclose(whole[1], chunked[1], rtol=1e-6, atol=1e-5)  # products of other shapes round otherwise
    assert not np.isin(whole[0], np.arange(5)).any()  # excluded words never come out
    seen.clear()
    head.top_substitutes(states, 7)  # the default budget: all 50 rows of a 500-word head at once
    assert seen == [50]


def test_a_bad_chunk_is_refused():
    with pytest.raises(ValueError, match="chunk=0: give a positive number of rows"):
        random_head().top_substitutes(torch.zeros(2, 16), 3, chunk=0)
