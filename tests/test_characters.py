import numpy as np
import torch

from spacy_elmo.bilm.characters import MAX_CHARS, TokenBatch, batch_to_char_ids, token_char_ids


def test_ascii_token_ids():
    ids = token_char_ids("The")
    assert ids[:5].tolist() == [259, 85, 105, 102, 260]
    assert (ids[5:] == 261).all() and ids.shape == (MAX_CHARS,)


def test_utf8_bytes_not_code_points():
    assert token_char_ids("\u2022")[:5].tolist() == [259, 227, 129, 163, 260]


def test_long_token_truncated_to_48_bytes():
    ids = token_char_ids("a" * 60)
    assert ids[0] == 259 and ids[49] == 260
    assert (ids[1:49] == ord("a") + 1).all() and 261 not in ids


def test_truncation_can_cut_inside_a_multibyte_character():
    word = "a" * 47 + "\u00e9"  # é is 2 bytes: only its first byte fits
    ids = token_char_ids(word)
    assert ids[48] == 0xC3 + 1 and ids[49] == 260


def test_boundary_tokens_and_literal_specials():
    bos, eos = token_char_ids("<S>"), token_char_ids("</S>")
    assert bos[:4].tolist() == [259, 257, 260, 261] and eos[:4].tolist() == [259, 258, 260, 261]
    dense = batch_to_char_ids([["<S>", "x"]])
    assert torch.equal(dense[0, 0], dense[0, 1])  # a literal <S> is the begin-of-sentence token
    unk = token_char_ids("<UNK>")
    assert unk[1:6].tolist() == [ord(c) + 1 for c in "<UNK>"]


def test_dense_batch_padding_and_boundaries():
    ids = batch_to_char_ids([["The", "first", "sentence"], ["Second", "."]])
    assert ids.shape == (2, 5, MAX_CHARS)
    assert ids[1, 4].sum() == 0  # padded position: all zeros
    assert torch.equal(ids[1, 3], torch.from_numpy(token_char_ids("</S>")))
    assert torch.equal(ids[0, 0], ids[1, 0])


def test_token_batch_matches_dense_ids():
    sentences = [["a", "b", "a"], [], ["<S>", "", "b"]]
    batch = TokenBatch.from_sentences(sentences)
    dense = batch_to_char_ids(sentences)
    rebuilt = batch.char_ids[batch.token_index]
    mask = torch.arange(dense.shape[1])[None] < batch.lengths[:, None]
    assert torch.equal(rebuilt[mask], dense[mask])
    assert batch.lengths.tolist() == [5, 2, 5]
    assert batch.strings.count("a") == 1 and batch.strings.count("b") == 1  # distinct tokens once
    assert np.array_equal(batch.char_ids[0].numpy(), np.zeros(MAX_CHARS))
