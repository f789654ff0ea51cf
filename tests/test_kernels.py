"""The shape-routed products and the fast tanh agree with plain torch to float rounding."""
import sys

import pytest
import torch

from spacy_elmo.kernels import matmul as kernels
from spacy_elmo.bilm.characters import TokenBatch

from .test_invariants import SENTENCES


@pytest.mark.parametrize("rows", [1, 2, 37, kernels.MIN_ROWS_MKL + 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_match_torch(rows, dtype):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows, 24, generator=g).to(dtype)
    w = torch.randn(2, 24, 40, generator=g).to(dtype)
    b = torch.randn(2, 40, generator=g).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    expected = (torch.bmm(x.float(), w.float()) + b.float().unsqueeze(1))
    with torch.inference_mode():
        assert torch.allclose(kernels.directional_matmul(x, w, b).float(), expected, atol=tol, rtol=tol)
        assert torch.allclose(kernels.directional_matmul(x, w).float(), expected - b.float().unsqueeze(1), atol=tol, rtol=tol)
        acc = torch.ones(2, rows, 40, dtype=dtype)
        assert kernels.directional_addmm_(acc, x, w, b) is acc
        assert torch.allclose(acc.float(), expected + 1, atol=tol, rtol=tol)
        assert torch.allclose(kernels.linear(x[0], w[0], b[0]).float(), expected[0], atol=tol, rtol=tol)
        assert torch.allclose(kernels.linear_t(x[0], w[0].t(), b[0]).float(), expected[0], atol=tol, rtol=tol)


@pytest.mark.parametrize("rows", [1, 3, kernels.MIN_ROWS_MKL + 1])
def test_product_gradients_match_finite_differences(rows):
    # the training path (autograd on): every product's gradient against central differences
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows, 3, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(2, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(2, 4, dtype=torch.float64, generator=g, requires_grad=True)
    acc = torch.randn(2, rows, 4, dtype=torch.float64, generator=g, requires_grad=True)
    fast = rows > 8  # random projections of the Jacobian: the full one is slow at hundreds of rows
    check = lambda f, *args: torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast)  # noqa: E731
    assert check(kernels.linear, x[0], w[0], b[0])
    assert check(lambda x0, w0: kernels.linear(x0, w0), x[0], w[0])
    assert check(lambda x0, w0, b0: kernels.linear_t(x0, w0.t(), b0), x[0], w[0], b[0])
    assert check(kernels.directional_matmul, x, w, b)
    assert check(lambda a, x_, w_, b_: kernels.directional_addmm_(a.clone(), x_, w_, b_), acc, x, w, b)


def test_float32_gradients_equal_torchs():
    g = torch.Generator().manual_seed(7)
    x0, w0, b0 = torch.randn(37, 24, generator=g), torch.randn(24, 40, generator=g), torch.randn(40, generator=g)
    upstream = torch.randn(37, 40, generator=g)
    grads = []
    for product in (kernels.linear, lambda x, w, b: x @ w + b):
        x, w, b = (t.clone().requires_grad_(True) for t in (x0, w0, b0))
        product(x, w, b).backward(upstream)
        grads.append((x.grad, w.grad, b.grad))
    for ours, reference in zip(*grads):
        assert torch.allclose(ours, reference, atol=1e-5, rtol=1e-5)


def test_fast_tanh_matches_torch():
    x = torch.linspace(-30, 30, 200001)
    assert (kernels.tanh_(x.clone()) - torch.tanh(x)).abs().max() < 3e-7


def test_skipping_boundary_steps_changes_no_kept_output(allennlp_bilm):
    batch = TokenBatch.from_sentences(SENTENCES[:9] + [[]])
    with torch.inference_mode():
        full = allennlp_bilm(batch)
        inner = allennlp_bilm(batch, boundaries=False)
    assert inner.shape == (full.shape[0], full.shape[1], full.shape[2] - 2, full.shape[3])
    for row, n in enumerate(batch.lengths.tolist()):  # n counts <S> and </S>
        kept = inner[:, row, : n - 2] - full[:, row, 1 : n - 1]
        assert kept.numel() == 0 or kept.abs().max() < 1e-6
        assert not inner[:, row, n - 2 :].any()  # </S> and padding are zero
    assert batch.lengths.tolist()[-1] == 2  # the empty sentence is covered


def _fragment_heap(mb: int) -> bytearray:
    """Allocate ``mb`` MB in 100 KB heap blocks and free all but the last (which pins the heap top)."""
    blocks = [bytearray(100_000) for _ in range(mb * 10)]
    last = blocks[-1]
    del blocks
    return last


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_release_free_memory_returns_freed_heap_pages_and_can_be_switched_off():
    from spacy_elmo.bilm import memory

    if memory._trim_function() is None:
        pytest.skip("this C library has no malloc_trim")
    try:
        memory.set_release_free_memory(False)
        memory.release_free_memory()
        pinned = _fragment_heap(300)
        before = memory._resident_mb()
        memory.release_free_memory()  # switched off: nothing is returned
        assert memory._resident_mb() > before - 50
        memory.set_release_free_memory(True)
        memory._baseline_mb = before - 300  # as if resident memory had grown by 300 MB since it last acted
        memory.release_free_memory()
        assert memory._resident_mb() < before - 200, (before, memory._resident_mb())
        del pinned
    finally:
        memory.set_release_free_memory(True)
        memory._baseline_mb = None


def test_narrow_float32_products_go_to_mkl_on_intel_and_wide_ones_to_onednn(monkeypatch):
    if not kernels.onednn_available():
        pytest.skip("this torch build has no oneDNN linear")
    calls = []
    real = kernels._ONEDNN
    monkeypatch.setattr(kernels, "_ONEDNN", lambda *a: calls.append(a[1].shape) or real(*a))
    x, narrow, wide = torch.randn(8, 64), torch.randn(64, 32), torch.randn(64, 2048)
    with torch.inference_mode():
        for intel, expected in ((True, [(2048, 64)]), (False, [(32, 64), (2048, 64)])):
            monkeypatch.setattr(kernels, "_INTEL", intel)
            calls.clear()
            assert torch.allclose(kernels.linear(x, narrow), x @ narrow, atol=1e-5)
            assert torch.allclose(kernels.linear(x, wide), x @ wide, atol=1e-5)
            assert calls == expected
            calls.clear()
            kernels.linear(x.bfloat16(), narrow.bfloat16())  # bfloat16 stays with oneDNN wherever it takes bfloat16
            assert calls == ([(32, 64)] if kernels._ONEDNN_BF16 else [])


def test_bfloat16_products_leave_onednn_where_it_has_no_bfloat16(monkeypatch):
    # before: an AVX2-only CPU routed bfloat16 products to oneDNN, which has no bf16 inner product
    # there ("could not create a primitive descriptor"), and the component's bfloat16 path failed
    if not kernels.onednn_available():
        pytest.skip("this torch build has no oneDNN linear")

    def no_bfloat16(a, *rest):
        if a.dtype == torch.bfloat16:
            raise RuntimeError("could not create a primitive descriptor for the inner product forward propagation primitive")
        return real(a, *rest)

    real = kernels._ONEDNN
    monkeypatch.setattr(kernels, "_ONEDNN", no_bfloat16)
    assert not kernels._onednn_takes_bfloat16()
    monkeypatch.setattr(kernels, "_ONEDNN_BF16", False)
    x, w = torch.randn(8, 64).bfloat16(), torch.randn(64, 2048).bfloat16()
    with torch.inference_mode():
        assert torch.allclose(kernels.linear(x, w).float(), x.float() @ w.float(), atol=0.5, rtol=2e-2)
