"""FedAvg and FedProx: one-client FedAvg is centralized SGD; FedProx's gradient; mu=0 reduces to FedAvg."""

from __future__ import annotations

import torch

from fedrun.algorithms.base import ClientContext, RoundInfo
from fedrun.core.tree import stack
from fedrun.run.experiment import build_experiment


def one_round(exp, params, clients, lr):  # noqa: ANN001, ANN201
    res = exp.engine.train_cohort(0, params, {}, torch.tensor(clients), {}, lr)
    sizes = exp.fed.sizes[clients].double()
    info = RoundInfo(0, exp.spec.fl.clients, torch.tensor(clients), sizes, res.steps, lr)
    new, _, _ = exp.algorithm.aggregate(params, {}, res.uploads, sizes / sizes.sum(), info)
    return new


def test_fedavg_one_client_full_batch_one_step_is_centralized_sgd(make_spec) -> None:
    spec = make_spec(
        "data.max_train_samples=500",
        "data.max_test_samples=100",
        "fl.clients=1",
        "partition=iid",
        "fl.local_steps=1",
        "fl.batch_size=500",
        "fl.lr=0.1",
    )
    exp = build_experiment(spec)
    w0 = exp.model.init_params()
    new = one_round(exp, w0, [0], 0.1)
    everything = exp.fed.batch(torch.arange(500))
    grads = torch.func.grad(exp.model.loss)(w0, everything)
    for k in w0:
        torch.testing.assert_close(new[k], w0[k] - 0.1 * grads[k], atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(new[k], w0[k]) for k in w0)


def test_fedprox_gradient_adds_mu_times_distance(make_spec) -> None:
    spec = make_spec("algorithm=fedprox", "algorithm.mu=0.3", "experiment=smoke")
    exp = build_experiment(spec)
    w_glob = exp.model.init_params()
    w = {k: v + 0.01 * torch.randn_like(v) for k, v in w_glob.items()}
    batch = exp.fed.batch(torch.arange(64))
    ctx = ClientContext(w_glob, {}, {}, 0.1)
    g, _ = exp.algorithm.local_grad(w, batch, ctx)
    g_ce = torch.func.grad(exp.model.loss)(w, batch)
    for k in w:
        torch.testing.assert_close(g[k], g_ce[k] + 0.3 * (w[k] - w_glob[k]), atol=1e-6, rtol=1e-5)


def test_fedprox_mu_zero_equals_fedavg(make_spec) -> None:
    common = ("experiment=smoke", "fl.clients=4", "fl.momentum=0.9", "fl.weight_decay=1e-3")
    fa = build_experiment(make_spec("algorithm=fedavg", *common))
    fp = build_experiment(make_spec("algorithm=fedprox", "algorithm.mu=0.0", *common))
    w = fa.model.init_params()
    for k, v in fp.model.init_params().items():
        assert torch.equal(w[k], v), "every algorithm must start from the same initial model"
    a, b = one_round(fa, w, [0, 1, 2, 3], 0.05), one_round(fp, w, [0, 1, 2, 3], 0.05)
    for k in a:
        assert torch.equal(a[k], b[k])


def test_fedprox_mu_positive_stays_closer_to_global(make_spec) -> None:
    common = ("experiment=smoke", "fl.clients=2", "fl.local_epochs=2")
    fa = build_experiment(make_spec("algorithm=fedavg", *common))
    fp = build_experiment(make_spec("algorithm=fedprox", "algorithm.mu=1.0", *common))
    w = fa.model.init_params()
    ra = fa.engine.train_cohort(0, w, {}, torch.tensor([0]), {}, 0.05).uploads["params"]
    rp = fp.engine.train_cohort(0, w, {}, torch.tensor([0]), {}, 0.05).uploads["params"]
    dist = lambda r: sum(float((r[k][0] - w[k]).pow(2).sum()) for k in w)  # noqa: E731
    assert dist(rp) < dist(ra)


def test_aggregate_of_identical_models_is_that_model(make_spec) -> None:
    exp = build_experiment(make_spec("experiment=smoke"))
    w = exp.model.init_params()
    uploads = {"params": stack([w, w, w])}
    info = RoundInfo(0, 3, torch.arange(3), torch.tensor([5.0, 1.0, 7.0]), torch.tensor([1, 1, 1]), 0.1)
    new, _, _ = exp.algorithm.aggregate(w, {}, uploads, torch.tensor([5.0, 1.0, 7.0]) / 13, info)
    for k in w:
        torch.testing.assert_close(new[k], w[k], atol=1e-7, rtol=0)
