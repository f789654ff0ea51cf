"""Forward and backward stacks of projected LSTMs with cell/projection clipping (ELMo's biLM).

Both directions run in the same loop: direction is the leading dimension of every weight
(``[2, ...]``, 0 = forward LM, 1 = backward LM) so each time step is one batched matmul.
The backward direction sees each row reversed *within its own length*, so padding is never
fed to either LSTM. Rows are sorted by length and the active batch shrinks as short rows end,
which also leaves every row's state at its last valid step (needed for ``stateful`` mode).

Per layer, per direction, per step (the TensorFlow ``LSTMCell`` with ``num_proj``)::

    z = x_t W_x + h_{t-1} W_h + b          # gate blocks in TF order: i, j, f, o
    c_t = clip(sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(j), cell_clip)
    h_t = clip((sigmoid(o) * tanh(c_t)) W_p, proj_clip)

``b`` already includes TensorFlow's run-time forget bias of +1. With ``residual``, layers after
the first output ``h_t + x_t`` (the recurrent state stays ``h_t``).
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple, cast

import torch
from torch import nn
from torch.nn import functional as F

from ..kernels import bf16, fused_train, int8, matmul, native

LstmState = Tuple[torch.Tensor, torch.Tensor]  # h [L, 2, B, P], c [L, 2, B, H]
TokenTypes = Tuple[torch.Tensor, torch.Tensor]  # the distinct token vectors [U, D], each position's row [B, T]


class BiLstmLayer(nn.Module):
    """Weights of one layer for both directions."""

    def __init__(self, input_dim: int, cell_dim: int, proj_dim: int) -> None:
        super().__init__()
        self.input_dim, self.cell_dim, self.proj_dim = input_dim, cell_dim, proj_dim
        self.w_input = nn.Parameter(torch.empty(2, input_dim, 4 * cell_dim))
        self.w_state = nn.Parameter(torch.empty(2, proj_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * cell_dim))
        self.w_proj = nn.Parameter(torch.empty(2, cell_dim, proj_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound_in = 1.0 / (self.input_dim + self.proj_dim) ** 0.5
        nn.init.uniform_(self.w_input, -bound_in, bound_in)
        nn.init.uniform_(self.w_state, -bound_in, bound_in)
        nn.init.uniform_(self.w_proj, -1.0 / self.cell_dim**0.5, 1.0 / self.cell_dim**0.5)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[:, 2 * self.cell_dim : 3 * self.cell_dim] = 1.0  # forget gate


class BiLstmStack(nn.Module):
    """``n_layers`` of :class:`BiLstmLayer`, forward and backward, with optional residuals."""

    def __init__(
        self,
        input_dim: int,
        cell_dim: int,
        proj_dim: int,
        n_layers: int,
        cell_clip: Optional[float],
        proj_clip: Optional[float],
        residual: bool,
    ) -> None:
        super().__init__()
        self.cell_dim, self.proj_dim, self.n_layers = cell_dim, proj_dim, n_layers
        self.cell_clip, self.proj_clip, self.residual = cell_clip, proj_clip, residual
        self.dropout = 0.0  # on each layer's input, in training mode only
        #: under autograd, run the recurrence with products in this dtype (see :mod:`.fused_train`)
        self.train_dtype: Optional[torch.dtype] = None
        self.layers = nn.ModuleList(BiLstmLayer(input_dim if i == 0 else proj_dim, cell_dim, proj_dim) for i in range(n_layers))

    def zero_state(self, batch_size: int, like: torch.Tensor) -> LstmState:
        h = like.new_zeros(self.n_layers, 2, batch_size, self.proj_dim)
        c = like.new_zeros(self.n_layers, 2, batch_size, self.cell_dim)
        return h, c

    def forward(
        self,
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        state: Optional[LstmState] = None,
        skip_final: bool = False,
        bf16_products: Optional[bf16.Bf16WeightCache] = None,
        token_types: Optional[TokenTypes] = None,
        int8_products: Optional[int8.Int8Products] = None,
    ) -> Tuple[List[torch.Tensor], LstmState]:
        """Run both directions over a padded batch.

        inputs: ``[B, T, D]`` token vectors (the same input for both directions).
        lengths: ``[B]`` valid lengths (every row's positions ``>= length`` are padding).
        state: optional initial ``(h, c)`` per row, ``[L, 2, B, P]`` and ``[L, 2, B, H]``;
            zeros when omitted.
        skip_final: leave out each direction's last step (the forward LM at a row's last
            position, the backward LM at its first): when those positions are ``</S>``/``<S>``
            and are thrown away, this saves ``1 / length`` of the work. Their outputs are then
            incomplete (zero in that direction's half) and the final state is not meaningful.
        bf16_products: at inference (no autograd), run the products in bfloat16 with the
            copies this cache holds of the stack's weights; state and outputs stay float32
            (see :mod:`spacy_elmo.kernels.bf16`).
        int8_products: at inference, run the products in int8 with the quantized weights it
            holds (see :mod:`spacy_elmo.kernels.int8`); ignored under autograd.
        token_types: ``(vectors [U, D], index [B, T])`` with ``inputs == vectors[index]``: at
            float32 inference the first layer then projects each distinct token once (a word
            that occurs many times in the batch costs one row of ``x W_x``), same outputs.
        Returns the ``L`` layer outputs ``[B, T, 2P]`` (forward half first, zeros at padding)
        and the final state, each row's state at its last valid step.
        """
        batch, width, _ = inputs.shape
        lengths = lengths.to(torch.long).cpu()
        if batch == 0 or width == 0:
            empty = inputs.new_zeros(batch, width, 2 * self.proj_dim)
            return [empty for _ in self.layers], state or self.zero_state(batch, inputs)
        order = torch.argsort(lengths, descending=True, stable=True)
        unorder = torch.argsort(order)
        sorted_lengths = lengths[order]
        # active[t] = number of (sorted) rows still running at step t
        steps = torch.arange(width)
        run_lengths = (sorted_lengths - 1).clamp_(min=0) if skip_final else sorted_lengths
        active = (run_lengths.unsqueeze(0) > steps.unsqueeze(1)).sum(1).tolist()
        n_steps = int(run_lengths[0])
        # reverse each row within its length: position t <-> length - 1 - t
        rev = torch.where(
            steps.unsqueeze(0) < sorted_lengths.unsqueeze(1),
            sorted_lengths.unsqueeze(1) - 1 - steps.unsqueeze(0),
            steps.unsqueeze(0),
        ).to(inputs.device)
        x = inputs[order.to(inputs.device)]
        x_rev = torch.gather(x, 1, rev.unsqueeze(-1).expand_as(x))
        layer_input = torch.stack([x, x_rev])  # [2, B, T, D]

        if state is None:
            h0, c0 = self.zero_state(batch, inputs)
        else:
            h0, c0 = (s.index_select(2, order.to(s.device)) for s in state)
        outputs: List[torch.Tensor] = []
        final_h, final_c = [], []
        bf16_weights = bf16_products.weights(self) if bf16_products is not None and not torch.is_grad_enabled() else None
        int8_weights = int8_products.lstm.weights(self) if int8_products is not None and not torch.is_grad_enabled() else None
        for index, layer in enumerate(cast(Sequence[BiLstmLayer], self.layers)):  # a ModuleList types its items as Module
            run_input = layer_input
            if self.training and self.dropout > 0:
                run_input = F.dropout(layer_input, self.dropout, training=True)
            types = _sorted_types(token_types, order, rev) if index == 0 and token_types is not None else None
            if int8_weights is not None and int8_products is not None:
                out, (h, c) = int8.run_layer(
                    self,
                    layer,
                    int8_weights,
                    f"layers.{index}.",
                    run_input,
                    active,
                    n_steps,
                    h0[index],
                    c0[index],
                    int8_products.levels,
                    types,
                )
            elif bf16_weights is not None:
                out, (h, c) = bf16.run_layer(
                    self, layer, bf16_weights, f"layers.{index}.", run_input, active, n_steps, h0[index], c0[index], types
                )
            else:
                out, (h, c) = self._run_layer(layer, run_input, active, n_steps, h0[index], c0[index], types)
            if self.residual and index > 0:
                out = out + layer_input  # zero at padding, like the LSTM output
            final_h.append(h)
            final_c.append(c)
            outputs.append(out)
            layer_input = out
        results = []
        for out in outputs:
            fwd, bwd = out[0], torch.gather(out[1], 1, rev.unsqueeze(-1).expand_as(out[1]))
            results.append(torch.cat([fwd, bwd], dim=-1)[unorder.to(out.device)])
        unorder_d = unorder.to(inputs.device)
        final = (torch.stack(final_h).index_select(2, unorder_d), torch.stack(final_c).index_select(2, unorder_d))
        return results, final

    #: at inference the input projections are made for a group of steps at a time, at most this
    #: many values (64 MB in float32) per group, so long batches do not hold all of them at once
    projection_chunk_values = 1 << 24

    def _input_projections(
        self, layer: BiLstmLayer, inputs: torch.Tensor, active: List[int], n_steps: int, with_bias: bool = True
    ) -> Iterator[torch.Tensor]:
        """``x_t W_x (+ b)`` of every valid position: yields step t's ``[2, active[t], 4H]``.

        Only valid positions are projected, packed time-major (sorted rows make each step's
        active rows a prefix), so padding costs nothing. Consecutive steps share one matmul; at
        inference a group holds at most :attr:`projection_chunk_values` values (under autograd
        all steps are one group).
        """
        counts = active[:n_steps]
        max_rows = max(1, self.projection_chunk_values // (2 * layer.w_input.shape[2]))
        if torch.is_grad_enabled():
            max_rows = sum(counts)
        for group, rows, cols in matmul.packed_step_groups(counts, max_rows, inputs.device):
            projected = matmul.directional_matmul(inputs[:, rows, cols], layer.w_input, layer.bias if with_bias else None)
            yield from projected.split(group, dim=1)
            del projected

    def _run_layer(
        self,
        layer: BiLstmLayer,
        inputs: torch.Tensor,
        active: List[int],
        n_steps: int,
        h: torch.Tensor,
        c: torch.Tensor,
        types: Optional[TokenTypes] = None,
    ) -> Tuple[torch.Tensor, LstmState]:
        """inputs ``[2, B, T, D]`` -> outputs ``[2, B, T, P]`` and the final ``(h, c)``; ``types``:
        the distinct input vectors and, per direction, each sorted row's (see :func:`_sorted_types`)."""
        compiled = None
        if not torch.is_grad_enabled() and inputs.device.type == "cpu" and inputs.dtype == torch.float32 and layer.bias.is_contiguous():
            compiled = native.library()
        if compiled is not None:
            return self._run_layer_compiled(layer, compiled, inputs, active, n_steps, h, c, types)
        if not torch.is_grad_enabled():  # the bias is added by each step's recurrent product there
            stream = self._input_projections(layer, inputs, active, n_steps, with_bias=False)
            return self._run_layer_inplace(layer, stream, inputs.shape[2], active, h, c)
        if self.train_dtype is not None:
            return fused_train.run_layer(layer, inputs, active, n_steps, h, c, self.cell_clip, self.proj_clip, self.train_dtype)
        projected = list(self._input_projections(layer, inputs, active, n_steps))
        batch, width = inputs.shape[1], inputs.shape[2]
        steps: List[torch.Tensor] = []
        cell_clip, proj_clip = self.cell_clip, self.proj_clip
        for t in range(n_steps):
            n = active[t]
            h_prev, c_prev = (h, c) if n == batch else (h[:, :n], c[:, :n])
            gates = torch.baddbmm(projected[t], h_prev, layer.w_state)
            i, j, f, o = gates.chunk(4, dim=-1)
            c_new = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(j)
            if cell_clip:
                c_new = c_new.clamp(-cell_clip, cell_clip)
            h_new = torch.bmm(torch.sigmoid(o) * torch.tanh(c_new), layer.w_proj)
            if proj_clip:
                h_new = h_new.clamp(-proj_clip, proj_clip)
            if n == batch:
                h, c = h_new, c_new
                steps.append(h_new)
            else:
                h = torch.cat([h_new, h[:, n:]], dim=1)
                c = torch.cat([c_new, c[:, n:]], dim=1)
                steps.append(F.pad(h_new, (0, 0, 0, batch - n)))
        if n_steps < width:
            steps.extend([h.new_zeros(2, batch, self.proj_dim)] * (width - n_steps))
        out = torch.stack(steps)  # [T, 2, B, P]
        return out.permute(1, 2, 0, 3), (h, c)

    #: the first layer's input products are made once per distinct token when the batch has at
    #: most this share of distinct tokens among its positions, and they fit in
    #: :attr:`projection_chunk_values`
    type_projection_share = 0.8

    def _run_layer_compiled(
        self,
        layer: BiLstmLayer,
        compiled: native.NativeKernels,
        inputs: torch.Tensor,
        active: List[int],
        n_steps: int,
        h: torch.Tensor,
        c: torch.Tensor,
        types: Optional[TokenTypes],
    ) -> Tuple[torch.Tensor, LstmState]:
        """Float32 inference with each step's elementwise work in one compiled pass: one product
        per direction for ``h W_h``, the kernel sums ``x W_x + h W_h + b`` (each direction's
        results read where the products wrote them), applies the gates and updates the cell in
        place. Same maths as :meth:`_run_layer_inplace` to float rounding."""
        batch, width = h.shape[1], inputs.shape[2]
        h, c = h.clone(), c.clone()
        out = h.new_zeros(width, 2, batch, self.proj_dim)
        m = h.new_empty(2, batch, self.cell_dim)
        cell_clip, proj_clip = self.cell_clip, self.proj_clip
        w_state, w_proj = layer.w_state, layer.w_proj
        for t, (step, step_rows) in enumerate(self._step_inputs(layer, inputs, active, n_steps, types)):
            n = active[t]
            recurrent = [matmul.linear(h[d, :n], w_state[d]) for d in (0, 1)]
            compiled.infer_step(layer.bias, step, recurrent, c[:, :n], m[:, :n], cell_clip, step_rows=step_rows)
            for d in (0, 1):
                h_new = matmul.linear(m[d, :n], w_proj[d])
                if proj_clip:
                    h_new.clamp_(-proj_clip, proj_clip)
                out[t, d, :n] = h_new
                h[d, :n] = h_new
            del step, step_rows, recurrent
        return out.permute(1, 2, 0, 3), (h, c)

    #: the first layer's input products are made once per distinct token when the batch has at
    #: most this share of distinct tokens among its positions and they hold at most
    #: :attr:`type_projection_values` values (128 MB in float32)
    type_projection_share = 0.8
    type_projection_values = 1 << 25
    #: the compiled path's input products are made for a group of steps at a time, at most this
    #: many values per group (16 MB in float32: buffers below glibc's largest mmap threshold are
    #: reused from the heap instead of being mapped and faulted in again for every group)
    compiled_chunk_values = 1 << 22

    def uses_token_types(self, n_types: int, positions: int, gate_width: int) -> bool:
        """Whether the first layer's input products are made per distinct token (``n_types`` of
        them) rather than per position: when that saves enough and fits the memory budget."""
        return n_types <= self.type_projection_share * positions and 2 * n_types * gate_width <= self.type_projection_values

    def _step_inputs(
        self, layer: BiLstmLayer, inputs: torch.Tensor, active: List[int], n_steps: int, types: Optional[TokenTypes]
    ) -> Iterator[Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]]:
        """Each step's ``x_t W_x`` (no bias) per direction, with each active row's index into it
        or ``None`` (see :meth:`NativeKernels.infer_step`): per distinct token (``[U, 4H]`` per
        direction, when ``types`` are given and worth it) or packed in groups of steps."""
        gate_width = layer.w_input.shape[2]
        if types is not None and not self.uses_token_types(len(types[0]), sum(active[:n_steps]), gate_width):
            types = None
        max_rows = max(1, self.compiled_chunk_values // (2 * gate_width))
        yield from matmul.step_input_products(inputs, layer.w_input, active, n_steps, max_rows, matmul.linear, types)

    def _run_layer_inplace(
        self,
        layer: BiLstmLayer,
        projected: Iterator[torch.Tensor],
        width: int,
        active: List[int],
        h: torch.Tensor,
        c: torch.Tensor,
    ) -> Tuple[torch.Tensor, LstmState]:
        """Same maths as :meth:`_run_layer` without autograd: every step updates the projection
        and state buffers in place (no per-step allocation of the ``[2, B, 4H]`` gates)."""
        batch = h.shape[1]
        h, c = h.clone(), c.clone()
        out = h.new_zeros(width, 2, batch, self.proj_dim)
        cell_clip, proj_clip, cell = self.cell_clip, self.proj_clip, self.cell_dim
        for t, step in enumerate(projected):
            n = active[t]
            gates = matmul.directional_addmm_(step, h[:, :n], layer.w_state, layer.bias)
            gates[..., :cell].sigmoid_()  # i
            matmul.tanh_(gates[..., cell : 2 * cell])  # j
            gates[..., 2 * cell :].sigmoid_()  # f, o
            i, j, f, o = gates.chunk(4, dim=-1)
            c_n = c[:, :n]
            c_n.mul_(f).addcmul_(i, j)
            if cell_clip:
                c_n.clamp_(-cell_clip, cell_clip)
            h_new = matmul.directional_matmul(matmul.tanh_(c_n.clone()).mul_(o), layer.w_proj)
            if proj_clip:
                h_new.clamp_(-proj_clip, proj_clip)
            h[:, :n] = h_new
            out[t, :, :n] = h_new
            del step, gates, i, j, f, o  # views of a projection group: let it go before the next is made
        return out.permute(1, 2, 0, 3), (h, c)


def _sorted_types(token_types: TokenTypes, order: torch.Tensor, rev: torch.Tensor) -> TokenTypes:
    """``(vectors, rows)``: the distinct token vectors and, time-major ``[T, 2, B]``, the row of
    each (length-sorted) row's token at each step, per direction (the backward one reversed
    within each row's length, as :meth:`BiLstmStack.forward` feeds it)."""
    vectors, index = token_types
    forward_rows = index.to(torch.long)[order.to(index.device)]
    backward_rows = torch.gather(forward_rows, 1, rev.to(index.device))
    return vectors, torch.stack([forward_rows, backward_rows]).permute(2, 0, 1).contiguous()
