"""FedDyn: local objective, g_i and server updates, and the alpha -> 0 limit."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import RoundInfo
from fedrun.config import FLConfig
from fedrun.tree import stack


def test_feddyn_local_gradient_and_state_update() -> None:
    model = tiny_model()
    alpha = 0.3
    algo = make_algo("feddyn", model, alpha=alpha)
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.2 for k, v in wt.items()}
    gi = {k: torch.full_like(v, 0.4) for k, v in wt.items()}
    ctx = ctx_for(algo, wt, state={"grad": gi})
    got, _ = algo.local_grad(w, batch, ctx)
    ce = plain_grad(model, w, batch)
    for k in w:  # grad f - g_i + alpha (w - w^t)
        torch.testing.assert_close(got[k], ce[k] - 0.4 + alpha * 0.2, atol=1e-12, rtol=0)
    _, state = algo.client_finish(wt, w, ctx, torch.tensor(5))
    for k in w:  # g_i <- g_i - alpha (w_i - w^t)
        torch.testing.assert_close(state["grad"][k], torch.full_like(w[k], 0.4 - alpha * 0.2))


def test_feddyn_server_update() -> None:
    model = tiny_model()
    alpha = 0.5
    algo = make_algo("feddyn", model, alpha=alpha)
    w = model.init_params()
    ups = {"params": stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 3.0 for k, v in w.items()}])}
    info = RoundInfo(0, 10, torch.tensor([0, 1]), torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), 0.1)
    new, state, _ = algo.aggregate(w, algo.server_init(w), ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    for k in w:  # h = -(alpha/N) * (1 + 3) = -0.2; w = mean - h/alpha = w + 2 + 0.4
        torch.testing.assert_close(state["h"][k], torch.full_like(w[k], -0.2))
        torch.testing.assert_close(new[k], w[k] + 2.4)


def test_feddyn_alpha_to_zero_limit(make_spec) -> None:
    """As alpha -> 0 the clients train as in FedAvg, but the server's h/alpha stays finite: with full
    participation the first round moves twice as far, w^1 = w^0 + 2 (mean w_i - w^0)."""
    common = (*SMALL, "fl.rounds=1", "fl.weighting=uniform")
    avg, _, avg_log = train(make_spec("algorithm=fedavg", *common))
    dyn, _, dyn_log = train(make_spec("algorithm=feddyn", "algorithm.alpha=1e-9", *common))
    for k in avg:
        torch.testing.assert_close(dyn_log[0]["uploads"]["params"][k], avg_log[0]["uploads"]["params"][k])
        w0 = avg_log[0]["start"][k]
        torch.testing.assert_close(dyn[k], w0 + 2 * (avg[k] - w0), atol=1e-5, rtol=1e-4)


def test_feddyn_law_variant() -> None:
    model = tiny_model()
    alpha = 0.5
    algo = make_algo("feddyn", model, alpha=alpha, variant="law")
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.2 for k, v in wt.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, wt))
    ce = plain_grad(model, w, batch)
    dist = 0.2 * sum(v.numel() for v in w.values()) ** 0.5
    for k in w:  # d/dw (alpha/2)||w - w^t|| = (alpha/2) (w - w^t)/||w - w^t||
        torch.testing.assert_close(got[k], ce[k] + 0.5 * alpha * 0.2 / dist, atol=1e-12, rtol=0)
    at_start, _ = algo.local_grad(wt, batch, ctx_for(algo, wt))
    assert all(torch.isfinite(v).all() for v in at_start.values())
    ups = {"params": stack([{k: v + 1.0 for k, v in wt.items()}, {k: v + 3.0 for k, v in wt.items()}])}
    info = RoundInfo(0, 10, torch.tensor([0, 1]), torch.tensor([1.0, 3.0]), torch.tensor([1, 1]), 0.1)
    new, state, _ = algo.aggregate(wt, algo.server_init(wt), ups, torch.tensor([0.25, 0.75], dtype=torch.float64), info)
    for k in wt:  # h = -alpha * 2.5 = -1.25; w = w + 2.5 + 1.25/alpha
        torch.testing.assert_close(state["h"][k], torch.full_like(wt[k], -1.25))
        torch.testing.assert_close(new[k], wt[k] + 2.5 + 2.5)


def test_feddyn_size_weighting_weighs_the_mean_and_h_alike() -> None:
    # fl.weighting=size: w = sum_S p_i w_i - h/alpha with h <- h - alpha sum_S (n_i/n) Delta_i, n over all N
    # clients (here N = 4 clients of 1, 3, 2, 2 samples: n = 8); the paper's uniform 1/N when uniform
    model, alpha = tiny_model(), 0.5
    w = model.init_params()
    ups = {"params": stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 3.0 for k, v in w.items()}])}
    sizes = torch.tensor([1.0, 3.0], dtype=torch.float64)
    info = RoundInfo(0, 4, torch.tensor([0, 1]), sizes, torch.tensor([1, 1]), 0.1)
    cases = (("size", sizes / 4, [1 / 8, 3 / 8]), ("uniform", torch.tensor([0.5, 0.5]), [1 / 4, 1 / 4]))
    for weighting, weights, omega in cases:
        algo = make_algo("feddyn", model, fl=FLConfig(weighting=weighting), alpha=alpha)
        algo.total_size = 8.0  # what setup reads from the data
        new, state, _ = algo.aggregate(w, algo.server_init(w), ups, weights.to(torch.float64), info)
        h = -alpha * (omega[0] * 1.0 + omega[1] * 3.0)
        mean = float(weights[0]) * 1.0 + float(weights[1]) * 3.0
        for k in w:
            torch.testing.assert_close(state["h"][k], torch.full_like(w[k], h))
            torch.testing.assert_close(new[k], w[k] + mean - h / alpha)
