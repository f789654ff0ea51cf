"""Character convolutions + max-pooling as one product: bf16 training uses it whole, bf16 inference its layouts.

All filter widths run as a single matrix product: the character vectors are unfolded into
windows of the widest filter (``[tokens, positions, width x char_dim]``, zero-padded on the
right), every filter is zero-padded to that width, and one ``[tokens x positions, width x
char_dim] x [width x char_dim, n_filters]`` product gives every filter at every position. Each
filter then keeps the maximum over its own valid positions. The backward scatters the pooled
gradients to the winning positions and makes the weight and input gradients with two more
products. Compared with one convolution per width (and ``amax``'s backward, which compares
the whole ``[tokens, filters, positions]`` output against its maxima) this is a handful of big
products on the bf16 matrix engines and almost no elementwise work.

With ``dtype=torch.float32`` (or float64) the result equals the convolutions' to rounding.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import nn

from . import native


def stack_filter_weights(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[width x char_dim, n_filters]``: the convolutions' weights (``[n, char_dim, width]``
    each) side by side, each zero-padded to the widest; row ``s * char_dim + c`` is character
    ``c`` at offset ``s``."""
    widest = max(w.shape[2] for w in weights)
    blocks = []
    for w in weights:
        w = nn.functional.pad(w, (0, widest - w.shape[2]))  # [n, char_dim, widest]
        blocks.append(w.permute(2, 1, 0).reshape(-1, w.shape[0]))  # [widest * char_dim, n]
    return torch.cat(blocks, dim=1)


def stacked_filters(convs: Sequence[nn.Conv1d]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``([width x char_dim, n_filters] weight, [n_filters] bias)`` of all filters (see
    :func:`stack_filter_weights`)."""
    biases = [conv.bias for conv in convs]
    if any(b is None for b in biases):
        raise ValueError("the char convolutions need a bias (nn.Conv1d(..., bias=True))")
    return stack_filter_weights([conv.weight for conv in convs]), torch.cat([b for b in biases if b is not None])


def char_windows(chars: torch.Tensor, widest: int) -> torch.Tensor:
    """``[N, L, C]`` -> ``[N, L, widest x C]``: at each position the next ``widest`` characters
    (zeros past the end), the rows the stacked filters multiply."""
    length = chars.shape[1]
    padded = nn.functional.pad(chars, (0, 0, 0, widest - 1))  # [N, L + W - 1, C]
    return torch.cat([padded[:, s : s + length] for s in range(widest)], dim=2)


class CharConvMaxPool(torch.autograd.Function):
    """``(chars [N, L, C], weight [W*C, F], widths, counts, dtype) -> [N, F]`` max over positions."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, chars: torch.Tensor, weight: torch.Tensor, widths: List[int], counts: List[int], dtype: torch.dtype
    ) -> torch.Tensor:
        tokens, length, channels = chars.shape
        widest = max(widths)
        windows = char_windows(chars.to(dtype), widest)  # [N, L, W*C]
        low_weight = weight.to(dtype)
        out = torch.mm(windows.view(-1, windows.shape[2]), low_weight).view(tokens, length, -1)  # [N, L, F]
        compiled = native.library() if dtype == torch.bfloat16 and out.device.type == "cpu" and length >= widest else None
        if compiled is not None:  # one pass over out instead of a strided bfloat16 max per width
            values, winners = compiled.max_pool(out, widths, counts)
        else:
            pooled, where = [], []
            start = 0
            for width, count in zip(widths, counts):
                best, index = out[:, : length - width + 1, start : start + count].max(dim=1)
                pooled.append(best)
                where.append(index)
                start += count
            values, winners = torch.cat(pooled, dim=1), torch.cat(where, dim=1)
        ctx.save_for_backward(windows, low_weight, winners)
        ctx.shape = (tokens, length, channels, widest)
        return values.to(chars.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        windows, low_weight, where = ctx.saved_tensors
        tokens, length, channels, widest = ctx.shape
        n_filters = low_weight.shape[1]
        flat = torch.zeros(tokens * length, n_filters, dtype=low_weight.dtype, device=grad.device)
        # each pooled gradient goes to its winning position (a flat index_put: several times faster than scatter_)
        winners = (torch.arange(tokens, device=grad.device).unsqueeze(1) * length + where) * n_filters
        flat.view(-1)[(winners + torch.arange(n_filters, device=grad.device)).view(-1)] = grad.to(low_weight.dtype).reshape(-1)
        grad_weight = torch.mm(windows.view(-1, windows.shape[2]).t(), flat).to(grad.dtype)
        grad_windows = torch.mm(flat, low_weight.t()).view(tokens, length, widest, channels).to(grad.dtype)
        grad_chars = grad_windows[:, :, 0].clone()
        for s in range(1, widest):  # overlap-add each offset's window back onto its characters
            grad_chars[:, s:] += grad_windows[:, : length - s, s]
        return grad_chars, grad_weight, None, None, None


def conv_max_pool(char_vectors: torch.Tensor, convs: Sequence[nn.Conv1d], dtype: torch.dtype) -> torch.Tensor:
    """``max over positions of conv(char_vectors)`` for every filter, ``[N, L, C] -> [N, F]`` (bias included)."""
    weight, bias = stacked_filters(convs)
    widths = [conv.kernel_size[0] for conv in convs]
    counts = [conv.out_channels for conv in convs]
    return CharConvMaxPool.apply(char_vectors, weight, widths, counts, dtype) + bias
