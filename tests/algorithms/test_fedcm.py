"""FedCM: v = alpha g + (1 - alpha) Delta^t, and alpha = 1 is FedAvg."""

from __future__ import annotations

import torch
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train


def test_fedcm_direction_mixes_gradient_and_global_update() -> None:
    model = tiny_model()
    algo = make_algo("fedcm", model, alpha=0.25)
    w, batch = model.init_params(), tiny_batch()
    delta = {k: torch.linspace(-1, 1, v.numel(), dtype=v.dtype).reshape(v.shape) for k, v in w.items()}
    got, _ = algo.local_grad(w, batch, ctx_for(algo, w, extras={"delta": delta}))
    g = plain_grad(model, w, batch)
    for k in w:
        torch.testing.assert_close(got[k], 0.25 * g[k] + 0.75 * delta[k], atol=1e-12, rtol=0)


def test_fedcm_alpha1_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    cm, state, _ = train(make_spec("algorithm=fedcm", "algorithm.alpha=1.0", *SMALL))
    assert_trees_equal(cm, avg)
    cm_small, _, _ = train(make_spec("algorithm=fedcm", *SMALL))
    assert any(not torch.allclose(cm_small[k], avg[k]) for k in avg)
