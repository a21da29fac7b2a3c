"""SCAFFOLD option II: corrected local gradient, c_i update, server rules."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import RoundInfo
from fedrun.core.tree import stack


def test_scaffold_local_gradient_is_corrected() -> None:
    model = tiny_model()
    algo = make_algo("scaffold", model)
    w, batch = model.init_params(), tiny_batch()
    c = {k: torch.full_like(v, 0.3) for k, v in w.items()}
    ci = {k: torch.full_like(v, 0.1) for k, v in w.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, w, extras={"c": c}, state={"c_i": ci}))
    g = plain_grad(model, w, batch)
    for k in w:
        torch.testing.assert_close(got[k], g[k] - 0.1 + 0.3, atol=1e-12, rtol=0)


def test_scaffold_ci_update_option_ii() -> None:
    model = tiny_model()
    algo = make_algo("scaffold", model)
    w0 = model.init_params()
    w_end = {k: v - 0.6 for k, v in w0.items()}
    c = {k: torch.full_like(v, 0.2) for k, v in w0.items()}
    ci = {k: torch.full_like(v, 0.5) for k, v in w0.items()}
    ctx = ctx_for(algo, w0, extras={"c": c}, state={"c_i": ci}, lr=0.1)
    upload, state = algo.client_finish(w0, w_end, ctx, torch.tensor(3))
    # c_i+ = c_i - c + (w0 - wK)/(K lr) = 0.5 - 0.2 + 0.6/0.3 = 2.3; Delta c_i = 1.8
    for k in w0:
        torch.testing.assert_close(state["c_i"][k], torch.full_like(w0[k], 2.3))
        torch.testing.assert_close(upload["delta_c"][k], torch.full_like(w0[k], 1.8))
        assert torch.equal(upload["params"][k], w_end[k])


def test_scaffold_server_lr_and_c_step() -> None:
    model = tiny_model()
    algo = make_algo("scaffold", model, server_lr=2.0)
    w = model.init_params()
    ups = {
        "params": stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 2.0 for k, v in w.items()}]),
        "delta_c": stack([{k: torch.full_like(v, 1.0) for k, v in w.items()}] * 2),
    }
    info = RoundInfo(0, 8, torch.tensor([0, 5]), torch.tensor([1.0, 3.0]), torch.tensor([2, 2]), 0.1)
    new, state, _ = algo.aggregate(w, algo.server_init(w), ups, torch.tensor([0.25, 0.75], dtype=torch.float64), info)
    for k in w:
        torch.testing.assert_close(new[k], w[k] + 2.0 * 1.75)
        torch.testing.assert_close(state["c"][k], torch.full_like(w[k], 2 / 8))


def test_scaffold_learns_and_keeps_client_variates(make_spec) -> None:
    params, state, log = train(make_spec("algorithm=scaffold", *SMALL))
    rows = log[-1]["states"].rows["c_i"]
    assert all(float(v.abs().sum()) > 0 for v in rows.values())
    assert all(torch.isfinite(v).all() for v in params.values())
