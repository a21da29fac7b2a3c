"""FedGAM (eq. 19), the official GAM variant, FedGAM-CV (Alg. 2) and their reductions."""

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


def _sam_point(model, w, batch, rho):  # noqa: ANN001, ANN202
    g = plain_grad(model, w, batch)
    n = torch.sqrt(sum((v**2).sum() for v in g.values()))
    return g, plain_grad(model, shifted(w, {k: rho * v / n for k, v in g.items()}), batch)


def test_fedgam_gradient_eq19() -> None:
    model = tiny_model()
    rho, alpha = 0.3, 0.4
    algo = make_algo("fedgam", model, rho=rho, alpha=alpha)
    w, batch = model.init_params(), tiny_batch()
    g, g_hat = _sam_point(model, w, batch, rho)
    got, _ = algo.local_grad(w, batch, ctx_for(algo, w))
    for k in w:
        torch.testing.assert_close(got[k], g[k] + alpha * rho * g_hat[k], atol=1e-12, rtol=0)


def test_official_gam_without_decomposition_is_beta_mix_of_sam_gradients() -> None:
    model = tiny_model()
    w, batch = model.init_params(), tiny_batch()
    sam = make_algo("fedgam", model, variant="official", rho=0.1, gamma=0.0, beta1=1.0, beta3=0.0)
    _, g1 = _sam_point(model, w, batch, 0.1)
    got, _ = sam.local_grad(w, batch, ctx_for(sam, w))
    assert_trees_equal(got, g1, atol=1e-12)
    full = make_algo("fedgam", model, variant="official")
    d, _ = full.local_grad(w, batch, ctx_for(full, w))
    assert all(torch.isfinite(v).all() for v in d.values())
    assert any(not torch.allclose(d[k], g1[k]) for k in w)


def test_fedgam_alpha0_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    gam, _, _ = train(make_spec("algorithm=fedgam", "algorithm.alpha=0.0", *SMALL))
    assert_trees_equal(gam, avg)


def test_fedgam_cv_alpha0_equals_scaffold_with_full_participation(make_spec) -> None:
    # Full participation makes SCAFFOLD's m/N factor 1, so the two server rules coincide.
    common = (*SMALL, "fl.rounds=3", "fl.weighting=uniform")
    sc, sc_state, _ = train(make_spec("algorithm=scaffold", *common))
    cv, cv_state, _ = train(make_spec("algorithm=fedgam_cv", "algorithm.alpha=0.0", *common))
    assert_trees_equal(cv, sc, atol=1e-6)
    assert_trees_equal(cv_state["c"], sc_state["c"], atol=1e-5)


def test_fedgam_cv_server_rule_has_no_participation_factor() -> None:
    model = tiny_model()
    algo = make_algo("fedgam_cv", model)
    w = model.init_params()
    state = {"c": {k: torch.ones_like(v) for k, v in w.items()}}
    dc = stack([{k: torch.full_like(v, 2.0) for k, v in w.items()}, {k: torch.full_like(v, 4.0) for k, v in w.items()}])
    ups = {"params": stack([w, w]), "delta_c": dc}
    info = RoundInfo(0, 100, torch.tensor([3, 7]), torch.tensor([1.0, 1.0]), torch.tensor([2, 2]), 0.1)
    _, new_state, _ = algo.aggregate(w, state, ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    for k in w:
        torch.testing.assert_close(new_state["c"][k], torch.full_like(w[k], 1.0 + 3.0))
    sc = make_algo("scaffold", model)
    _, sc_state, _ = sc.aggregate(w, state, ups, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    for k in w:
        torch.testing.assert_close(sc_state["c"][k], torch.full_like(w[k], 1.0 + 3.0 * 2 / 100))


def test_fedgam_cv_step_is_corrected_gam_gradient() -> None:
    model = tiny_model()
    algo = make_algo("fedgam_cv", model, rho=0.3, alpha=0.4)
    w, batch = model.init_params(), tiny_batch()
    c = {k: torch.full_like(v, 0.5) for k, v in w.items()}
    ci = {k: torch.full_like(v, -0.25) for k, v in w.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, w, extras={"c": c}, state={"c_i": ci}))
    gam, _ = make_algo("fedgam", model, rho=0.3, alpha=0.4).local_grad(w, batch, ctx_for(algo, w))
    for k in w:
        torch.testing.assert_close(got[k], gam[k] + 0.25 + 0.5, atol=1e-12, rtol=0)
