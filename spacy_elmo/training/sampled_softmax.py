"""The sampled-softmax loss as one autograd function: products in a low dtype, the rest fused.

Same maths as :meth:`BiLMLanguageModel._sampled_nll` (log-uniform candidates drawn by the
caller, the log-expected-count correction, accidental hits removed): the mean over rows of
``-log_softmax(logits)[:, 0]`` with ``logits = [true logit, sampled logits]``. What
changes is the work around it:

* the ``[rows, samples]`` product runs in ``dtype`` (bfloat16: AMX or AVX512-BF16), weights cast once;
* accidental hits (a row's target among the samples) are found by sorting the samples and
  searching each target, ``O((rows + samples) log samples)``, not a ``[rows x samples]`` mask;
* the normalisation is one row-wise ``log_softmax`` (each row's max, sum of exponentials and
  output in one pass while the row is in cache; four passes over the whole ``[rows, samples]``
  buffer before); the backward exponentiates its output in place and rounds the softmax to
  ``dtype`` unscaled, the loss's scale (``grad / rows``) going onto the products' small outputs,
  with no ``[rows, samples]`` temporaries beyond the low-dtype copy the products need;
* in bfloat16 on the CPU with the compiled kernels (:mod:`..kernels.native`), not even that:
  the accidental hits become ``-inf`` in the product's bfloat16 output, the forward takes each
  row's log-sum-exp from it and the float32 true logit in one pass, and the backward overwrites
  it with the softmax rounded to bfloat16 and sums that over rows in float32 (the sampled words'
  bias gradient) in one more. Same values to float rounding; the bias gradient skips the eager
  code's last rounding to bfloat16. Elsewhere (no compiler, float32, a GPU) the eager code runs.

The true logit (a ``[rows, P]`` dot product) and the loss stay in float32.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from ..kernels import native


def accidental_hits(targets: torch.Tensor, samples: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` of every pair with ``targets[row] == samples[col]`` (samples may repeat)."""
    ordered, order = torch.sort(samples)
    start = torch.searchsorted(ordered, targets, right=False)
    stop = torch.searchsorted(ordered, targets, right=True)
    counts = stop - start
    rows = torch.repeat_interleave(torch.arange(len(targets), device=targets.device), counts)
    if rows.numel() == 0:
        return rows, rows
    first = torch.repeat_interleave(start, counts)
    within = torch.arange(rows.numel(), device=targets.device) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return rows, order[first + within]


class SampledSoftmaxLoss(torch.autograd.Function):
    """``(hidden [N, P], weight [V, P], bias [V], targets [N], samples [K], log_q_targets [N],
    log_q_samples [K], dtype) -> mean NLL`` (float32 scalar); gradients for hidden, weight, bias."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        samples: torch.Tensor,
        log_q_targets: torch.Tensor,
        log_q_samples: torch.Tensor,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        rows = hidden.shape[0]
        low_hidden = hidden.to(dtype)
        low_samples = weight[samples].to(dtype)  # [K, P]
        true_w = weight[targets]
        true_logit = (hidden * true_w).sum(-1) + bias[targets] - log_q_targets
        # the sampled logits' bias rides in the product (one rounding to dtype, float32 accumulation)
        sampled = torch.addmm((bias[samples] - log_q_samples).to(dtype), low_hidden, low_samples.t())
        hit_rows, hit_cols = accidental_hits(targets, samples)
        ctx.dtype, ctx.vocab = dtype, weight.shape[0]
        compiled = _compiled(sampled, true_logit)
        ctx.compiled = compiled
        if compiled is not None:  # the rows in one compiled pass over the low-dtype logits
            sampled[hit_rows, hit_cols] = float("-inf")
            true_logit = true_logit.contiguous()
            lse = compiled.softmax_lse(true_logit, sampled)
            ctx.save_for_backward(sampled, lse, true_logit, low_hidden, low_samples, hidden, true_w, targets, samples)
            return (lse - true_logit).mean()
        logits = torch.empty(rows, 1 + len(samples), dtype=hidden.dtype, device=hidden.device)
        logits[:, 0] = true_logit
        logits[:, 1:] = sampled
        logits[hit_rows, hit_cols + 1] = float("-inf")
        log_probs = torch.log_softmax(logits, dim=1)  # one row-wise pass (max, sum of exp, write), in cache
        loss = -log_probs[:, 0].mean()
        ctx.save_for_backward(log_probs, low_hidden, low_samples, hidden, true_w, targets, samples)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        if ctx.compiled is not None:
            return _compiled_backward(ctx, grad)
        log_probs, low_hidden, low_samples, hidden, true_w, targets, samples = ctx.saved_tensors
        rows = log_probs.shape[0]
        # d loss / d logits = (softmax - one_hot(0)) * scale: the softmax rounded to dtype once, unscaled,
        # and the scale applied to the products' small outputs instead of the [rows, samples] probabilities
        scale = grad / rows
        probs = log_probs.exp_()  # in place: the buffer is this function's own
        d_true = (probs[:, 0] - 1) * scale  # [N]
        low_probs = probs[:, 1:].to(ctx.dtype)
        ones = torch.ones(1, rows, dtype=ctx.dtype, device=hidden.device)
        column_sums = torch.mm(ones, low_probs).squeeze(0).to(hidden.dtype)
        return _gradients(ctx, scale, d_true, low_probs, low_hidden, low_samples, hidden, true_w, targets, samples, column_sums)


def _gradients(
    ctx: Any,
    scale: torch.Tensor,
    d_true: torch.Tensor,
    low_probs: torch.Tensor,
    low_hidden: torch.Tensor,
    low_samples: torch.Tensor,
    hidden: torch.Tensor,
    true_w: torch.Tensor,
    targets: torch.Tensor,
    samples: torch.Tensor,
    column_sums: torch.Tensor,
) -> Tuple[Optional[torch.Tensor], ...]:
    """The gradients of hidden, weight and bias from the sampled words' softmax ``low_probs``
    (``[rows, samples]`` in ``dtype``, unscaled) and its sums over rows, and the true words' ``d_true``."""
    grad_hidden = torch.mm(low_probs, low_samples).to(hidden.dtype).mul_(scale)
    grad_hidden.addcmul_(d_true.unsqueeze(1), true_w)
    grad_weight = torch.zeros(ctx.vocab, hidden.shape[1], dtype=hidden.dtype, device=hidden.device)
    grad_weight.index_add_(0, samples, torch.mm(low_probs.t(), low_hidden).to(hidden.dtype).mul_(scale))
    grad_weight.index_add_(0, targets, hidden * d_true.unsqueeze(1))
    grad_bias = torch.zeros(ctx.vocab, dtype=hidden.dtype, device=hidden.device)
    grad_bias.index_add_(0, samples, column_sums.mul_(scale))
    grad_bias.index_add_(0, targets, d_true)
    return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def _compiled(sampled: torch.Tensor, true_logit: torch.Tensor) -> Optional[native.NativeKernels]:
    """The compiled kernels where they take these logits (bfloat16 on the CPU), else ``None``."""
    if sampled.dtype != torch.bfloat16 or sampled.device.type != "cpu" or true_logit.dtype != torch.float32:
        return None
    return native.library()


def _compiled_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    """:meth:`SampledSoftmaxLoss.backward` with the softmax made by the compiled kernel: it rounds
    each probability to ``dtype`` over the saved logits (in place) and sums them over rows (the
    sampled words' bias gradient, accumulated in float32)."""
    low_probs, lse, true_logit, low_hidden, low_samples, hidden, true_w, targets, samples = ctx.saved_tensors
    rows = low_probs.shape[0]
    scale = grad / rows
    column_sums = ctx.compiled.softmax_grad_(low_probs, lse)  # low_probs now holds the softmax
    d_true = (torch.exp(true_logit - lse) - 1) * scale  # [N]
    return _gradients(ctx, scale, d_true, low_probs, low_hidden, low_samples, hidden, true_w, targets, samples, column_sums)
