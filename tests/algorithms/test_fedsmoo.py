"""FedSMOO: one client step and the server update against the authors' rules, computed by hand."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, shifted, tiny_batch, tiny_model, train

from fedrun.algorithms.base import RoundInfo
from fedrun.config.schema import FLConfig
from fedrun.core.tree import stack


def _flat(t: dict) -> torch.Tensor:  # noqa: ANN001
    return torch.cat([v.reshape(-1) for v in t.values()])


def test_fedsmoo_client_step_by_hand() -> None:
    model = tiny_model()
    rho, lam, lr, wd = 0.2, 0.1, 0.05, 0.01
    algo = make_algo("fedsmoo", model, fl=FLConfig(weight_decay=wd), rho=rho, lam=lam, max_norm=None)
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.05 for k, v in wt.items()}
    s = {k: torch.full_like(v, 0.01) for k, v in wt.items()}
    mu = {k: torch.full_like(v, -0.02) for k, v in wt.items()}
    h = {k: torch.full_like(v, 0.3) for k, v in wt.items()}
    ctx = ctx_for(algo, wt, extras={"s": s}, state={"h": h, "mu": mu}, lr=lr)
    new_w, _, state, _ = algo.client_step(w, None, batch, ctx)
    g = plain_grad(model, w, batch)
    g_hat = {k: g[k] - mu[k] - s[k] for k in g}
    n = _flat(g_hat).norm()
    eps = {k: rho * g_hat[k] / (n + 1e-7) for k in g}
    g_sam = plain_grad(model, shifted(w, eps), batch)
    for k in w:
        torch.testing.assert_close(state["mu"][k], mu[k] + eps[k] - s[k])
        direction = g_sam[k] + lam * (h[k] - wt[k]) + (wd + lam) * w[k]
        torch.testing.assert_close(new_w[k], w[k] - lr * direction, atol=1e-12, rtol=0)
    upload, fin = algo.client_finish(wt, new_w, ctx._replace(state=state), torch.tensor(1))
    for k in w:
        torch.testing.assert_close(fin["h"][k], h[k] + new_w[k] - wt[k])
        assert torch.equal(upload["mu"][k], state["mu"][k])


def test_fedsmoo_server_update() -> None:
    model = tiny_model()
    algo = make_algo("fedsmoo", model, rho=0.1)
    w = model.init_params()
    ups = {
        "params": stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 3.0 for k, v in w.items()}]),
        "mu": stack(
            [{k: torch.full_like(v, 1.0) for k, v in w.items()}, {k: torch.full_like(v, 3.0) for k, v in w.items()}]
        ),
    }
    info = RoundInfo(0, 4, torch.tensor([0, 2]), torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), 0.1)
    new, st, _ = algo.aggregate(w, algo.server_init(w), ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    d = sum(v.numel() for v in w.values())
    for k in w:  # s = rho * 2 / ||2 * ones||; h_mean = (1 + 3)/4; w = w + 2 + 1
        torch.testing.assert_close(st["s"][k], torch.full_like(w[k], 0.1 / d**0.5), atol=1e-9, rtol=0)
        torch.testing.assert_close(st["h_mean"][k], torch.full_like(w[k], 1.0))
        torch.testing.assert_close(new[k], w[k] + 3.0)


def test_fedsmoo_runs_and_learns(make_spec) -> None:
    params, state, _ = train(make_spec("algorithm=fedsmoo", *SMALL))
    assert all(torch.isfinite(v).all() for v in params.values())
    assert float(sum(v.abs().sum() for v in state["s"].values())) > 0
