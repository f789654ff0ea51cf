"""``iter_embeddings`` yields in input order (sorted batching stays inside, within a window)."""
from __future__ import annotations

import numpy as np
import pytest

SENTENCES = [
    "The bank lends money to the farmers of the valley every spring .".split(),
    "Hi".split(),
    "He sat on the bank .".split(),
    [],
    "A very long sentence about rivers , banks , boats and the people who row them at dawn .".split(),
    "Yes .".split(),
    "Money .".split(),
]


@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 2}, {"max_batch_tokens": 20}, {"window": 3}, {"window": 1}])
def test_iter_embeddings_yields_in_input_order_with_the_same_vectors(allennlp_bilm, kwargs):
    listed = allennlp_bilm.embed_sentences(SENTENCES, batch_size=1)
    streamed = list(allennlp_bilm.iter_embeddings(SENTENCES, **kwargs))
    assert [index for index, _ in streamed] == list(range(len(SENTENCES)))
    for index, array in streamed:
        assert array.shape == listed[index].shape
        assert array.size == 0 or np.abs(array - listed[index]).max() < 2e-6  # float rounding: the parity tolerance


def test_a_bad_window_is_refused(allennlp_bilm):
    with pytest.raises(ValueError, match="window"):
        allennlp_bilm.iter_embeddings(SENTENCES, window=0)
