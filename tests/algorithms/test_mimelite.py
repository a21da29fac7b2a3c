"""MimeLite: frozen server momentum in the local step, full-batch gradient at w^t, server momentum."""

from __future__ import annotations

import torch
from client_methods_util import ctx_for, make_algo, plain_grad, tiny_batch, tiny_model

from fedrun.algorithms.base import RoundInfo
from fedrun.core.tree import stack


def test_mimelite_step_and_full_gradient() -> None:
    model = tiny_model()
    beta, lr = 0.9, 0.1
    algo = make_algo("mimelite", model, beta=beta)
    wt = model.init_params()
    m = {k: torch.full_like(v, 0.2) for k, v in wt.items()}
    ctx = ctx_for(algo, wt, extras={"m": m}, lr=lr)
    b1, b2 = tiny_batch(1), tiny_batch(2)
    w1, _, st, _ = algo.client_step(wt, None, b1, ctx)
    g = plain_grad(model, wt, b1)
    for k in wt:
        torch.testing.assert_close(w1[k], wt[k] - lr * ((1 - beta) * g[k] + beta * 0.2), atol=1e-12, rtol=0)
    ctx = ctx._replace(state=st)
    w2, _, st, _ = algo.client_step(w1, None, b2, ctx)
    upload, reset = algo.client_finish(wt, w2, ctx._replace(state=st), torch.tensor(2))
    g2 = plain_grad(model, wt, b2)  # gradients at w^t, not at the moving local model
    for k in wt:
        torch.testing.assert_close(upload["grad"][k], (g[k] + g2[k]) / 2, atol=1e-12, rtol=0)
        assert float(reset["g0_sum"][k].abs().sum()) == 0
    assert float(reset["g0_count"]) == 0


def test_mimelite_server_momentum() -> None:
    model = tiny_model()
    algo = make_algo("mimelite", model, beta=0.9)
    w = model.init_params()
    ups = {
        "params": stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 3.0 for k, v in w.items()}]),
        "grad": stack(
            [{k: torch.full_like(v, 1.0) for k, v in w.items()}, {k: torch.full_like(v, 2.0) for k, v in w.items()}]
        ),
    }
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), 0.1)
    st0 = {"m": {k: torch.full_like(v, 1.0) for k, v in w.items()}}
    new, st, _ = algo.aggregate(w, st0, ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    for k in w:
        torch.testing.assert_close(st["m"][k], torch.full_like(w[k], 0.1 * 1.5 + 0.9 * 1.0))
        torch.testing.assert_close(new[k], w[k] + 2.0)


def test_mimelite_full_batch_gradient_with_a_short_last_batch() -> None:
    # an epoch of 9 samples in batches of 6 and 3: grad=full uploads grad f_i(w^t) over all 9 samples (Mime's
    # full-batch gradient); grad=minibatch the mean of the two batch gradients, which weighs the short one double
    model = tiny_model()
    wt = model.init_params()
    b1, b2 = tiny_batch(1, n=6), tiny_batch(2, n=3)
    whole = {k: torch.cat([b1[k], b2[k]]) for k in b1}
    for grad, want in (
        ("full", plain_grad(model, wt, whole)),
        ("minibatch", {k: (plain_grad(model, wt, b1)[k] + plain_grad(model, wt, b2)[k]) / 2 for k in wt}),
    ):
        algo = make_algo("mimelite", model, grad=grad)
        ctx = ctx_for(algo, wt, extras={"m": {k: torch.zeros_like(v) for k, v in wt.items()}})
        w = wt
        for b in (b1, b2):
            w, _, st, _ = algo.client_step(w, None, b, ctx)
            ctx = ctx._replace(state=st)
        upload, _ = algo.client_finish(wt, w, ctx, torch.tensor(2))
        for k in wt:
            torch.testing.assert_close(upload["grad"][k], want[k], atol=1e-12, rtol=0)
    # padded batches (the vectorised engine): weight 0 samples do not count
    algo = make_algo("mimelite", model)
    padded = {**whole, "w": torch.tensor([1.0] * 6 + [0.0] * 3, dtype=torch.float64)}
    _, _, st, _ = algo.client_step(wt, None, padded, ctx_for(algo, wt))
    upload, _ = algo.client_finish(wt, wt, ctx_for(algo, wt, state=st), torch.tensor(1))
    for k in wt:
        torch.testing.assert_close(upload["grad"][k], plain_grad(model, wt, b1)[k], atol=1e-12, rtol=0)
