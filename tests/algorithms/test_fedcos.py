"""FedCos: the cosine penalty and its gradient by hand, the server rules, mu = 0 == FedAvg, and b = ||d||^2 computed
once per round (with d) bit for bit as in the step."""

from __future__ import annotations

import pytest
import torch
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import RoundInfo
from fedrun.algorithms.fedcos import COS_EPS, cosine_penalty
from fedrun.core.tree import nbytes, sq_norm, stack


def _flat(t: dict) -> torch.Tensor:  # noqa: ANN001
    return torch.cat([v.reshape(-1) for v in t.values()])


def test_cosine_penalty_value_and_gradient() -> None:
    model = tiny_model()
    mu = 0.7
    algo = make_algo("fedcos", model, mu=mu)
    wt, batch = model.init_params(), tiny_batch()
    g = torch.Generator().manual_seed(3)
    s_dict = {k: 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in wt.items()}
    d_dict = {k: 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in wt.items()}
    w = {k: wt[k] + s_dict[k] for k in wt}
    s, d = _flat(s_dict), _flat(d_dict)
    a, b = s @ s, d @ d
    cos = (s @ d) / torch.sqrt(a * b + COS_EPS)
    assert torch.allclose(cosine_penalty(w, wt, d_dict), 1 - cos)
    grad_cos = d / torch.sqrt(a * b + COS_EPS) - (s @ d) * b * s / (a * b + COS_EPS) ** 1.5
    got, loss = algo.local_grad(w, batch, ctx_for(algo, wt, extras={"d": d_dict}))
    ce = _flat(plain_grad(model, w, batch))
    torch.testing.assert_close(_flat(got), ce - mu * grad_cos, atol=1e-10, rtol=0)
    torch.testing.assert_close(loss, model.loss(w, batch) + mu * (1 - cos))


def test_cosine_penalty_off_without_direction_and_pushes_along_d_at_start() -> None:
    model = tiny_model()
    algo = make_algo("fedcos", model, mu=0.5)
    wt, batch = model.init_params(), tiny_batch()
    zero = {k: torch.zeros_like(v) for k, v in wt.items()}
    got, loss = algo.local_grad(wt, batch, ctx_for(algo, wt, extras={"d": zero}))
    assert_trees_equal(got, plain_grad(model, wt, batch), atol=1e-12)
    torch.testing.assert_close(loss, model.loss(wt, batch))
    d = {k: torch.full_like(v, 0.01) for k, v in wt.items()}
    got, _ = algo.local_grad(wt, batch, ctx_for(algo, wt, extras={"d": d}))
    ce = plain_grad(model, wt, batch)
    for k in wt:  # at w = w^t the gradient of cos is d / sqrt(1e-4) = 100 d
        torch.testing.assert_close(got[k], ce[k] - 0.5 * 100 * d[k], atol=1e-10, rtol=0)


def test_fedcos_prox_composition_uses_code_form() -> None:
    model = tiny_model()
    algo = make_algo("fedcos", model, mu=0.0, prox_mu=0.1)
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.5 for k, v in wt.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, wt))
    ce = plain_grad(model, w, batch)
    for k in w:
        torch.testing.assert_close(got[k], ce[k] + 2 * 0.1 * 0.5, atol=1e-12, rtol=0)


def _server_round(algo, w, state, shift):  # noqa: ANN001, ANN202
    ups = {"params": stack([{k: v + shift for k, v in w.items()}, {k: v + 3 * shift for k, v in w.items()}])}
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), 0.1)
    return algo.aggregate(w, state, ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)


def test_fedcos_server_rules_and_directions() -> None:
    model = tiny_model()
    w = model.init_params()
    k0 = next(iter(w))
    opt = make_algo("fedcos", model, server="opt", server_lr=1.5)
    new, st, _ = _server_round(opt, w, opt.server_init(w), 1.0)  # mean delta = 2
    torch.testing.assert_close(new[k0], w[k0] + 3.0)
    torch.testing.assert_close(st["d"][k0], torch.full_like(w[k0], 3.0))  # paper: w^{t+1} - w^t
    code = make_algo("fedcos", model, server="opt", server_lr=1.5, direction="code")
    _, st, _ = _server_round(code, w, code.server_init(w), 1.0)
    torch.testing.assert_close(st["d"][k0], torch.full_like(w[k0], 2.0))  # code: mean w_i - w^t
    avgm = make_algo("fedcos", model, server="avgm", server_momentum=0.5)
    w1, st, _ = _server_round(avgm, w, avgm.server_init(w), 1.0)  # v = Delta = 2 in the first round
    torch.testing.assert_close(w1[k0], w[k0] + 2.0)
    w2, st, _ = _server_round(avgm, w1, st, 0.5)  # Delta = 1: v = 0.5*2 + 0.5*1 = 1.5
    torch.testing.assert_close(w2[k0], w1[k0] + 1.5)


def test_fedcos_mu0_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    cos0, _, _ = train(make_spec("algorithm=fedcos", "algorithm.mu=0.0", *SMALL))
    assert_trees_equal(cos0, avg)
    cos, _, _ = train(make_spec("algorithm=fedcos", *SMALL))
    assert any(not torch.allclose(cos[k], avg[k]) for k in avg)


def test_broadcast_hoists_b_bit_for_bit_and_does_not_count_it() -> None:
    """b = ||d||^2 comes with d once per round (FedCos.broadcast): the same bits as the step's own sq_norm(d), the
    same loss and gradient as a step that computes it, and only w^t and d counted as downloaded."""
    model = tiny_model()
    algo = make_algo("fedcos", model, mu=0.7, prox_mu=0.1)
    wt, batch = model.init_params(), tiny_batch()
    g = torch.Generator().manual_seed(5)
    d = {k: 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in wt.items()}
    extras = algo.broadcast(wt, {**algo.server_init(wt), "d": d})
    assert torch.equal(extras["b"], sq_norm(d))
    assert algo.broadcast_bytes(wt, extras) == nbytes(wt) + nbytes(d)
    w = {k: v + 0.05 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in wt.items()}
    hoisted, loss_h = algo.local_grad(w, batch, ctx_for(algo, wt, extras=extras))
    in_step, loss_s = algo.local_grad(w, batch, ctx_for(algo, wt, extras={"d": d}))
    assert_trees_equal(hoisted, in_step)
    assert torch.equal(loss_h, loss_s)


def test_compiled_step_keeps_b_in_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """While torch.compile traces, the broadcast b is ignored (Inductor rounds its own reduction of d differently)."""
    model = tiny_model()
    algo = make_algo("fedcos", model, mu=0.7)
    wt, batch = model.init_params(), tiny_batch()
    d = {k: torch.full_like(v, 0.01) for k, v in wt.items()}
    w = {k: v + 0.02 for k, v in wt.items()}
    wrong = {"d": d, "b": sq_norm(d) * 4}
    expected = algo.local_loss(w, batch, ctx_for(algo, wt, extras={"d": d}))
    assert not torch.equal(algo.local_loss(w, batch, ctx_for(algo, wt, extras=wrong)), expected)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert torch.equal(algo.local_loss(w, batch, ctx_for(algo, wt, extras=wrong)), expected)
