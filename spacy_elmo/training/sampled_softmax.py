"""The sampled-softmax loss as one autograd function: products in a low dtype, the rest fused.

Same maths as :meth:`BiLMLanguageModel._sampled_nll` (log-uniform candidates drawn by the
caller, the log-expected-count correction, accidental hits removed): the mean over rows of
``logsumexp(logits) - logits[:, 0]`` with ``logits = [true logit, sampled logits]``. What
changes is the work around it:

* the ``[rows, samples]`` product runs in ``dtype`` (bfloat16 on AMX), weights cast once;
* accidental hits (a row's target among the samples) are found by sorting the samples and
  searching each target, ``O((rows + samples) log samples)``, not a ``[rows x samples]`` mask;
* the backward reuses the forward's logits buffer in place (softmax minus the one-hot), with
  no separate log-softmax pass and no ``[rows, samples]`` temporaries beyond the low-dtype copy
  the products need.

The true logit (a ``[rows, P]`` dot product) and the loss stay in float32.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch


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
        logits = torch.empty(rows, 1 + len(samples), dtype=hidden.dtype, device=hidden.device)
        true_w = weight[targets]
        true_logit = (hidden * true_w).sum(-1) + bias[targets] - log_q_targets
        logits[:, 0] = true_logit
        # the sampled logits' bias rides in the product (one rounding to dtype, float32 accumulation)
        logits[:, 1:] = torch.addmm((bias[samples] - log_q_samples).to(dtype), low_hidden, low_samples.t())
        hit_rows, hit_cols = accidental_hits(targets, samples)
        logits[hit_rows, hit_cols + 1] = float("-inf")
        top = logits.amax(dim=1, keepdim=True)
        exp = logits.sub_(top).exp_()  # in place: the backward's softmax is this over its row sums
        sums = exp.sum(dim=1)
        loss = (top.squeeze(1) + sums.log() - true_logit).mean()
        ctx.save_for_backward(exp, sums, low_hidden, low_samples, hidden, true_w, targets, samples)
        ctx.dtype, ctx.vocab = dtype, weight.shape[0]
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        exp, sums, low_hidden, low_samples, hidden, true_w, targets, samples = ctx.saved_tensors
        rows = exp.shape[0]
        # d loss / d logits = (softmax - one_hot(0)) * grad / rows
        probs = exp.mul_((grad / rows) / sums.unsqueeze(1))
        d_true = probs[:, 0] - grad / rows  # [N]
        low_probs = probs[:, 1:].to(ctx.dtype)
        grad_hidden = torch.mm(low_probs, low_samples).to(hidden.dtype)
        grad_hidden.addcmul_(d_true.unsqueeze(1), true_w)
        grad_weight = torch.zeros(ctx.vocab, hidden.shape[1], dtype=hidden.dtype, device=hidden.device)
        grad_weight.index_add_(0, samples, torch.mm(low_probs.t(), low_hidden).to(hidden.dtype))
        grad_weight.index_add_(0, targets, hidden * d_true.unsqueeze(1))
        grad_bias = torch.zeros(ctx.vocab, dtype=hidden.dtype, device=hidden.device)
        ones = torch.ones(1, rows, dtype=ctx.dtype, device=hidden.device)
        grad_bias.index_add_(0, samples, torch.mm(ones, low_probs).squeeze(0).to(hidden.dtype))
        grad_bias.index_add_(0, targets, d_true)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None
