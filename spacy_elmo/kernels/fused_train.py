"""Training-only recurrence of one :class:`~spacy_elmo.bilm.lstm.BiLstmLayer` with a hand-written backward.

Used when the stack's ``train_dtype`` is set (``precision="bf16"`` in training). The matrix
products run in ``train_dtype`` (bfloat16: the CPU's AMX / AVX512-BF16 kernels, which
accumulate in float32), with the weights cast once per call; everything elementwise runs in
float32: the nonlinearities, the cell state, the clipping. The gate pre-activations
(``x_t W_x + b`` for all steps at once, then ``+ h_{t-1} W_h`` per step) are accumulated in
float32 inside the products and rounded to ``train_dtype`` once. Over autograd this

* keeps no per-step graph: the forward writes each step's activations into packed
  ``[2, rows, ...]`` buffers (valid positions only, time-major), the backward walks them back;
* computes the weight gradients as one product over all steps (``[P, rows] x [rows, 4H]``)
  instead of one small product per step;
* casts each weight once per call; per step only what a product reads or writes changes dtype
  (the recurrent state and the projection's input on the way in, the gate pre-activations and
  the gradients on the way out).

With ``train_dtype=torch.float32`` the same code computes the float32 maths (tests compare it
to the autograd recurrence). Clipping follows ``clamp``'s gradient except at exactly the clip
value, where the value counts as clipped (a measure-zero difference).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import native


def packed_index(active: Sequence[int], n_steps: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, List[int]]:
    """(rows, steps, offsets): packed position ``k`` is (sorted) row ``rows[k]`` at step ``steps[k]``;
    step ``t`` occupies ``offsets[t] : offsets[t] + active[t]``."""
    counts = list(active[:n_steps])
    offsets = [0]
    for n in counts:
        offsets.append(offsets[-1] + n)
    rows = torch.cat([torch.arange(n) for n in counts]) if counts else torch.zeros(0, dtype=torch.long)
    steps = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts, dtype=torch.long))
    return rows.to(device), steps.to(device), offsets


class FusedLstmLayer(torch.autograd.Function):
    """``(inputs, w_input, bias, w_state, w_proj, h0, c0, ...) -> (outputs, h_final, c_final)``.

    ``inputs`` ``[2, N, D]`` are the layer's inputs packed time-major (valid positions only),
    ``N = sum(active)``; outputs ``[2, N, P]`` in the state's dtype, packed the same way.
    ``h0``/``c0`` get no gradient (training starts every batch from zeros).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        inputs: torch.Tensor,
        w_input: torch.Tensor,
        bias: torch.Tensor,
        w_state: torch.Tensor,
        w_proj: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        active: List[int],
        offsets: List[int],
        cell_clip: Optional[float],
        proj_clip: Optional[float],
        dtype: torch.dtype,
        last: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n_steps = len(offsets) - 1
        total = offsets[-1]
        cell, proj = w_proj.shape[1], w_proj.shape[2]
        device = inputs.device
        acc = c0.dtype  # the state's dtype (float32)
        compiled = native.library() if device.type == "cpu" and acc == torch.float32 else None
        c0 = c0.contiguous()
        ws, wp = w_state.to(dtype), w_proj.to(dtype)  # cast once per call, not per step
        # x_t and h_{t-1} side by side: both multiply the same gate gradients in the backward (one product)
        operands = torch.empty(2, total, inputs.shape[2] + proj, dtype=dtype, device=device)
        low_inputs, hidden_prev = operands.split([inputs.shape[2], proj], dim=2)
        low_inputs.copy_(inputs)
        wi = w_input.to(dtype)
        gate_inputs = _input_gates(low_inputs, wi, bias.to(dtype))  # x_t W_x + b, all steps at once
        gates = torch.empty(2, total, 4 * cell, dtype=acc, device=device)  # activated i, j, f, o
        cells = torch.empty(2, total, cell, dtype=acc, device=device)  # c_t (clipped)
        hidden = torch.empty(2, total, proj, dtype=dtype, device=device)  # h_t (clipped)
        outputs = torch.empty(2, total, cell, dtype=dtype, device=device)  # o * tanh(c_t), the projection's input
        tanh_cells = torch.empty(2, total, cell, dtype=acc, device=device)  # tanh(c_t), reused by the backward
        h_state, c_state = h0.to(dtype), c0
        for t in range(n_steps):
            n, start = active[t], offsets[t]
            span = slice(start, start + n)
            h_prev = h_state[:, :n]
            c_prev = c_state[:, :n]
            hidden_prev[:, span] = h_prev
            # z = x_t W_x + b + h_{t-1} W_h, accumulated in float32 inside the product, rounded once
            # in place: each step's slice of the input gates is read once, so it becomes z itself
            # (no new buffer, no copy of the slice before the product; the same sum)
            z = gate_inputs[:, span].baddbmm_(h_prev, ws)
            g, c_new, tc, m = gates[:, span], cells[:, span], tanh_cells[:, span], outputs[:, span]
            if compiled is not None:  # the same maths in one compiled pass
                compiled.forward(z, c_prev, g, c_new, tc, m, cell_clip)
            else:
                g.copy_(z)  # the nonlinearities in float32
                g[..., :cell].sigmoid_()
                g[..., cell : 2 * cell].tanh_()
                g[..., 2 * cell :].sigmoid_()
                i, j, f, o = g.chunk(4, dim=-1)
                torch.mul(f, c_prev, out=c_new)
                c_new.addcmul_(i, j)
                if cell_clip:
                    c_new.clamp_(-cell_clip, cell_clip)
                torch.tanh(c_new, out=tc)
                torch.mul(tc, o, out=m)
            h_new = hidden[:, span]
            torch.bmm(m, wp, out=h_new)
            if proj_clip:
                h_new.clamp_(-proj_clip, proj_clip)
            h_state, c_state = h_new, c_new
        ctx.save_for_backward(gates, cells, tanh_cells, hidden, operands, outputs, ws, wp, c0, wi)
        ctx.active, ctx.offsets, ctx.clips, ctx.dtype, ctx.compiled = active, offsets, (cell_clip, proj_clip), dtype, compiled
        ran = last >= 0  # each row's state at its last step; rows that never ran keep their initial state
        h_final, c_final = h0.clone(), c0.clone()
        h_final[:, ran] = hidden[:, last[ran]].to(h0.dtype)
        c_final[:, ran] = cells[:, last[ran]]
        ctx.mark_non_differentiable(h_final, c_final)
        return hidden.to(acc), h_final, c_final

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _gh: Any, _gc: Any) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        gates, cells, tanh_cells, hidden, operands, outputs, ws, wp, c0, wi = ctx.saved_tensors
        active, offsets, dtype = ctx.active, ctx.offsets, ctx.dtype
        cell_clip, proj_clip = ctx.clips
        cell = cells.shape[2]
        n_steps = len(offsets) - 1
        grad_z = torch.empty(2, offsets[-1], 4 * cell, dtype=dtype, device=gates.device)
        grad_h_all = torch.empty(2, offsets[-1], hidden.shape[2], dtype=dtype, device=gates.device)
        ws_t, wp_t = ws.transpose(1, 2), wp.transpose(1, 2)
        dh_next: Optional[torch.Tensor] = None  # [2, n_{t+1}, P]: gradient reaching h_t through step t+1
        dc_next: Optional[torch.Tensor] = None
        grad_out = grad_out.contiguous()
        if ctx.compiled is not None and grad_out.dtype == torch.float32:
            return _compiled_backward(ctx, ctx.compiled, grad_out)
        for t in range(n_steps - 1, -1, -1):
            n, start = active[t], offsets[t]
            span = slice(start, start + n)
            dh = grad_out[:, span]
            if dh_next is not None:
                dh = dh.clone()
                dh[:, : dh_next.shape[1]] += dh_next
            if proj_clip:  # clamp's gradient in one pass: zero where the value was clipped
                dh = torch.ops.aten.hardtanh_backward(dh, hidden[:, span].to(dh.dtype), -proj_clip, proj_clip)
            dh_low = grad_h_all[:, span]
            dh_low.copy_(dh)
            dm = torch.bmm(dh_low, wp_t).to(gates.dtype)  # [2, n, H]
            g = gates[:, span]
            i, j, f, o = g.chunk(4, dim=-1)
            c_new = cells[:, span]
            c_prev = c0[:, :n] if t == 0 else cells[:, offsets[t - 1] : offsets[t - 1] + n]
            tc = tanh_cells[:, span]
            d_o = dm * tc
            dc = dm.mul_(o)
            dc.addcmul_(dc, tc * tc, value=-1.0)  # dm * o * (1 - tanh(c)^2)
            if dc_next is not None:
                dc[:, : dc_next.shape[1]] += dc_next
            if cell_clip:
                dc = torch.ops.aten.hardtanh_backward(dc, c_new, -cell_clip, cell_clip)
            dz = grad_z[:, span]
            # sigmoid' = s - s^2 (i, f, o), tanh' = 1 - j^2:
            # dz_i = dc j i'; dz_j = dc i (1 - j^2); dz_f = dc c_prev f'; dz_o = d_o o'
            slopes = torch.addcmul(g[..., 2 * cell :], g[..., 2 * cell :], g[..., 2 * cell :], value=-1.0)  # f', o'
            torch.mul(dc * j, torch.addcmul(i, i, i, value=-1.0), out=dz[..., :cell])
            dci = dc * i
            torch.addcmul(dci, dci, j * j, value=-1.0, out=dz[..., cell : 2 * cell])
            torch.mul(dc * c_prev, slopes[..., :cell], out=dz[..., 2 * cell : 3 * cell])
            torch.mul(d_o, slopes[..., cell:], out=dz[..., 3 * cell :])
            dc_next = dc.mul_(f)
            dh_next = torch.bmm(dz, ws_t).to(gates.dtype)
        return _weight_grads(grad_z, grad_h_all, operands, outputs, wi, gates.dtype)


def _input_gates(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``inputs @ weight + bias`` (``[2, N, D] x [2, D, 4H] + [2, 4H]``) with the bias as one more row
    of the product (against a column of ones): the same sum, accumulated in float32 and rounded
    once, without first writing the bias into every one of the ``N`` output rows as
    ``baddbmm`` does (a broadcast copy as large as the output)."""
    ones = inputs.new_ones(inputs.shape[0], inputs.shape[1], 1)
    return torch.bmm(torch.cat([inputs, ones], dim=2), torch.cat([weight, bias.unsqueeze(1)], dim=1))


def _compiled_backward(ctx: Any, compiled: native.NativeKernels, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    """:meth:`FusedLstmLayer.backward` with each step's elementwise work in the compiled library."""
    gates, cells, tanh_cells, hidden, operands, outputs, ws, wp, c0, wi = ctx.saved_tensors
    active, offsets, dtype = ctx.active, ctx.offsets, ctx.dtype
    cell_clip, proj_clip = ctx.clips
    cell, total = cells.shape[2], offsets[-1]
    grad_z = torch.empty(2, total, 4 * cell, dtype=dtype, device=gates.device)
    grad_h_all = torch.empty(2, total, hidden.shape[2], dtype=dtype, device=gates.device)
    ws_t, wp_t = ws.transpose(1, 2), wp.transpose(1, 2)
    dc_buffers = torch.empty(2, 2, c0.shape[1], cell, dtype=gates.dtype, device=gates.device)  # ping-pong
    grad_bias = torch.zeros(2, 4 * cell, dtype=gates.dtype, device=gates.device)  # summed by the kernel
    dh_next: Optional[torch.Tensor] = None  # [2, n_{t+1}, P]: gradient reaching h_t through step t+1
    dc_next: Optional[torch.Tensor] = None
    for t in range(len(offsets) - 2, -1, -1):
        n, start = active[t], offsets[t]
        span = slice(start, start + n)
        dh = grad_h_all[:, span]
        compiled.hidden_grad(grad_out[:, span], dh_next, hidden[:, span], proj_clip, dh)
        dm = torch.bmm(dh, wp_t)  # [2, n, H] in the products' dtype
        c_prev = c0[:, :n] if t == 0 else cells[:, offsets[t - 1] : offsets[t - 1] + n]
        dc = dc_buffers[t % 2][:, :n]
        compiled.backward(
            dm, gates[:, span], cells[:, span], c_prev, tanh_cells[:, span], dc_next, cell_clip, grad_z[:, span], dc, grad_bias
        )
        dc_next = dc
        dh_next = torch.bmm(grad_z[:, span], ws_t)
    return _weight_grads(grad_z, grad_h_all, operands, outputs, wi, gates.dtype, grad_bias)


def _weight_grads(
    grad_z: torch.Tensor,
    grad_h_all: torch.Tensor,
    operands: torch.Tensor,
    outputs: torch.Tensor,
    wi: torch.Tensor,
    acc: torch.dtype,
    grad_bias: Optional[torch.Tensor] = None,
) -> Tuple[Optional[torch.Tensor], ...]:
    """The inputs', weights' and bias's gradients (the bias's unless given): one product over all
    steps each (float32 accumulation inside), in :meth:`FusedLstmLayer.backward`'s order.
    ``operands`` ``[2, N, D + P]``: each position's input and previous state side by side, so that
    both weights' gradients come from one product with the gate gradients (the same sums)."""
    if grad_bias is None:
        ones = torch.ones(2, 1, grad_z.shape[1], dtype=grad_z.dtype, device=grad_z.device)
        grad_bias = torch.bmm(ones, grad_z).squeeze(1).to(acc)
    both = torch.bmm(operands.transpose(1, 2), grad_z).to(acc)  # [2, D + P, 4H]
    grad_w_input, grad_w_state = both.split([wi.shape[1], operands.shape[2] - wi.shape[1]], dim=1)
    grad_w_proj = torch.bmm(outputs.transpose(1, 2), grad_h_all).to(acc)
    grad_inputs = torch.bmm(grad_z, wi.transpose(1, 2)).to(acc)
    return grad_inputs, grad_w_input, grad_bias, grad_w_state, grad_w_proj, None, None, None, None, None, None, None, None


def run_layer(
    layer: Any,
    inputs: torch.Tensor,
    active: List[int],
    n_steps: int,
    h: torch.Tensor,
    c: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    dtype: torch.dtype,
) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """The training counterpart of ``BiLstmStack._run_layer``: inputs ``[2, B, T, D]`` (rows
    sorted by length) -> outputs ``[2, B, T, P]`` (zeros at padding) and the final ``(h, c)``."""
    batch, width = inputs.shape[1], inputs.shape[2]
    rows, steps, offsets = packed_index(active, n_steps, inputs.device)
    packed = inputs[:, rows, steps]  # [2, N, D]
    run = (torch.tensor(active[:n_steps], dtype=torch.long).unsqueeze(1) > torch.arange(batch)).sum(0)  # steps per row
    starts = torch.tensor(offsets, dtype=torch.long)
    last = torch.where(run > 0, starts[(run - 1).clamp(min=0)] + torch.arange(batch), -1).to(inputs.device)
    hidden, h_final, c_final = FusedLstmLayer.apply(
        packed, layer.w_input, layer.bias, layer.w_state, layer.w_proj, h, c, active, offsets, cell_clip, proj_clip, dtype, last
    )
    # time-major like the autograd recurrence's output, so that strided ops that follow (dropout's
    # mask) see the same memory layout and draw the same random numbers in both paths
    out = hidden.new_zeros(width, 2, batch, hidden.shape[2])
    out = out.index_put((steps.unsqueeze(0), torch.arange(2, device=out.device).view(2, 1), rows.unsqueeze(0)), hidden)
    return out.permute(1, 2, 0, 3), (h_final, c_final)
