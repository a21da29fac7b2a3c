"""FedDyn: local objective, g_i and server updates, and the alpha -> 0 limit."""

from __future__ import annotations

import pytest
import torch
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import ClientContext, RoundInfo
from fedrun.algorithms.feddyn import FedDyn
from fedrun.config.schema import FLConfig
from fedrun.core.tree import stack


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


def _official(alpha: float, sizes: list[int]):  # noqa: ANN202
    """FedDyn variant=official on the tiny model, with the run-level n (all clients' samples) it reads at setup."""
    algo = make_algo("feddyn", tiny_model(), fl=FLConfig(clients=len(sizes)), alpha=alpha, variant="official")
    algo.total_size = float(sum(sizes))
    return algo


def test_feddyn_official_client_matches_the_authors_loss() -> None:
    """alpha_i = alpha / (N n_i / n) and loss f + alpha_i <w, -w^t + l_i> + weight decay alpha_i
    (utils_general.train_feddyn_mdl), written out with plain autograd; l_i = -g_i / alpha_i."""
    alpha, sizes, i = 0.3, [10, 30, 20], 1
    algo = _official(alpha, sizes)
    model = algo.model
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.2 for k, v in wt.items()}
    alpha_i = alpha / (len(sizes) * sizes[i] / sum(sizes))
    lpl = {k: torch.full_like(v, -0.7) for k, v in wt.items()}
    ctx = ClientContext(
        wt,
        {},
        {"grad": {k: -alpha_i * v for k, v in lpl.items()}},
        0.1,
        torch.tensor(float(sizes[i]), dtype=torch.float64),
    )
    got, _ = algo.local_grad(w, batch, ctx)

    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in w.items()}
    flat = torch.cat([leaves[k].reshape(-1) for k in leaves])
    cld = torch.cat([wt[k].reshape(-1) for k in wt])
    local = torch.cat([lpl[k].reshape(-1) for k in lpl])
    loss = model.loss(leaves, batch) + alpha_i * torch.sum(flat * (-cld + local)) + 0.5 * alpha_i * flat.pow(2).sum()
    want = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
    for k in w:
        torch.testing.assert_close(got[k], want[k], atol=1e-12, rtol=0)
    _, state = algo.client_finish(wt, w, ctx, torch.tensor(3))
    for k in w:  # l_i += w_i - w^t
        torch.testing.assert_close(-state["grad"][k] / alpha_i, lpl[k] + 0.2)


def test_feddyn_official_server_broadcasts_the_cloud_model_and_evaluates_the_average() -> None:
    """Two rounds of utils_methods.train_FedDyn's server on 4 clients: avg = np.mean(cohort's models),
    cld = avg + mean over all 4 clients of local_param_list (each client's accumulated w_i - cld)."""
    sizes = [10, 30, 20, 40]
    algo = _official(0.1, sizes)
    w0 = algo.model.init_params()
    keys = list(w0)
    flat = lambda t: torch.cat([t[k].reshape(-1) for k in keys])  # noqa: E731
    local_param_list = torch.zeros(4, flat(w0).numel(), dtype=torch.float64)
    cld_ref = flat(w0)
    params, state = w0, algo.server_init(w0)
    g = torch.Generator().manual_seed(3)
    for rnd, cohort in enumerate(([0, 2], [1, 2, 3])):
        ups = [{k: v + torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in params.items()} for _ in cohort]
        for c, up in zip(cohort, ups, strict=True):
            local_param_list[c] += flat(up) - cld_ref
        avg_ref = torch.stack([flat(u) for u in ups]).mean(0)
        cld_ref = avg_ref + local_param_list.mean(0)
        sz = torch.tensor([float(sizes[c]) for c in cohort], dtype=torch.float64)
        info = RoundInfo(rnd, 4, torch.tensor(cohort), sz, torch.ones(len(cohort)), 0.1)
        params, state, _ = algo.aggregate(params, state, {"params": stack(ups)}, sz / sz.sum(), info)
        torch.testing.assert_close(flat(params), cld_ref, atol=1e-12, rtol=0)
        torch.testing.assert_close(flat(algo.eval_params(params, state)), avg_ref, atol=1e-12, rtol=0)


def test_the_runner_evaluates_feddyns_official_average(make_spec, tmp_path) -> None:  # noqa: ANN001
    from fedrun.metrics.evaluate import evaluate
    from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from fedrun.run.experiment import build_experiment
    from fedrun.run.loop import run

    spec = make_spec(*SMALL, "algorithm=feddyn", "algorithm.variant=official", "fl.participation=0.5")
    summary = run(spec, tmp_path)
    ck = load_checkpoint(tmp_path / CHECKPOINT_FILE)
    exp = build_experiment(spec)
    avg_acc, _ = evaluate(exp.model, ck.server_state["avg"], exp.fed, exp.fed.test, 512)
    cld_acc, _ = evaluate(exp.model, ck.params, exp.fed, exp.fed.test, 512)
    assert summary["test_acc_final"] == avg_acc != cld_acc


@pytest.mark.parametrize("variant", ["law", "paper"])
def test_feddyn_law_takes_the_first_clients_batchnorm_buffers(make_spec, tmp_path, monkeypatch, variant: str) -> None:
    # FedLAW's server_funct.feddyn: central_node.model = copy.deepcopy(uploaded_models[0]), parameters then
    # overwritten, so the global BatchNorm buffers are the first selected client's; the paper form (and
    # every client-side method) averages them like the parameters
    from test_fedlaw import one_bn_round

    seen, buffers = one_bn_round(
        make_spec, tmp_path, monkeypatch, FedDyn, "algorithm=feddyn", f"algorithm.variant={variant}"
    )
    ups = seen["uploads"]["buffers"]
    first = {k: v[0] for k, v in ups.items()}
    w = seen["weights"].to(torch.float64)
    mean = {
        k: (torch.tensordot(w.to(v.dtype), v, dims=1) if v.is_floating_point() else v.max(0).values)
        for k, v in ups.items()
    }
    want = first if variant == "law" else mean
    assert not torch.allclose(first["stem.1.running_var"], mean["stem.1.running_var"])
    for k, v in want.items():
        torch.testing.assert_close(buffers[k], v)


def test_feddyn_official_clips_the_codes_gradient_and_adds_alpha_w_after() -> None:
    # utils_general.train_feddyn_mdl: loss = f + alpha_i <w, -w^t + l_i>; clip_grad_norm_(10) on its gradient;
    # SGD(weight_decay=alpha_i + wd) adds (alpha_i + wd) w after the clip. Plain torch, clip 0.3 binding.
    alpha, sizes, i, lr, clip = 0.3, [10, 30, 20], 1, 0.1, 0.3
    algo = _official(alpha, sizes)
    algo.fl = FLConfig(clients=len(sizes), grad_clip=clip, momentum=0.0, weight_decay=0.0)
    model = algo.model
    wt, batch = model.init_params(), tiny_batch()
    w = {k: v + 0.2 for k, v in wt.items()}
    alpha_i = alpha / (len(sizes) * sizes[i] / sum(sizes))
    lpl = {k: torch.full_like(v, -0.7) for k, v in wt.items()}
    size = torch.tensor(float(sizes[i]), dtype=torch.float64)
    ctx = ClientContext(wt, {}, {"grad": {k: -alpha_i * v for k, v in lpl.items()}}, lr, size)
    got, _, _, _ = algo.client_step(w, None, batch, ctx)

    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    for p, k in zip(net.parameters(), w, strict=True):
        p.data.copy_(w[k])
    flat = torch.cat([p.reshape(-1) for p in net.parameters()])
    cld = torch.cat([wt[k].reshape(-1) for k in wt])
    local = torch.cat([lpl[k].reshape(-1) for k in lpl])
    loss = torch.nn.functional.cross_entropy(net(batch["x"]), batch["y"]) + alpha_i * torch.sum(flat * (-cld + local))
    loss.backward()
    assert float(torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=clip)) > clip  # the clip binds
    opt = torch.optim.SGD(net.parameters(), lr=lr, weight_decay=alpha_i)
    opt.step()
    for p, k in zip(net.parameters(), w, strict=True):
        torch.testing.assert_close(got[k], p.detach(), atol=1e-12, rtol=0)
