"""FedSAM, FedASAM, MoFedSAM: the perturbed gradients by hand, and the reductions to FedAvg / FedSAM."""

from __future__ import annotations

import torch
from client_methods_util import (
    SMALL,
    assert_trees_equal,
    ctx_for,
    make_algo,
    plain_grad,
    shifted,
    tiny_batch,
    tiny_model,
    train,
)

from fedrun.algorithms.base import RoundInfo
from fedrun.core.tree import stack


def test_sam_gradient_is_gradient_at_ascent_point() -> None:
    model = tiny_model()
    algo = make_algo("fedsam", model, rho=0.05)
    w, batch = model.init_params(), tiny_batch()
    g = plain_grad(model, w, batch)
    gnorm = torch.sqrt(sum((v**2).sum() for v in g.values()))
    expected = plain_grad(model, shifted(w, {k: 0.05 * v / gnorm for k, v in g.items()}), batch)
    got, loss = algo.local_grad(w, batch, ctx_for(algo, w))
    assert_trees_equal(got, expected, atol=1e-12)
    assert abs(float(loss) - float(model.loss(w, batch))) < 1e-12
    assert any(not torch.allclose(got[k], g[k]) for k in g)  # the perturbation changed something


def test_asam_perturbation_scales_weights_not_biases() -> None:
    model = tiny_model()
    rho, eta = 0.5, 0.1
    algo = make_algo("fedasam", model, rho=rho, eta=eta)
    w, batch = model.init_params(), tiny_batch()
    g = plain_grad(model, w, batch)
    t = {k: (v.abs() + eta) if k.endswith("weight") else torch.ones_like(v) for k, v in w.items()}
    tg_norm = torch.sqrt(sum(((t[k] * g[k]) ** 2).sum() for k in g))
    eps = {k: rho * t[k] ** 2 * g[k] / tg_norm for k in g}
    expected = plain_grad(model, shifted(w, eps), batch)
    got, _ = algo.local_grad(w, batch, ctx_for(algo, w))
    assert_trees_equal(got, expected, atol=1e-12)


def test_fedsam_rho0_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    sam, _, _ = train(make_spec("algorithm=fedsam", "algorithm.rho=0.0", *SMALL))
    assert_trees_equal(sam, avg)
    sam1, _, _ = train(make_spec("algorithm=fedsam", *SMALL))
    assert any(not torch.equal(sam1[k], avg[k]) for k in avg)


def test_mofedsam_alpha1_equals_fedsam(make_spec) -> None:
    sam, _, _ = train(make_spec("algorithm=fedsam", "algorithm.rho=0.05", *SMALL))
    mo, state, _ = train(make_spec("algorithm=mofedsam", "algorithm.rho=0.05", "algorithm.alpha=1.0", *SMALL))
    assert_trees_equal(mo, sam)
    assert any(float(v.abs().max()) > 0 for v in state["delta"].values())


def test_mofedsam_direction_and_server_pseudo_gradient() -> None:
    model = tiny_model()
    algo = make_algo("mofedsam", model, rho=0.05, alpha=0.3)
    w, batch = model.init_params(), tiny_batch()
    delta = {k: torch.full_like(v, 0.2) for k, v in w.items()}
    ctx = ctx_for(algo, w, extras={"delta": delta})
    sam = make_algo("fedsam", model, rho=0.05).local_grad(w, batch, ctx)[0]
    got, _ = algo.local_grad(w, batch, ctx)
    for k in w:
        torch.testing.assert_close(got[k], 0.3 * sam[k] + 0.7 * 0.2, atol=1e-12, rtol=0)
    # Server: Delta^{t+1} = -mean(w_i - w^t) / (K eta_l), w^{t+1} = mean w_i (eta_g = 1).
    ups = stack([{k: v + 1.0 for k, v in w.items()}, {k: v + 3.0 for k, v in w.items()}])
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([5.0, 5.0]), torch.tensor([4, 4]), 0.5)
    new, state, _ = algo.aggregate(w, algo.server_init(w), {"params": ups}, torch.tensor([0.5, 0.5]), info)
    for k in w:
        torch.testing.assert_close(new[k], w[k] + 2.0)
        torch.testing.assert_close(state["delta"][k], torch.full_like(w[k], -2.0 / (4 * 0.5)))
