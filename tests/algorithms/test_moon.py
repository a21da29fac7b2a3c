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


def test_moon_frozen_passes_run_in_eval_mode_on_a_batchnorm_model() -> None:
    # MOON's code: global_net.eval() and previous_net.eval(): the frozen models normalise with running
    # statistics (the global model's; the previous one with the client's running copy) and do not update them
    from fedrun.models.base import FunctionalModel

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh(), torch.nn.Linear(3, 2)
    ).double()
    model = FunctionalModel(net)
    model.set_buffers(
        {
            "1.running_mean": torch.full((3,), 0.3, dtype=torch.float64),
            "1.running_var": torch.full((3,), 2.0, dtype=torch.float64),
        }
    )
    mu, tau = 2.0, 0.5
    algo = make_algo("moon", model, mu=mu, tau=tau)
    wt, batch = model.init_params(), tiny_batch()
    prev = {k: v * 0.5 for k, v in wt.items()}
    w = {k: v + 0.1 for k, v in wt.items()}
    client = {k: v.clone() for k, v in model.buffers.items()}
    client["1.running_mean"] = torch.full((3,), -0.2, dtype=torch.float64)
    ctx = ctx_for(algo, wt, state={"prev": prev})
    got = algo.local_loss(w, {**batch, "buffers": client}, ctx)

    def rep(params, stats, train: bool):  # noqa: ANN001, ANN202 - plain torch, eval mode by hand
        h = batch["x"] @ params["0.weight"].T + params["0.bias"]
        if train:
            mean, var = h.mean(0), h.var(0, unbiased=False)
        else:
            mean, var = stats["1.running_mean"], stats["1.running_var"]
        h = (h - mean) / torch.sqrt(var + 1e-5) * params["1.weight"] + params["1.bias"]
        return torch.tanh(h)

    z = rep(w, None, True)
    zg, zp = rep(wt, model.buffers, False), rep(prev, client, False)
    logits = z @ w["3.weight"].T + w["3.bias"]
    pos = torch.exp(F.cosine_similarity(z, zg) / tau)
    neg = torch.exp(F.cosine_similarity(z, zp) / tau)
    want = F.cross_entropy(logits, batch["y"]) + mu * (-torch.log(pos / (pos + neg))).mean()
    torch.testing.assert_close(got, want)
    assert net.training
