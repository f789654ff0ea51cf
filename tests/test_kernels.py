"""The shape-routed products and the fast tanh agree with plain torch to float rounding."""
import sys

import pytest
import torch

from spacy_elmo.bilm import kernels
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


def test_products_keep_gradients():
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    kernels.linear(x, w).sum().backward()
    assert x.grad is not None and w.grad is not None


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
