"""The char CNN's convolutions as table lookups at inference (spacy_elmo/kernels/char_table.py and
its compiled kernel): the convolutions' maxima to float rounding, the same bits whatever the batch,
the positions given or the threads, remade when a weight changes, and out of the way where they do
not apply (autograd, non-finite weights)."""

import numpy as np
import pytest
import torch

from spacy_elmo.bilm.characters import token_char_ids
from spacy_elmo.bilm.token_encoder import CharCnnEncoder
from spacy_elmo.kernels import build, char_table, native

pytestmark = [
    pytest.mark.skipif(build.compiler() is None, reason="needs a C compiler"),
    pytest.mark.usefixtures("private_kernels"),
]

DEFAULT_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]]
WORDS = ["a", "the", "bank", "Deposits", "rose", "sharply", ",", "internationalisation", "x" * 48, "ünïcödé", "<S>", "3.14"]


def _encoder(filters=DEFAULT_FILTERS, activation="relu", seed=0) -> CharCnnEncoder:
    torch.manual_seed(seed)
    encoder = CharCnnEncoder(262, 16, filters, 1, 64, activation=activation).eval()
    with torch.no_grad():
        for conv in encoder.convs:
            conv.bias.normal_()  # torch's init leaves biases small: make them count
    return encoder


def _ids(words=WORDS) -> torch.Tensor:
    return torch.from_numpy(np.stack([token_char_ids(w) for w in words])).long()


def _conv_pooled(encoder: CharCnnEncoder, ids: torch.Tensor) -> torch.Tensor:
    x = encoder.char_embedding(ids).transpose(1, 2)
    return torch.cat([conv(x).amax(dim=-1) for conv in encoder.convs], dim=-1)


@pytest.mark.parametrize("filters", [DEFAULT_FILTERS, [[1, 4], [3, 8], [7, 20]], [[2, 100]]])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_tables_give_the_convolutions_maxima(filters, activation):
    encoder = _encoder(filters, activation)
    ids = _ids()
    with torch.inference_mode():
        by_tables = encoder.table_pooled(ids)
        assert by_tables is not None
        reference = _conv_pooled(encoder, ids)
        torch.testing.assert_close(by_tables, reference, rtol=1e-5, atol=1e-5)
        # and through the encoder's own pooling (the activation after the maxima)
        act = torch.relu if activation == "relu" else torch.tanh
        torch.testing.assert_close(encoder.pooled(ids), act(reference), rtol=1e-5, atol=1e-5)


def test_a_tokens_value_does_not_depend_on_its_batch_positions_or_threads():
    encoder = _encoder()
    ids = _ids()
    lib = native.library()
    tables = encoder.char_tables.weights(encoder)["tables"]

    def run(x, threads=1):
        return lib.char_table_max(x, tables.tables, tables.vocab, tables.widths, tables.counts, tables.bias, threads=threads)

    with torch.inference_mode():
        whole = run(ids)
        for i in range(len(ids)):  # alone, and cut to the positions its word and the widest window need
            assert torch.equal(run(ids[i : i + 1]), whole[i : i + 1])
            word = int((ids[i] != ids[i, -1]).nonzero().max()) + 1
            keep = min(50, word + 5)
            assert torch.equal(run(ids[i : i + 1, :keep]), whole[i : i + 1])
        shuffled = torch.randperm(len(ids), generator=torch.Generator().manual_seed(0))
        assert torch.equal(run(ids[shuffled]), whole[shuffled])
        many = ids.repeat(300, 1)  # enough work for two threads
        assert torch.equal(run(many, threads=2), run(many, threads=1))
        assert torch.equal(run(ids.int()), whole)  # int32 ids as int64


def test_the_tables_are_remade_when_a_weight_changes():
    encoder = _encoder()
    ids = _ids()
    with torch.inference_mode():
        before = encoder.table_pooled(ids)
    made = encoder.char_tables.conversions
    with torch.no_grad():
        encoder.convs[2].weight.mul_(2.0)
        encoder.char_embedding.weight[ord("a") + 1].add_(1.0)
    with torch.inference_mode():
        after = encoder.table_pooled(ids)
        torch.testing.assert_close(after, _conv_pooled(encoder, ids), rtol=1e-5, atol=1e-5)
    assert encoder.char_tables.conversions == made + 1
    assert not torch.equal(before, after)


def test_the_convolutions_run_where_the_tables_do_not_apply():
    encoder = _encoder()
    ids = _ids()
    assert encoder.table_pooled(ids) is None  # autograd on: training keeps the convolutions
    encoder(ids).sum().backward()
    assert encoder.convs[0].weight.grad is not None
    with torch.no_grad():
        encoder.convs[1].weight[0, 0, 0] = float("nan")
    with torch.inference_mode():
        assert encoder.table_pooled(ids) is None  # non-finite weights: the convolutions, and their NaN
        assert torch.isnan(encoder.pooled(ids)[:, 32]).all()
        assert encoder.table_pooled(ids[:, :4]) is None  # fewer positions than the widest filter


def test_a_large_character_vocabulary_keeps_its_convolutions(monkeypatch):
    encoder = _encoder()
    monkeypatch.setattr(char_table, "MAX_TABLE_BYTES", 262 * 2080 * 4 - 1)  # one byte short of the default's tables
    with torch.inference_mode():
        assert encoder.table_pooled(_ids()) is None
        torch.testing.assert_close(encoder.pooled(_ids()), torch.relu(_conv_pooled(encoder, _ids())))


def test_bad_arguments_get_a_clear_error():
    encoder = _encoder()
    tables = encoder.char_tables.weights(encoder)["tables"]
    lib = native.library()
    args = (tables.tables, tables.vocab, tables.widths, tables.counts, tables.bias)
    with pytest.raises(ValueError, match="ids must be in 0..261"):
        lib.char_table_max(torch.full((2, 50), 262), *args)
    with pytest.raises(ValueError, match="fewer than the widest filter"):
        lib.char_table_max(torch.zeros(2, 4, dtype=torch.long), *args)
    with pytest.raises(ValueError, match="tables: expected a contiguous float32 vector"):
        lib.char_table_max(_ids(), tables.tables[:-1], *args[1:])
    with pytest.raises(ValueError, match="bias"):
        lib.char_table_max(_ids(), *args[:-1], tables.bias[:-1])
    with pytest.raises(ValueError, match="char_ids: expected integer"):
        lib.char_table_max(_ids().float(), *args)


def test_bfloat16_inference_pools_in_float32_by_the_tables():
    from spacy_elmo import load_bilm

    bilm = load_bilm()
    sentences = [WORDS, "Deposits at the bank rose sharply".split()]
    exact = bilm.embed_sentences(sentences)
    bilm.set_inference_precision("bfloat16")
    with_tables = bilm.embed_sentences(sentences)
    bilm.token_encoder.table_pooled = lambda ids: None  # the bfloat16 convolutions instead
    without = bilm.embed_sentences(sentences)
    for a, b, c in zip(with_tables, without, exact):
        # layer 0 reads the pooled maxima: float32 ones put it nearer float32's
        assert np.abs(a[0] - c[0]).max() < np.abs(b[0] - c[0]).max()
