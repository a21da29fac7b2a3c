"""FedDF / FedBE / Server-FT on a tiny proxy set: zero KL gradient with one teacher, real training otherwise."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from fedrun.algorithms.base import RoundInfo, SetupEnv
from fedrun.algorithms.distill import (
    DistillParams,
    FedBE,
    FedDF,
    ServerFT,
    ServerFTParams,
    kl_to_teacher,
    swag_gaussian,
)
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.schema import FLConfig, ProxyConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import stack, unstack
from fedrun.data.base import Dataset, Split
from fedrun.data.federated import FederatedData
from fedrun.data.proxy import ProxySet, carve_proxy
from fedrun.models.base import FunctionalModel

C, D = 4, 6


def tiny_env() -> tuple[FunctionalModel, SetupEnv]:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(C).repeat(50)
    x = torch.randn(len(y), D, generator=g) + 2.0 * torch.nn.functional.one_hot(y, D).float()
    data = Dataset("tiny", Split(x, y), Split(x.clone(), y.clone()), C, (D,))
    proxy_split, test = carve_proxy(data.test, C, ProxyConfig(per_class=20), seed=0)
    fed = FederatedData(data, [np.arange(100), np.arange(100, 200)], torch.device("cpu"), test=test)
    torch.manual_seed(0)
    model = FunctionalModel(torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.ReLU(), torch.nn.Linear(8, C)))
    return model, SetupEnv(torch.device("cpu"), 0, fed, ProxySet(proxy_split, C, 32))


def cohort(model: FunctionalModel, m: int) -> tuple[dict, dict, torch.Tensor, RoundInfo]:
    g = torch.Generator().manual_seed(1)
    params = model.init_params()
    clients = [{k: v + torch.randn(v.shape, generator=g) for k, v in params.items()} for _ in range(m)]
    sizes = torch.arange(1, m + 1, dtype=torch.float64)
    return params, {"params": stack(clients)}, sizes / sizes.sum(), RoundInfo(0, m, torch.arange(m), sizes, sizes, 0.1)


def make(cls: type, hp: object, env: SetupEnv, model: FunctionalModel):  # noqa: ANN201
    algo = cls(hp, FLConfig(), model)
    algo.setup(env)
    return algo


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_feddf_with_one_teacher_equal_to_the_student_leaves_it_unchanged(optimizer: str) -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, 1)
    hp = DistillParams(server_epochs=5, server_lr=0.1, optimizer=optimizer)
    algo = make(FedDF, hp, env, model)
    new, _, diag = algo.aggregate(params, {}, uploads, weights, info)
    assert diag["server_loss"] == pytest.approx(0.0, abs=1e-5)
    for k, w in uploads["params"].items():
        if optimizer == "adam":  # zero gradient: Adam does not move
            torch.testing.assert_close(new[k], w[0], rtol=0, atol=0)
        else:  # the code's SGD has weight decay 5e-4, so only the (small) decay moves it
            torch.testing.assert_close(new[k], w[0], rtol=0.02, atol=1e-5)
            assert not torch.equal(new[k], w[0])


def test_kl_matches_torch_kl_div() -> None:
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    want = torch.nn.functional.kl_div(s.log_softmax(1), t.softmax(1), reduction="batchmean")
    torch.testing.assert_close(kl_to_teacher(s, t), want)


def test_feddf_moves_the_student_towards_the_ensemble() -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, 3)
    start = FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)[0]
    few = make(FedDF, DistillParams(server_epochs=1, server_lr=0.01), env, model)
    many = make(FedDF, DistillParams(server_epochs=30, server_lr=0.01), env, model)
    _, _, d1 = few.aggregate(params, {}, uploads, weights, info)
    new, _, d30 = many.aggregate(params, {}, uploads, weights, info)
    assert d30["server_loss"] < d1["server_loss"]
    assert any(not torch.equal(new[k], start[k]) for k in start)


def test_fedbe_teachers_and_swag_sample() -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, 3)
    algo = make(FedBE, DistillParams(server_epochs=2), env, model)
    teachers = algo.teachers(params, uploads["params"], None, weights, info)
    assert len(teachers) == 3 + 2  # FedAvg model + clients + one SWAG sample
    # identical client updates: u has zero variance (clamped to 1e-5), so the sample is w + Delta (+ tiny noise)
    same = stack([{k: v + 0.5 for k, v in params.items()}] * 3)
    sample = swag_gaussian(params, same, torch.Generator().manual_seed(0))
    for k, w in params.items():
        torch.testing.assert_close(sample[k], w + 0.5, atol=0.5 * 0.1 * 1e-5**0.5 * 6 * w.numel() ** 0.5, rtol=0)
    new, _, diag = algo.aggregate(params, {}, uploads, weights, info)
    assert np.isfinite(diag["server_loss"]) and all(torch.isfinite(v).all() for v in new.values())


def test_serverft_lowers_the_proxy_loss_of_fedavg() -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, 3)
    algo = make(ServerFT, ServerFTParams(server_epochs=10, server_lr=0.01), env, model)
    start = FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)[0]
    new, _, _ = algo.aggregate(params, {}, uploads, weights, info)
    proxy = algo.proxy_batch()
    assert float(model.loss(new, proxy)) < float(model.loss(start, proxy))
    assert ServerFTParams().server_epochs == 2 and DistillParams().server_epochs == 100


def test_serverft_sgd_is_the_codes_persistent_central_optimiser() -> None:
    # FedLAW code (server_funct.server_finetune): the FedAvg state dict is loaded into the central model, whose
    # SGD(lr, momentum 0.9, weight decay) is built once, so round 2 starts from round 1's momentum buffer. Two
    # rounds of two full-batch epochs against that plain-torch loop.
    model, env = tiny_env()
    assert env.proxy is not None
    env = dataclasses.replace(env, proxy=ProxySet(env.proxy.split, C, 128))  # the 80 proxy samples: one batch
    hp = ServerFTParams(server_epochs=2, server_lr=0.08, optimizer="sgd", server_weight_decay=5e-5)
    algo = make(ServerFT, hp, env, model)
    ref = copy.deepcopy(model.module)
    opt = torch.optim.SGD(ref.parameters(), lr=0.08, momentum=0.9, weight_decay=5e-5)
    proxy = algo.proxy_batch()
    params, state = model.init_params(), None
    for rnd in range(2):
        _, uploads, weights, info = cohort(model, 3)
        uploads = {"params": {k: v * (1 + rnd) for k, v in uploads["params"].items()}}
        state = algo.server_init(params) if state is None else state
        params, state, _ = algo.aggregate(params, state, uploads, weights, info._replace(round=rnd))
        w = weights.to(torch.float32)
        with torch.no_grad():
            for p, v in zip(ref.parameters(), uploads["params"].values(), strict=True):
                p.copy_((w.reshape(-1, *[1] * (v.dim() - 1)) * v).sum(0))
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ref(proxy["x"]), proxy["y"]).backward()
            opt.step()
        for k, p in ref.named_parameters():
            torch.testing.assert_close(params[k], p.detach(), atol=1e-6, rtol=1e-5)
    # a fresh optimiser each round (no kept momentum) would differ in round 2
    fresh = make(ServerFT, hp, env, model)
    again = fresh.aggregate(params, fresh.server_init(params), uploads, weights, info)[0]
    assert any(not torch.allclose(again[k], params[k], atol=1e-6) for k in params)


def test_proxy_methods_refuse_to_run_without_a_proxy_set(make_spec) -> None:  # noqa: ANN001 - fixture
    model, env = tiny_env()
    for cls in (FedDF, FedBE, ServerFT):
        with pytest.raises(ConfigError, match="proxy.per_class"):
            make(cls, DistillParams(), dataclasses.replace(env, proxy=None), model)
    with pytest.raises(ConfigError, match="algorithm.optimizer"):
        make_spec("algorithm=feddf", "algorithm.optimizer=lbfgs")


# ---- BatchNorm models (FedLAW code: server_funct.py feddf / fedbe / server_finetune) ---------------------------------
def bn_env(batch: int = 128) -> tuple[FunctionalModel, SetupEnv]:
    """tiny_env's data and proxy (80 samples: one batch), a Linear-BatchNorm-ReLU-Linear model."""
    _, env = tiny_env()
    assert env.proxy is not None
    env = dataclasses.replace(env, proxy=ProxySet(env.proxy.split, C, batch))
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, C))
    return FunctionalModel(module), env


def bn_cohort(model: FunctionalModel, m: int) -> tuple[dict, dict, torch.Tensor, RoundInfo]:
    params, uploads, weights, info = cohort(model, m)
    g = torch.Generator().manual_seed(2)
    bufs = [
        {
            "1.running_mean": torch.randn(8, generator=g),
            "1.running_var": torch.rand(8, generator=g) + 0.5,
            "1.num_batches_tracked": torch.tensor(7 + i),
        }
        for i in range(m)
    ]
    return params, {**uploads, "buffers": stack(bufs)}, weights, info


def plain_module(model: FunctionalModel, params: dict, buffers: dict) -> torch.nn.Module:
    """A copy of the module holding ``params`` and ``buffers`` (for plain-torch reference forwards)."""
    module = copy.deepcopy(model.module)
    module.load_state_dict({**params, **buffers})
    return module


def test_feddf_teachers_use_their_own_clients_statistics() -> None:
    model, env = bn_env()
    params, uploads, weights, info = bn_cohort(model, 2)
    algo = make(FedDF, DistillParams(server_epochs=1), env, model)
    teachers = algo.teachers(params, uploads["params"], uploads["buffers"], weights, info)
    x = algo.proxy_batch()["x"]
    want = 0
    for i in range(2):
        module = plain_module(model, unstack(uploads["params"], i), unstack(uploads["buffers"], i)).eval()
        with torch.no_grad():
            want = want + module(x)
    torch.testing.assert_close(algo.teacher_logits(teachers, x), want / 2)
    assert model.module.training  # the student's passes stay in train mode


@pytest.mark.parametrize("cls", [FedDF, FedBE, ServerFT])
def test_the_students_statistics_become_the_global_ones(cls: type) -> None:
    # one epoch of one proxy batch: the student's single train-mode pass moves the clients' mean statistics
    # (FedLAW code: load_state_dict(fedavg(state dicts)), then central_node.model.train()) by momentum 0.1
    model, env = bn_env()
    params, uploads, weights, info = bn_cohort(model, 3)
    algo = make(cls, DistillParams(server_epochs=1), env, model)
    assert algo.owns_buffers
    w = weights.to(torch.float32)
    mean = {k: (w.reshape(-1, 1) * v).sum(0) for k, v in uploads["buffers"].items() if v.is_floating_point()}
    start = {**mean, "1.num_batches_tracked": uploads["buffers"]["1.num_batches_tracked"].max()}
    student = {k: (w.reshape(-1, *[1] * (v.dim() - 1)) * v).sum(0) for k, v in uploads["params"].items()}
    module = plain_module(model, student, start).train()
    with torch.no_grad():
        module(algo.proxy_batch()["x"])
    algo.aggregate(params, algo.server_init(params), uploads, weights, info)
    for k, v in module.state_dict().items():
        if k in model.buffers:
            torch.testing.assert_close(model.buffers[k], v)
