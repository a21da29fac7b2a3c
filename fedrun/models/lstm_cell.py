"""An LSTM written with plain tensor operations, for ``torch.func.vmap``.

``nn.LSTM`` calls one fused kernel (``aten::mkldnn_rnn_layer`` on CPU, cuDNN on a GPU) that has no batching rule,
so under the vectorised engine's ``vmap`` torch runs it once per client (its per-sample fallback) and warns. This
module computes the same recurrence (PyTorch's ``nn.LSTM`` equations, gate order i, f, g, o)::

    [i, f, g, o] = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
    i, f, o = sigmoid(.), g = tanh(.),  c_t = f * c_{t-1} + i * g,  h_t = o * tanh(c_t)

with ordinary batched operations. The recurrence over t is one ``autograd.Function`` whose backward is written
out (back-propagation through time: for each step back, the gate gradients from dh_t and dc_t, then
dh_{t-1} = dgates W_hh and dc_{t-1} = dc_t * f); ``generate_vmap_rule`` lets ``vmap`` batch both passes over the
clients. Writing the backward out, instead of letting autograd record the ~10 operations of every step, is
what makes it faster than the fallback (measured in ``make bench``, workload e). The input projection
``x W_ih^T + b`` of all steps is one matrix product outside the loop and is differentiated by autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class LSTMRecurrence(torch.autograd.Function):
    """``(gx [B, T, 4H], w_hh [4H, H]) -> (h [B, T, H], gates [B, T, 4H], c [B, T, H])`` from zero initial state.

    ``gx`` holds each step's input projection plus both biases. Only ``h`` is differentiable; the activated gates
    and the cell states are returned so that backward can reuse them.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(gx: torch.Tensor, w_hh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[override]
        b, t_len, four_h = gx.shape
        hid = four_h // 4
        h = gx.new_zeros(b, hid)
        c = h
        w_t = w_hh.t()
        hs, acts, cs = [], [], []
        for t in range(t_len):
            z = torch.addmm(gx[:, t], h, w_t)
            a = torch.cat(
                [torch.sigmoid(z[:, : 2 * hid]), torch.tanh(z[:, 2 * hid : 3 * hid]), torch.sigmoid(z[:, 3 * hid :])], 1
            )
            c = torch.addcmul(a[:, hid : 2 * hid] * c, a[:, :hid], a[:, 2 * hid : 3 * hid])
            h = a[:, 3 * hid :] * torch.tanh(c)
            hs.append(h)
            acts.append(a)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(acts, 1), torch.stack(cs, 1)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: tuple[torch.Tensor, ...]) -> None:
        _, w_hh = inputs
        h, acts, c = output
        ctx.save_for_backward(w_hh, h, acts, c)
        ctx.mark_non_differentiable(acts, c)

    @staticmethod
    def backward(ctx: Any, dh_out: torch.Tensor, _da: Any, _dc: Any) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        w_hh, h, acts, c = ctx.saved_tensors
        b, t_len, hid = h.shape
        dh = h.new_zeros(b, hid)
        dc = dh
        dgates: list[torch.Tensor] = [dh] * t_len
        for t in range(t_len - 1, -1, -1):
            a = acts[:, t]
            i, f, g, o = a[:, :hid], a[:, hid : 2 * hid], a[:, 2 * hid : 3 * hid], a[:, 3 * hid :]
            tc = torch.tanh(c[:, t])
            dh = dh + dh_out[:, t]
            dc = dc + dh * o * (1 - tc * tc)
            c_prev = c[:, t - 1] if t > 0 else torch.zeros_like(tc)
            dz = torch.cat(
                [dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1
            )
            dgates[t] = dz
            dc = dc * f
            dh = dz @ w_hh
        dgx = torch.stack(dgates, 1)
        h_prev = torch.cat([h.new_zeros(b, 1, hid), h[:, :-1]], 1)
        dw = dgx.reshape(-1, 4 * hid).t() @ h_prev.reshape(-1, hid)
        return dgx, dw


def lstm_forward(lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """The outputs [B, T, H] of ``lstm`` (batch_first, unidirectional, zero initial state) on ``x`` [B, T, D],
    with its own parameters, computed by :class:`LSTMRecurrence` layer after layer."""
    if not lstm.batch_first or lstm.bidirectional or lstm.proj_size or (lstm.dropout and lstm.training):
        raise ValueError("lstm_forward supports batch_first, unidirectional LSTMs without projection or dropout")
    h = x
    for layer in range(lstm.num_layers):
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")
        gx = h @ w_ih.t()
        if lstm.bias:
            gx = gx + (getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}"))
        h, _, _ = LSTMRecurrence.apply(gx, w_hh)
    return h
