"""The compiled bf16-training kernels (spacy_elmo/kernels/native.py, kernels/csrc/train_kernels.c):
the eager code's results, a clear error on bad input, and a fallback where they cannot be built."""

import pytest
import torch

from spacy_elmo.bilm.lstm import BiLstmStack
from spacy_elmo.bilm.token_encoder import CharCnnEncoder
from spacy_elmo.kernels import build, native

needs_compiler = pytest.mark.skipif(build.compiler() is None, reason="needs a C compiler")


pytestmark = pytest.mark.usefixtures("private_kernels")  # tests/conftest.py: one private build for the file


def _eager(monkeypatch):
    monkeypatch.setattr(native, "library", lambda: None)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm().clamp_min(1e-30))


def _run_stack(stack, x, lengths, weights):
    stack.zero_grad()
    x.grad = None
    torch.manual_seed(3)
    outs, (h, c) = stack(x, torch.tensor(lengths))
    if not weights:  # fixed random output weights, made on the first call
        weights.extend(torch.randn_like(o) for o in outs)
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    return [o.detach() for o in outs] + [h, c, x.grad.clone()], {n: p.grad.clone() for n, p in stack.named_parameters()}


def _clipping_stack(dtype):
    torch.manual_seed(0)
    stack = BiLstmStack(16, 40, 8, 2, cell_clip=0.5, proj_clip=0.3, residual=True)  # 40: not a multiple of the vector width
    with torch.no_grad():
        for p in stack.parameters():
            p.mul_(3)  # large pre-activations: both clips are hit
    stack.train_dtype = dtype
    return stack


@needs_compiler
@pytest.mark.parametrize("lengths", [[9, 3, 7, 1, 9], [4]])
def test_compiled_recurrence_gives_the_eager_results_in_bf16(lengths, monkeypatch):
    assert native.library() is not None
    stack = _clipping_stack(torch.bfloat16)
    x = torch.randn(len(lengths), max(lengths), 16, requires_grad=True)
    weights: list = []
    got, got_grads = _run_stack(stack, x, lengths, weights)
    _eager(monkeypatch)
    ref, ref_grads = _run_stack(stack, x, lengths, weights)
    for a, b in zip(got, ref):
        assert _relative(a, b) < 1e-4
    for name in ref_grads:
        assert _relative(got_grads[name], ref_grads[name]) < 1e-2, name
    assert (ref[-2].abs() == 0.5).any()  # the cell clip was exercised


@needs_compiler
def test_compiled_recurrence_in_float32_equals_autograd():
    lengths = [9, 3, 7, 1, 9]
    stack = _clipping_stack(None)
    x = torch.randn(len(lengths), max(lengths), 16, requires_grad=True)
    weights: list = []
    ref, ref_grads = _run_stack(stack, x, lengths, weights)  # the autograd recurrence
    stack.train_dtype = torch.float32  # the fused layer, float32 products, compiled elementwise steps
    got, got_grads = _run_stack(stack, x, lengths, weights)
    for a, b in zip(got, ref):
        assert _relative(a, b) < 1e-5
    for name in ref_grads:
        assert _relative(got_grads[name], ref_grads[name]) < 1e-5, name


@needs_compiler
def test_max_pool_equals_torch_max_with_ties_and_the_first_winner():
    lib = native.library()
    assert lib is not None
    torch.manual_seed(0)
    widths, counts = [1, 2, 3, 5], [3, 17, 8, 5]
    for conv in (torch.randn(7, 6, 33), torch.randint(0, 3, (7, 5, 33)).float()):  # 5 positions: one valid for width 5
        conv = conv.bfloat16()
        values, index = lib.max_pool(conv, widths, counts)
        start = 0
        for width, count in zip(widths, counts):
            best, where = conv[:, : conv.shape[1] - width + 1, start : start + count].max(dim=1)
            assert torch.equal(values[:, start : start + count], best.float())
            assert torch.equal(index[:, start : start + count], where)
            start += count


@needs_compiler
def test_char_encoder_training_step_is_the_same_with_and_without_the_compiled_pool(monkeypatch):
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (2, 5), (3, 6), (5, 7)), n_highway=1, output_dim=9)
    enc.train_dtype = torch.bfloat16
    ids = torch.randint(1, 262, (11, 50))
    weights = torch.randn(11, 9)

    def run():
        enc.zero_grad()
        out = enc(ids)
        (out * weights).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in enc.named_parameters()}

    got, got_grads = run()
    _eager(monkeypatch)
    ref, ref_grads = run()
    assert torch.equal(got, ref)  # the pool picks the same values and positions: bit for bit
    for name in ref_grads:
        assert torch.equal(got_grads[name], ref_grads[name]), name


@needs_compiler
def test_bad_inputs_are_refused_with_the_problem_named():
    lib = native.library()
    assert lib is not None
    z = torch.zeros(2, 3, 16, dtype=torch.bfloat16)
    state = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="float32"):
        lib.forward(z, state.double(), torch.zeros(2, 3, 16), state, state, state.bfloat16(), None)
    with pytest.raises(ValueError, match="contiguous rows"):
        lib.forward(z, torch.zeros(2, 4, 3).transpose(1, 2), torch.zeros(2, 3, 16), state, state, state.bfloat16(), None)
    with pytest.raises(ValueError, match="float16"):
        lib.forward(z.half(), state, torch.zeros(2, 3, 16), state, state, state.half(), None)
    with pytest.raises(ValueError, match="expected 3 rows"):  # the C code would write past the end
        lib.forward(z, state, torch.zeros(2, 3, 16), torch.zeros(2, 2, 4), state, state.bfloat16(), None)
    with pytest.raises(ValueError, match="at most 3 rows"):
        lib.hidden_grad(state, torch.zeros(2, 4, 4, dtype=torch.bfloat16), state.bfloat16(), None, state.bfloat16())
    with pytest.raises(ValueError, match="counts.*add up to the 8 filters"):
        lib.max_pool(torch.zeros(2, 5, 8, dtype=torch.bfloat16), [1, 2], [4, 3])
    with pytest.raises(ValueError, match="bfloat16"):
        lib.max_pool(torch.zeros(2, 5, 8), [1, 2], [4, 4])


def _softmax_logits(rows=37, cols=77):
    """bfloat16 logits with accidental hits (-inf) in every row, and the true words' float32 logits."""
    torch.manual_seed(0)
    logits = (3 * torch.randn(rows, cols)).bfloat16()
    logits[torch.arange(rows), torch.randint(0, cols, (rows,))] = float("-inf")
    return torch.randn(rows), logits


@needs_compiler
def test_softmax_rows_give_log_softmax_and_the_rounded_softmax():
    lib = native.library()
    assert lib is not None
    first, logits = _softmax_logits()
    full = torch.cat([first.unsqueeze(1), logits.float()], dim=1).double()
    lse = lib.softmax_lse(first, logits)
    assert torch.allclose(lse.double(), torch.logsumexp(full, dim=1), rtol=1e-6, atol=1e-6)
    probs = logits.clone()
    sums = lib.softmax_grad_(probs, lse)
    expected = torch.softmax(full, dim=1)[:, 1:]
    assert torch.equal(probs == 0, expected == 0)  # the -inf entries (and only they) give exactly 0
    # each value is the softmax rounded to bfloat16: within half a bfloat16 step (2**-8 relative, plus float error) of it
    assert torch.all((probs.double() - expected).abs() <= expected * (2.0**-8 + 1e-6))
    assert torch.allclose(sums.double(), probs.double().sum(0), rtol=1e-6, atol=1e-9)
    nan_row = logits.clone()
    nan_row[3, 5] = float("nan")
    got = lib.softmax_lse(first, nan_row)
    assert torch.isnan(got[3]) and torch.equal(got[torch.arange(len(got)) != 3], lse[torch.arange(len(lse)) != 3])


@needs_compiler
def test_softmax_rows_do_not_depend_on_the_thread_count():
    lib = native.library()
    assert lib is not None
    first, logits = _softmax_logits(rows=50)
    lse = lib.softmax_lse(first, logits, threads=1)
    assert torch.equal(lse, lib.softmax_lse(first, logits, threads=3))
    one, three = logits.clone(), logits.clone()
    sums_one, sums_three = lib.softmax_grad_(one, lse, threads=1), lib.softmax_grad_(three, lse, threads=3)
    assert torch.equal(one, three)
    assert torch.allclose(sums_one, sums_three, rtol=1e-6)  # summed per part, then the parts: another order


@needs_compiler
def test_softmax_rows_refuse_bad_inputs():
    lib = native.library()
    assert lib is not None
    first, logits = _softmax_logits()
    with pytest.raises(ValueError, match="logits: expected a contiguous bfloat16"):
        lib.softmax_lse(first, logits.float())
    with pytest.raises(ValueError, match="logits: expected a contiguous bfloat16"):
        lib.softmax_lse(first, logits.t())
    with pytest.raises(ValueError, match=r"first: expected a contiguous float32 \[37\]"):
        lib.softmax_lse(first[:-1], logits)
    with pytest.raises(ValueError, match=r"lse: expected a contiguous float32 \[37\]"):
        lib.softmax_grad_(logits, first.double())


@needs_compiler
def test_sampled_softmax_gives_the_eager_loss_and_gradients_in_bf16(monkeypatch):
    from spacy_elmo.training.sampled_softmax import SampledSoftmaxLoss

    torch.manual_seed(0)
    rows, dim, vocab, k = 300, 16, 200, 64
    hidden = torch.randn(rows, dim, requires_grad=True)
    weight = (0.5 * torch.randn(vocab, dim)).requires_grad_()
    bias = torch.randn(vocab, requires_grad=True)
    targets, samples = torch.randint(0, vocab, (rows,)), torch.randint(0, vocab, (k,))  # accidental hits certain
    log_q = torch.randn(vocab)
    calls = []
    lib = native.library()
    assert lib is not None
    original = native.NativeKernels.softmax_lse

    def spy(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(native.NativeKernels, "softmax_lse", spy)

    def run():
        for x in (hidden, weight, bias):
            x.grad = None
        loss = SampledSoftmaxLoss.apply(hidden, weight, bias, targets, samples, log_q[targets], log_q[samples], torch.bfloat16)
        loss.backward()
        return [loss.detach(), hidden.grad, weight.grad, bias.grad]

    got = run()
    assert calls, "the compiled softmax was not used"
    _eager(monkeypatch)
    ref = run()
    assert abs(float(got[0] - ref[0])) < 1e-5 * float(ref[0])
    assert _relative(got[1], ref[1]) < 1e-3 and _relative(got[2], ref[2]) < 1e-3
    # the bias gradient: summed in float32 here, rounded to bfloat16 once more by the eager product
    assert _relative(got[3], ref[3]) < 4e-3


def test_without_a_compiler_training_falls_back_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "LOADER", native.KernelLoader(tmp_path))
    monkeypatch.setattr(build, "compiler", lambda: None)
    # the warning names every path that falls back, float32 inference's step included (before: bfloat16 only)
    with pytest.warns(UserWarning, match="no C compiler.*bfloat16 training, bfloat16 inference and float32 inference"):
        assert native.library() is None
    assert native.library() is None  # tried once per process, warned once
    stack = BiLstmStack(8, 12, 4, 1, 3.0, 3.0, False)
    stack.train_dtype = torch.bfloat16
    x = torch.randn(3, 5, 8, requires_grad=True)
    outs, _ = stack(x, torch.tensor([5, 2, 3]))
    outs[0].sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_the_environment_variable_turns_the_kernels_off(monkeypatch):
    monkeypatch.setenv(native.ENV, "0")
    assert native.library() is None


@needs_compiler
def test_build_is_cached_per_source_flags_and_cpu(tmp_path):
    build.load(tmp_path, native.NativeKernels)
    (first,) = (tmp_path / "native").glob("*.so")
    mtime = first.stat().st_mtime_ns
    build.load(tmp_path, native.NativeKernels)
    assert list((tmp_path / "native").glob("*.so")) == [first] and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert not list((tmp_path / "native").glob(".build-*"))  # no scratch folder left behind


@needs_compiler
@pytest.mark.parametrize("model", ["default", "fixture"])
def test_compiled_bf16_inference_step_gives_the_eager_outputs(model, monkeypatch):
    from spacy_elmo import load_bilm
    from spacy_elmo.models import default_model_path

    from .conftest import ALLENNLP

    bilm = load_bilm(default_model_path() if model == "default" else ALLENNLP)
    bilm.set_inference_precision("bfloat16")
    sentences = [
        "The quick brown fox jumped over the lazy dog near the river bank .".split(),
        "Deposits at the bank rose sharply last quarter".split(),
        ["Hi"],
        [],
    ]
    monkeypatch.setattr(bilm.token_encoder, "table_pooled", lambda ids: None)  # the step alone: both pool in bf16
    got = bilm.embed_sentences(sentences)
    _eager(monkeypatch)
    ref = bilm.embed_sentences(sentences)
    bilm.set_inference_precision("float32")
    exact = bilm.embed_sentences(sentences)
    for a, b, c in zip(got, ref, exact):
        assert a.shape == b.shape
        if b.size:  # as close to float32 as the eager step, and far closer to it than bfloat16 is to float32
            a_t, b_t, c_t = (torch.from_numpy(x) for x in (a, b, c))
            assert _relative(a_t, c_t) <= 1.05 * _relative(b_t, c_t) + 1e-6
            # the two bf16 paths round in different orders: their gap is a fraction of bf16's own error
            # that depends on the weights (0.27 of it with the default through leg 12), never near all of it
            assert _relative(a_t, b_t) <= 0.4 * _relative(b_t, c_t) + 1e-6


@needs_compiler
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_compiled_bf16_char_pooling_matches_the_convolutions(activation, monkeypatch):
    from spacy_elmo.kernels import bf16

    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (2, 5), (3, 6), (7, 7)), n_highway=1, output_dim=9, activation=activation)
    copies = bf16.Bf16WeightCache(bf16.derive_layouts).weights(enc)
    ids = torch.randint(1, 262, (13, 50))
    with torch.no_grad():
        exact = enc(ids)
        got = bf16.encode_tokens(enc, copies, ids)
        _eager(monkeypatch)
        ref = bf16.encode_tokens(enc, copies, ids)
    assert got.shape == ref.shape == exact.shape
    # one product over all widths rounds like one convolution per width: as close to float32
    assert _relative(got, exact) < 1e-2  # bfloat16 rounding (3e-3 here), nothing more
    assert _relative(got, exact) <= 1.5 * _relative(ref, exact) + 1e-6
    assert _relative(got, ref) < 2e-2


@needs_compiler
def test_loading_the_kernels_leaves_the_floating_point_state_alone():
    import numpy as np

    assert native.library() is not None
    # a library linked with -ffast-math turns on flush-to-zero for the whole process: subnormals vanish
    assert np.float64(5e-324) * np.float64(1.0) > 0
    assert float(torch.tensor([1e-40]) * 1.0) > 0
