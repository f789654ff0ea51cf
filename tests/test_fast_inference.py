"""The fast inference paths give the exact path's outputs: the compiled float32 LSTM step, the
first layer's products per distinct token, the trimmed char CNN, and the kernels' threads
(spacy_elmo/bilm/lstm.py, kernels/native.py, kernels/char_trim.py, kernels/csrc/train_kernels.c)."""

import pytest
import torch

from spacy_elmo.bilm.lstm import BiLstmStack
from spacy_elmo.bilm.token_encoder import CharCnnEncoder
from spacy_elmo.kernels import bf16, build, char_trim, native

needs_compiler = pytest.mark.skipif(build.compiler() is None, reason="needs a C compiler")
BF16, F32 = torch.bfloat16, torch.float32


pytestmark = pytest.mark.usefixtures("private_kernels")  # tests/conftest.py: one private build for the file


def _stack() -> BiLstmStack:
    torch.manual_seed(0)
    stack = BiLstmStack(16, 40, 8, 2, cell_clip=0.5, proj_clip=0.3, residual=True)
    with torch.no_grad():
        for p in stack.parameters():
            p.mul_(3)  # large pre-activations: both clips are hit
    return stack.eval()


def _typed_batch(lengths, n_types=5, dim=16):
    """Inputs made of few distinct vectors (so the per-type path pays), with their index."""
    torch.manual_seed(1)
    vectors = torch.randn(n_types, dim)
    index = torch.randint(0, n_types, (len(lengths), max(lengths)))
    return vectors, index, vectors[index]


def _run(stack, inputs, lengths, types=None):
    with torch.inference_mode():
        outs, (h, c) = stack(inputs, torch.tensor(lengths), token_types=types)
    return [*outs, h, c]


@needs_compiler
@pytest.mark.parametrize("lengths", [[9, 3, 7, 1, 9, 9, 2], [4], [1, 1]])
def test_compiled_float32_step_gives_the_eager_outputs(lengths, monkeypatch):
    assert native.library() is not None
    stack = _stack()
    vectors, index, inputs = _typed_batch(lengths)
    compiled_types = _run(stack, inputs, lengths, (vectors, index))
    compiled_packed = _run(stack, inputs, lengths)
    monkeypatch.setattr(native, "library", lambda: None)
    eager = _run(stack, inputs, lengths)
    for a, b, c in zip(compiled_types, compiled_packed, eager):
        assert torch.allclose(a, c, atol=1e-6, rtol=1e-5), float((a - c).abs().max())
        assert torch.allclose(b, c, atol=1e-6, rtol=1e-5), float((b - c).abs().max())


@needs_compiler
def test_the_per_type_path_is_taken_when_words_repeat_and_not_otherwise(monkeypatch):
    stack = _stack()
    taken = []
    real = BiLstmStack.uses_token_types
    monkeypatch.setattr(BiLstmStack, "uses_token_types", lambda self, *a: taken.append(real(self, *a)) or taken[-1])
    vectors, index, inputs = _typed_batch([9, 9, 9])
    _run(stack, inputs, [9, 9, 9], (vectors, index))
    assert taken == [True]  # 5 distinct vectors for 27 positions: first layer only
    distinct = torch.arange(6).view(2, 3)
    _run(stack, torch.randn(6, 16)[distinct], [3, 3], (torch.randn(6, 16), distinct))
    assert taken == [True, False]  # every position its own token: nothing to share


@needs_compiler
def test_bfloat16_per_type_products_match_the_packed_ones():
    stack = _stack()
    lengths = [9, 3, 7, 1, 9]
    vectors, index, inputs = _typed_batch(lengths)
    cache = bf16.Bf16WeightCache()
    with torch.inference_mode():
        typed = stack(inputs, torch.tensor(lengths), bf16_products=cache, token_types=(vectors, index))[0]
        packed = stack(inputs, torch.tensor(lengths), bf16_products=cache)[0]
    for a, b in zip(typed, packed):  # the same bfloat16 products, row for row
        assert torch.allclose(a, b, atol=1e-6), float((a - b).abs().max())


@needs_compiler
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_threads_do_not_change_the_inference_step(dtype):
    lib = native.library()
    torch.manual_seed(0)
    n, hid = 7, 48
    step, rec = torch.randn(2, n, 4 * hid).to(dtype), torch.randn(2, n, 4 * hid).to(dtype)
    bias, c0 = torch.randn(2, 4 * hid), torch.randn(2, n, hid)
    results = []
    for threads in (1, 2, 5, 64):
        c, m = c0.clone(), torch.empty(2, n, hid, dtype=dtype)
        lib.infer_step(bias, step, rec, c, m, 0.5, threads=threads)
        results.append((c, m))
    for c, m in results[1:]:
        assert torch.equal(c, results[0][0]) and torch.equal(m, results[0][1])


@needs_compiler
def test_threads_do_not_change_the_training_kernels_beyond_the_bias_sum():
    lib = native.library()
    torch.manual_seed(0)
    n, hid = 9, 24

    def once(threads):
        z, c_prev = torch.randn(2, n, 4 * hid).to(BF16), torch.randn(2, n, hid)
        gates, c_new, tanh_c = torch.empty(2, n, 4 * hid), torch.empty(2, n, hid), torch.empty(2, n, hid)
        m = torch.empty(2, n, hid, dtype=BF16)
        lib.forward(z, c_prev, gates, c_new, tanh_c, m, 0.5, threads=threads)
        dm, dz, dc = torch.randn(2, n, hid).to(BF16), torch.empty(2, n, 4 * hid, dtype=BF16), torch.empty(2, n, hid)
        grad_bias = torch.zeros(2, 4 * hid)
        lib.backward(dm, gates, c_new, c_prev, tanh_c, torch.randn(2, n - 2, hid), 0.5, dz, dc, grad_bias, threads=threads)
        out = torch.empty(2, n, hid, dtype=BF16)
        lib.hidden_grad(torch.randn(2, n, hid), torch.randn(2, n - 1, hid).to(BF16), m, 0.3, out, threads=threads)
        conv = torch.randn(11, 12, 7).to(BF16)
        pooled = lib.max_pool(conv, [2, 5], [3, 4], threads=threads)
        return [gates, c_new, tanh_c, m, dz, dc, out, *pooled], grad_bias

    torch.manual_seed(5)
    one, bias_one = once(1)
    torch.manual_seed(5)
    three, bias_three = once(3)
    for a, b in zip(one, three):
        assert torch.equal(a, b)
    assert torch.allclose(bias_one, bias_three, atol=1e-5)  # summed per part, then the parts


def test_threads_follow_torch_and_the_size_of_the_work(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert native.threads_for(10) == 1  # too little work to pay for a thread
    assert native.threads_for(3 * native.PARALLEL_GRAIN) == 3
    assert native.threads_for(100 * native.PARALLEL_GRAIN) == 4  # never more than torch's
    assert native.threads_for(10, threads=2) == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads: expected an integer >= 1"):
            native.threads_for(10, threads=bad)


@needs_compiler
def test_step_rows_read_the_step_through_the_index_and_are_checked():
    lib = native.library()
    torch.manual_seed(0)
    n, hid, table = 4, 8, 6
    projected = [torch.randn(table, 4 * hid) for _ in (0, 1)]
    rows = [torch.tensor([5, 0, 5, 2]), torch.tensor([1, 1, 3, 0])]
    rec, bias, c0 = torch.randn(2, n, 4 * hid), torch.randn(2, 4 * hid), torch.randn(2, n, hid)
    c1, m1 = c0.clone(), torch.empty(2, n, hid)
    lib.infer_step(bias, projected, rec, c1, m1, None, step_rows=rows)
    c2, m2 = c0.clone(), torch.empty(2, n, hid)
    lib.infer_step(bias, torch.stack([p[r] for p, r in zip(projected, rows)]), rec, c2, m2, None)
    assert torch.equal(c1, c2) and torch.equal(m1, m2)
    for bad, message in (
        ([torch.tensor([5, 0, 6, 2]), rows[1]], r"step_rows\[0\]: every row index must be in 0..5"),
        ([rows[0], torch.tensor([1, -1, 3, 0])], r"step_rows\[1\]: every row index must be in 0..5"),
        ([rows[0], rows[1][:3]], r"step_rows\[1\]: expected 4 contiguous int64 values"),
        ([rows[0].int(), rows[1]], r"step_rows\[0\]: expected 4 contiguous int64 values"),
    ):
        with pytest.raises(ValueError, match=message):
            lib.infer_step(bias, projected, rec, c0.clone(), torch.empty(2, n, hid), None, step_rows=bad)
    c3, m3 = c0.clone(), torch.empty(2, n, hid, dtype=BF16)  # bfloat16 reads through the index too
    lib.infer_step(bias, [p.to(BF16) for p in projected], rec.to(BF16), c3, m3, None, step_rows=rows)
    c4, m4 = c0.clone(), torch.empty(2, n, hid, dtype=BF16)
    lib.infer_step(bias, torch.stack([p[r] for p, r in zip(projected, rows)]).to(BF16), rec.to(BF16), c4, m4, None)
    assert torch.equal(c3, c4) and torch.equal(m3, m4)


# ---------------------------------------------------------------------------------- char CNN


def _char_rows() -> torch.Tensor:
    """Rows like the biLM's: <bow>, bytes, <eow>, a padding tail; plus the edge cases."""
    torch.manual_seed(0)
    rows = []
    for length in (1, 3, 5, 8, 13, 21, 48, 3, 2):
        row = torch.full((50,), 261)
        row[0], row[length + 1] = 259, 260
        row[1 : length + 1] = torch.randint(1, 256, (length,))
        rows.append(row)
    rows.append(torch.zeros(50, dtype=torch.long))  # the padding token: one id throughout
    rows.append(torch.randint(1, 262, (50,)))  # no tail at all
    rows.append(torch.full((50,), 7))  # one id throughout, not zero
    return torch.stack(rows)


def test_word_positions_are_the_positions_before_the_uniform_tail():
    ids = _char_rows()
    words = char_trim.word_positions(ids).tolist()
    assert words[:9] == [3, 5, 7, 10, 15, 23, 49, 5, 4]  # <bow> + bytes + <eow>; with 48 bytes the <eow> is the tail
    assert words[9] == 0 and words[11] == 0
    assert words[10] >= 49  # its last id may repeat the one before


@pytest.mark.parametrize("widths", [((1, 4), (2, 5), (3, 6), (7, 7)), ((1, 3), (5, 4))])
def test_trimmed_char_cnn_equals_the_full_one(widths):
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, widths, n_highway=1, output_dim=9).eval()
    ids = _char_rows()
    with torch.no_grad():
        full = enc._encode(ids)
        trimmed = enc(ids)
        alone = torch.cat([enc(ids[k : k + 1]) for k in range(len(ids))])  # each token in a chunk of its own
    assert torch.allclose(trimmed, full, atol=1e-6)
    assert torch.allclose(alone, full, atol=1e-6)


def test_trimming_keeps_a_window_of_the_tail():
    """Without one window wholly in the tail, a filter whose maximum lies there would be lost:
    the kept positions must reach ``word + widest``."""
    for word in range(0, 51):
        for widest in (1, 3, 7):
            keep = char_trim.needed_positions(word, widest, 50)
            assert keep == 50 or keep >= word + widest
            assert keep % char_trim.POSITION_MULTIPLE == 0 or keep == 50
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (3, 6)), n_highway=0, output_dim=10).eval()
    with torch.no_grad():
        enc.char_embedding.weight[261] = 5.0  # the padding id dominates every filter it enters
        ids = _char_rows()[:4]
        cut = ids[:, : int(char_trim.word_positions(ids).max())]  # the words alone: the tail's value is lost
        assert not torch.allclose(enc._encode(cut), enc._encode(ids), atol=1e-4)
        assert torch.allclose(enc(ids), enc._encode(ids), atol=1e-6)


@needs_compiler
def test_trimmed_bfloat16_char_cnn_matches_the_untrimmed_one(monkeypatch):
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (2, 5), (3, 6), (7, 7)), n_highway=1, output_dim=9).eval()
    copies = bf16.Bf16WeightCache(bf16.derive_layouts).weights(enc)
    ids = _char_rows()
    with torch.no_grad():
        got = bf16.encode_tokens(enc, copies, ids)
        monkeypatch.setattr(char_trim, "needed_positions", lambda word, widest, length: length)  # no trimming
        untrimmed = bf16.encode_tokens(enc, copies, ids)
    assert torch.allclose(got, untrimmed, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_huge_pre_activations_saturate_the_gates_as_torch_does(dtype):
    """Under -ffast-math the vector expf of a large argument made sigmoid NaN: a pre-activation
    below -88 turned the whole row's state NaN from there on (a 40-byte token did it in a tiny
    model). The gates must saturate as torch's do."""
    lib = native.library()
    hid = 16
    for value in (-1000.0, -100.0, -89.0, 89.0, 1000.0):
        step = torch.full((2, 3, 4 * hid), value).to(dtype)
        rec, bias, c = torch.zeros(2, 3, 4 * hid).to(dtype), torch.zeros(2, 4 * hid), torch.full((2, 3, hid), 0.5)
        m = torch.empty(2, 3, hid, dtype=dtype)
        c_ref = torch.sigmoid(torch.tensor(value)) * 0.5 + torch.sigmoid(torch.tensor(value)) * torch.tanh(torch.tensor(value))
        lib.infer_step(bias, step, rec, c, m, None)
        assert torch.isfinite(c).all() and torch.isfinite(m.float()).all(), value
        assert torch.allclose(c, c_ref.expand_as(c), atol=1e-6), (value, float(c[0, 0, 0]), float(c_ref))
        z = torch.full((2, 3, 4 * hid), value).to(BF16)
        gates, c_new, tanh_c = torch.empty(2, 3, 4 * hid), torch.empty(2, 3, hid), torch.empty(2, 3, hid)
        lib.forward(z, torch.full((2, 3, hid), 0.5), gates, c_new, tanh_c, torch.empty(2, 3, hid, dtype=BF16), None)
        assert torch.isfinite(gates).all() and torch.isfinite(c_new).all(), value
