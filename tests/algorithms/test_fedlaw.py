"""FedLAW: fixed weights reduce to FedAvg; learning gamma on a proxy that rewards shrinking gives gamma < 1."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from fedrun.algorithms.base import RoundInfo, SetupEnv, average_buffers
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedlaw import FedLAW, FedLAWGammaParams, FedLAWParams, FedLAWSWAParams
from fedrun.config.schema import FLConfig, ProxyConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import clone, stack
from fedrun.data.base import Dataset, Split
from fedrun.data.federated import FederatedData
from fedrun.data.proxy import ProxySet, carve_proxy
from fedrun.models.base import FunctionalModel
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.loop import run

C, D = 4, 6


def tiny_env(random_labels: bool = False, per_class: int = 20) -> tuple[FunctionalModel, SetupEnv]:
    """A linear model on Gaussian features; the proxy has ``per_class`` samples per class."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(C).repeat(50)
    x = torch.randn(len(y), D, generator=g) + 2.0 * torch.nn.functional.one_hot(y, D).float()
    test_y = torch.randint(0, C, (len(y),), generator=g) if random_labels else y
    data = Dataset("tiny", Split(x, y), Split(x.clone(), test_y), C, (D,))
    proxy_split, test = carve_proxy(data.test, C, ProxyConfig(per_class=per_class), seed=0)
    fed = FederatedData(data, [np.arange(100), np.arange(100, 200)], torch.device("cpu"), test=test)
    torch.manual_seed(0)
    model = FunctionalModel(torch.nn.Linear(D, C))
    return model, SetupEnv(torch.device("cpu"), 0, fed, ProxySet(proxy_split, C, 128))


def cohort(model: FunctionalModel, m: int = 3, scale: float = 1.0) -> tuple[dict, dict, torch.Tensor, RoundInfo]:
    g = torch.Generator().manual_seed(1)
    params = model.init_params()
    clients = [{k: scale * (v + torch.randn(v.shape, generator=g)) for k, v in params.items()} for _ in range(m)]
    sizes = torch.tensor([10.0, 30.0, 60.0][:m], dtype=torch.float64)
    info = RoundInfo(0, m, torch.arange(m), sizes, torch.full((m,), 5), 0.1)
    return params, {"params": stack(clients)}, sizes / sizes.sum(), info


def make(params_cls: type, model: FunctionalModel, env: SetupEnv, **kw: object) -> FedLAW:
    algo = FedLAW(params_cls(**kw), FLConfig(), model)
    algo.setup(env)
    return algo


@pytest.mark.parametrize("learn", ["both", "gamma", "lambda"])
def test_fixed_gamma_one_and_size_weights_equal_fedavg(learn: str) -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model)
    law = make(FedLAWParams, model, env, server_epochs=0, learn=learn)
    new, _, diag = law.aggregate(params, {}, uploads, weights, info)
    ref, _, _ = FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)
    for k in ref:
        torch.testing.assert_close(new[k], ref[k], rtol=1e-6, atol=1e-6)
    assert diag["gamma"] == pytest.approx(1.0)
    assert diag["lambda_max"] == pytest.approx(0.6) and diag["lambda_min"] == pytest.approx(0.1)


@pytest.mark.parametrize("parametrization", ["exp", "quad"])
def test_learning_gamma_shrinks_when_the_proxy_rewards_it(parametrization: str) -> None:
    # Proxy labels independent of x: the CE is minimised by logits -> 0, i.e. by shrinking the model.
    model, env = tiny_env(random_labels=True)
    params, uploads, weights, info = cohort(model, scale=3.0)
    law = make(FedLAWGammaParams, model, env, server_epochs=40, server_lr=0.05, parametrization=parametrization)
    new, _, diag = law.aggregate(params, {}, uploads, weights, info)
    assert diag["gamma"] < 0.8
    proxy = law.proxy_batch()
    before = float(model.loss(FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)[0], proxy))
    assert float(model.loss(new, proxy)) < before
    if parametrization == "exp":  # learn=gamma keeps lambda at the data-size weights
        assert diag["lambda_max"] == pytest.approx(0.6, abs=1e-6)


def test_full_fedlaw_and_swa_lower_the_proxy_loss_and_log_weights() -> None:
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, scale=2.0)
    base = FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)[0]
    for cls in (FedLAWParams, FedLAWSWAParams):
        law = make(cls, model, env, server_epochs=20, server_lr=0.05)
        new, _, diag = law.aggregate(params, {}, uploads, weights, info)
        proxy = law.proxy_batch()
        assert float(model.loss(new, proxy)) < float(model.loss(base, proxy))
        assert 0 < diag["lambda_min"] <= diag["lambda_max"] < 1
        assert 0 < diag["lambda_entropy"] <= np.log(3) + 1e-6
        assert diag["lambda_max"] != pytest.approx(0.6, abs=1e-4)  # lambda was learned


def test_fedlaw_needs_a_proxy_set_and_valid_values() -> None:
    model, env = tiny_env()
    with pytest.raises(ConfigError, match="proxy.per_class"):
        make(FedLAWParams, model, dataclasses.replace(env, proxy=None))
    with pytest.raises(ConfigError, match="parametrization"):
        FedLAWParams(parametrization="cubic")
    with pytest.raises(ConfigError, match="swa"):
        FedLAWParams(swa=True, learn="gamma")


def test_fedlaw_configs_compose_with_paper_defaults(make_spec) -> None:  # noqa: ANN001 - fixture
    spec = make_spec("algorithm=fedlaw")
    assert (spec.algorithm.params.server_epochs, spec.algorithm.params.parametrization) == (100, "exp")
    assert (spec.algorithm.params.beta1, spec.algorithm.params.beta2) == (0.5, 0.999)
    assert make_spec("algorithm=fedlaw_swa").algorithm.params.swa is True
    assert make_spec("algorithm=fedlaw_gamma").algorithm.params.learn == "gamma"
    assert make_spec("algorithm=fedlaw_lambda").algorithm.params.learn == "lambda"
    assert make_spec("algorithm=fedlaw", "algorithm.server_epochs=20").algorithm.params.server_epochs == 20


@pytest.mark.parametrize(
    ("dataset", "given", "expected"), [("cifar10", None, 0.01), ("fmnist", None, 0.005), ("cifar10", 0.2, 0.2)]
)
def test_server_lr_defaults_to_the_papers_value_for_the_dataset(
    dataset: str, given: float | None, expected: float
) -> None:
    """App. C: lr_s = 0.01 on CIFAR-10 and 0.005 otherwise; an explicit algorithm.server_lr wins."""
    model, env = tiny_env()
    law = make(FedLAWParams, model, dataclasses.replace(env, dataset=dataset), server_lr=given)
    assert law.server_lr == expected


def test_global_lr_extrapolates_the_aggregate_as_in_eq_2() -> None:
    """gamma = 1, lambda = p: w = w^t + eta_g sum_i p_i (w_i - w^t) (FedLAW Eq. 2; Table 10's adaptive GWS)."""
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model)
    law = make(FedLAWGammaParams, model, env, server_epochs=0, global_lr=1.5)
    new, _, _ = law.aggregate(params, {}, uploads, weights, info)
    avg, _, _ = FedAvg(None, FLConfig(), model).aggregate(params, {}, uploads, weights, info)
    for k in avg:
        torch.testing.assert_close(new[k], params[k] + 1.5 * (avg[k] - params[k]), rtol=1e-6, atol=1e-6)
        assert not torch.allclose(new[k], avg[k])


# ---- BatchNorm statistics through the runner (ResNet-8 on Fashion-MNIST padded to 32 x 32) ------------------------
BN_RUN = (
    "model=resnet8",
    "data.image_size=32",
    "data.max_train_samples=60",
    "data.max_test_samples=200",
    "partition=iid",
    "fl.clients=2",
    "fl.rounds=1",
    "fl.batch_size=30",
    "hardware.threads=1",
)


def one_bn_round(make_spec, tmp_path, monkeypatch, cls: type, *overrides: str) -> tuple[dict, dict]:  # noqa: ANN001
    """One runner round of ``cls``: (what its aggregate received, the global buffers the run ended with)."""
    seen: dict = {}
    original = cls.aggregate

    def spy(self, params, server_state, uploads, weights, info):  # noqa: ANN001, ANN202
        seen.update(algo=self, uploads=clone(uploads), weights=weights.clone(), buffers=clone(self.model.buffers))
        return original(self, params, server_state, uploads, weights, info)

    monkeypatch.setattr(cls, "aggregate", spy)
    spec = make_spec(*BN_RUN, *overrides)
    assert run(spec, tmp_path)["status"] == "completed"
    return seen, load_checkpoint(tmp_path / CHECKPOINT_FILE).buffers


def client_mean(seen: dict) -> dict:
    w = seen["weights"]
    return {k: torch.tensordot(w.to(v.dtype), v, dims=1) for k, v in seen["uploads"]["params"].items()}


def test_fedlaw_keeps_the_statistics_of_its_proxy_passes(make_spec, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    # one server epoch of one proxy batch (100 <= 128): the only pass runs gamma = 1, lambda = p, i.e. the
    # clients' mean, in train mode from the previous global statistics (FedLAW code: central_node.model.train())
    overrides = ("algorithm=fedlaw", "algorithm.server_epochs=1")
    seen, buffers = one_bn_round(make_spec, tmp_path, monkeypatch, FedLAW, *overrides)
    algo = seen["algo"]
    module = copy.deepcopy(algo.model.module)
    module.load_state_dict({**client_mean(seen), **seen["buffers"]})
    module.train()
    with torch.no_grad():
        module(algo.proxy_batch()["x"])
    want = {k: v for k, v in module.state_dict().items() if k in buffers}
    assert want.keys() == buffers.keys() and int(want["stem.1.num_batches_tracked"]) == 1
    for k, v in want.items():
        torch.testing.assert_close(buffers[k], v)
    # not the clients' mean statistics, which the runner used to install
    mean = average_buffers(seen["uploads"]["buffers"], seen["weights"])
    assert not torch.allclose(buffers["stem.1.running_var"], mean["stem.1.running_var"])
