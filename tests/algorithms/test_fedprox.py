"""FedProx: the proximal gradient by hand and mu = 0 == FedAvg (the issue's reduction list)."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train


def test_fedprox_gradient_adds_mu_times_distance() -> None:
    model = tiny_model()
    algo = make_algo("fedprox", model, mu=0.3)
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.5 for k, v in wt.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, wt))
    g = plain_grad(model, w, batch)
    for k in w:
        torch.testing.assert_close(got[k], g[k] + 0.3 * 0.5, atol=1e-12, rtol=0)


def test_fedprox_mu0_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    prox, _, _ = train(make_spec("algorithm=fedprox", "algorithm.mu=0.0", *SMALL))
    assert_trees_equal(prox, avg)
