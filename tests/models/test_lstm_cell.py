"""The plain-operation LSTM equals nn.LSTM: outputs and gradients, eagerly and under vmap over clients."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from fedrun.models.lstm_cell import LSTMRecurrence, lstm_forward


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_outputs_and_gradients_equal_nn_lstm(layers: int, dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 7, layers, batch_first=True).to(dtype)
    x = torch.randn(4, 9, 6, dtype=dtype, requires_grad=True)
    weight = torch.randn(4, 9, 7, dtype=dtype)  # a loss that uses every step's output

    ref = lstm(x)[0]  # the fused kernel: the reference
    ref_grads = torch.autograd.grad((ref * weight).sum(), [x, *lstm.parameters()])
    out = lstm_forward(lstm, x)
    grads = torch.autograd.grad((out * weight).sum(), [x, *lstm.parameters()])

    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)


def test_one_step_from_the_equations() -> None:
    """A single step, written from the LSTM equations (PyTorch's gate order i, f, g, o), zero initial state."""
    torch.manual_seed(1)
    h_dim, b = 3, 2
    gx = torch.randn(b, 1, 4 * h_dim, dtype=torch.float64)
    w_hh = torch.randn(4 * h_dim, h_dim, dtype=torch.float64)
    i, f, g, o = gx[:, 0].chunk(4, 1)  # h_0 = 0, so the recurrent term adds nothing
    c = torch.sigmoid(f) * 0 + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    out, _, cells = LSTMRecurrence.apply(gx, w_hh)
    torch.testing.assert_close(out[:, 0], h, rtol=0, atol=1e-15)
    torch.testing.assert_close(cells[:, 0], c, rtol=0, atol=1e-15)


class _Plain(nn.Module):
    """An ``nn.LSTM`` run through :func:`lstm_forward`."""

    def __init__(self, lstm: nn.LSTM) -> None:
        super().__init__()
        self.lstm = lstm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lstm_forward(self.lstm, x)


def test_under_vmap_it_batches_clients_without_the_per_sample_fallback() -> None:
    torch.manual_seed(2)
    clients = 3
    lstm = nn.LSTM(5, 6, 2, batch_first=True).to(torch.float64)
    plain = _Plain(lstm)
    stacked = {
        f"lstm.{n}": p.detach().unsqueeze(0) + 0.1 * torch.randn(clients, *p.shape, dtype=p.dtype)
        for n, p in lstm.named_parameters()
    }
    x = torch.randn(clients, 4, 8, 5, dtype=torch.float64)

    def loss(module: nn.Module) -> object:
        return lambda params, xb: (torch.func.functional_call(module, params, (xb,))[..., -1, :] ** 2).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nn.LSTM's per-sample fallback under vmap warns ("There is a performance drop")
        got = torch.func.vmap(torch.func.grad(loss(plain)))(stacked, x)
    fused = nn.Module()
    fused.lstm = lstm
    fused.forward = lambda xb: fused.lstm(xb)[0]  # type: ignore[method-assign]
    for c in range(clients):  # each client on its own, through the fused kernel
        ref = torch.func.grad(loss(fused))({n: t[c] for n, t in stacked.items()}, x[c])
        for n in stacked:
            torch.testing.assert_close(got[n][c], ref[n], rtol=1e-12, atol=1e-12)


def test_unsupported_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_first"):
        lstm_forward(nn.LSTM(3, 4), torch.zeros(2, 5, 3))
