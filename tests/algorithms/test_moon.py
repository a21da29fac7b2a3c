"""MOON: the model-contrastive loss by hand, the previous-model state, and mu = 0 == FedAvg."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, tiny_batch, tiny_model, train

from fedrun.algorithms.moon import contrastive_loss


def _z(params, x):  # noqa: ANN001, ANN202 - tiny model: z = tanh(x W1^T + b1)
    return torch.tanh(x @ params["0.weight"].T + params["0.bias"])


def test_contrastive_loss_formula() -> None:
    g = torch.Generator().manual_seed(0)
    z, zg, zp = (torch.randn(5, 3, generator=g) for _ in range(3))
    tau = 0.5
    pos = torch.exp(F.cosine_similarity(z, zg) / tau)
    neg = torch.exp(F.cosine_similarity(z, zp) / tau)
    torch.testing.assert_close(contrastive_loss(z, zg, zp, tau), -torch.log(pos / (pos + neg)))


def test_moon_local_loss_by_hand_and_state() -> None:
    model = tiny_model()
    mu, tau = 2.0, 0.5
    algo = make_algo("moon", model, mu=mu, tau=tau)
    wt, batch = model.init_params(), tiny_batch()
    prev = {k: v * 0.5 for k, v in wt.items()}
    w = {k: v + 0.1 for k, v in wt.items()}
    ctx = ctx_for(algo, wt, state={"prev": prev})
    x = batch["x"]
    z, zg, zp = _z(w, x), _z(wt, x), _z(prev, x)
    pos = torch.exp(F.cosine_similarity(z, zg) / tau)
    neg = torch.exp(F.cosine_similarity(z, zp) / tau)
    expected = model.loss(w, batch) + mu * (-torch.log(pos / (pos + neg))).mean()
    torch.testing.assert_close(algo.local_loss(w, batch, ctx), expected)
    grads, _ = algo.local_grad(w, batch, ctx)
    assert all(torch.isfinite(v).all() for v in grads.values())
    assert_trees_equal(algo.client_init(wt)["prev"], wt)
    _, state = algo.client_finish(wt, w, ctx, torch.tensor(3))
    assert_trees_equal(state["prev"], w)


def test_moon_mu0_equals_fedavg(make_spec) -> None:
    avg, _, _ = train(make_spec("algorithm=fedavg", *SMALL))
    moon0, _, _ = train(make_spec("algorithm=moon", "algorithm.mu=0.0", *SMALL))
    assert_trees_equal(moon0, avg)
    moon, _, log = train(make_spec("algorithm=moon", *SMALL))
    assert any(not torch.allclose(moon[k], avg[k]) for k in avg)
    prev = log[-1]["states"].rows["prev"]  # each client's row now holds its last local model
    ups, clients = log[-1]["uploads"]["params"], log[-1]["info"].clients
    for k in prev:
        torch.testing.assert_close(prev[k][clients], ups[k])


def test_moon_ima_variant_averages_cosines_first() -> None:
    g = torch.Generator().manual_seed(1)
    z, zg, zp = (torch.randn(4, 3, generator=g) for _ in range(3))
    pos = F.cosine_similarity(z, zg).mean() / 0.5
    neg = F.cosine_similarity(z, zp).mean() / 0.5
    expected = -torch.log(torch.exp(pos) / (torch.exp(pos) + torch.exp(neg)))
    torch.testing.assert_close(contrastive_loss(z, zg, zp, 0.5, batch_mean=True), expected)
    assert not torch.allclose(contrastive_loss(z, zg, zp, 0.5).mean(), expected)
