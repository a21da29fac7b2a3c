"""FunctionalModel's eager fast path gives functional_call's results and leaves the module as it was."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from fedrun.models.base import FunctionalModel


def _bn_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3))


def test_eager_call_matches_functional_call_with_buffers() -> None:
    fm = FunctionalModel(_bn_net())
    originals = {n: p for n, p in fm.module.named_parameters()}
    params = {k: v + 0.5 for k, v in fm.init_params().items()}
    bufs_a = {k: v.clone() for k, v in fm.buffers.items()}
    bufs_b = {k: v.clone() for k, v in fm.buffers.items()}
    x = torch.randn(8, 4)
    out = fm.logits(params, x, bufs_a)
    ref = functional_call(fm.module, {**bufs_b, **params}, (x,))
    assert torch.equal(out, ref)
    for k in bufs_a:  # BatchNorm's in-place statistics update lands in the client's copy, as with functional_call
        assert torch.equal(bufs_a[k], bufs_b[k])
    assert not torch.equal(bufs_a["1.running_mean"], fm.buffers["1.running_mean"])
    assert all(p is originals[n] for n, p in fm.module.named_parameters())


def test_gradients_flow_through_the_eager_call() -> None:
    fm = FunctionalModel(_bn_net())
    params = {k: v.requires_grad_(True) for k, v in fm.init_params().items()}
    x = torch.randn(8, 4)
    g = torch.autograd.grad(fm.logits(params, x).sum(), list(params.values()))
    ref_params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    ref = torch.autograd.grad(
        functional_call(fm.module, {**fm.buffers, **ref_params}, (x,)).sum(), list(ref_params.values())
    )
    assert all(torch.allclose(a, b) for a, b in zip(g, ref, strict=True))


def test_tied_weights_and_exceptions() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False))
    net[1].weight = net[0].weight
    fm = FunctionalModel(net)
    w = {"0.weight": 2 * torch.eye(3)}
    x = torch.ones(1, 3)
    assert torch.equal(fm.logits(w, x), functional_call(net, w, (x,)))  # both aliases replaced
    before = net[0].weight
    with pytest.raises(RuntimeError):
        fm.logits(w, torch.ones(1, 5))  # shape error inside forward
    assert net[0].weight is before and net[1].weight is before  # restored


def test_unknown_key_falls_back_to_functional_call() -> None:
    fm = FunctionalModel(_bn_net())
    params = {**fm.init_params(), "not.a.param": torch.zeros(1)}
    with pytest.raises((RuntimeError, AttributeError)):  # functional_call's own error, not a KeyError here
        fm.logits(params, torch.randn(2, 4))
