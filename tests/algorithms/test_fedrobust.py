"""FedRobust: descent on w and ascent on the client's affine perturbation (Lambda_i, delta_i)."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train


def _algo(**hp):  # noqa: ANN003, ANN202
    algo = make_algo("fedrobust", tiny_model(), **hp)
    algo.input_shape = (4,)
    return algo


def test_fedrobust_first_step_and_ascent_by_hand() -> None:
    lam, adv_lr, lr = 0.5, 0.1, 0.05
    algo = _algo(lam=lam, adv_lr=adv_lr)
    model, wt, batch = algo.model, algo.model.init_params(), tiny_batch()
    state = algo.client_init(wt)
    assert torch.equal(state["Lambda"], torch.eye(4, dtype=torch.float64)) and float(state["delta"].abs().sum()) == 0
    w1, _, st, _ = algo.client_step(wt, None, batch, ctx_for(algo, wt, state=state, lr=lr))
    g = plain_grad(model, wt, batch)  # identity perturbation: the w step is plain SGD
    for k in wt:
        torch.testing.assert_close(w1[k], wt[k] - lr * g[k], atol=1e-12, rtol=0)
    lam_m = torch.eye(4, dtype=torch.float64, requires_grad=True)
    delta = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    loss = model.loss(wt, {**batch, "x": batch["x"] @ lam_m.T + delta})
    g_l, g_d = torch.autograd.grad(loss, [lam_m, delta])
    torch.testing.assert_close(st["Lambda"], torch.eye(4, dtype=torch.float64) + adv_lr * g_l)  # penalty grad 0 at I
    torch.testing.assert_close(st["delta"], adv_lr * g_d)
    # a second ascent step feels the penalty -2 lam (Lambda - I)
    _, _, st2, _ = algo.client_step(w1, None, batch, ctx_for(algo, wt, state=st, lr=lr))
    lam_m = st["Lambda"].clone().requires_grad_(True)
    delta = st["delta"].clone().requires_grad_(True)
    loss = model.loss(w1, {**batch, "x": batch["x"] @ lam_m.T + delta})
    g_l, g_d = torch.autograd.grad(loss, [lam_m, delta])
    eye = torch.eye(4, dtype=torch.float64)
    torch.testing.assert_close(st2["Lambda"], st["Lambda"] + adv_lr * (g_l - 2 * lam * (st["Lambda"] - eye)))
    torch.testing.assert_close(st2["delta"], st["delta"] + adv_lr * (g_d - 2 * lam * st["delta"]))


def test_fedrobust_diagonal_structure() -> None:
    algo = _algo(structure="diagonal")
    wt, batch = algo.model.init_params(), tiny_batch()
    state = algo.client_init(wt)
    assert state["Lambda"].shape == (4,)
    _, _, st, _ = algo.client_step(wt, None, batch, ctx_for(algo, wt, state=state))
    assert st["Lambda"].shape == (4,) and not torch.equal(st["Lambda"], state["Lambda"])


def test_fedrobust_keeps_perturbation_per_client(make_spec) -> None:
    params, _, log = train(make_spec("algorithm=fedrobust", *SMALL))
    rows = log[-1]["states"].rows
    assert rows["Lambda"].shape == (4, 784, 784)
    eye = torch.eye(784)
    assert all(not torch.equal(rows["Lambda"][i], eye) for i in range(4))
    assert all(torch.isfinite(v).all() for v in params.values())


def test_fedrobust_auto_structure_follows_input_size() -> None:
    algo = _algo()
    assert algo.full  # d = 4
    algo.input_shape = (3, 32, 32)
    assert not algo.full
    assert make_algo("fedrobust", tiny_model(), structure="full").full
