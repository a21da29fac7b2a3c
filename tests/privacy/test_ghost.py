"""DP-SGD's book-keeping path (fedrun/privacy/ghost.py) against the ``vmap(grad)`` path it replaces: the same clipped
sum and losses to float tolerance, for Linear and Conv2d chains, with padding, under the vectorised engine's ``vmap``
over clients and in whole runs; and the path is taken only where the ghost norm holds (plain cross-entropy, a chain
of supported layers, one vector per sample at each Linear layer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from fedrun.config.schema import RunSpec
from fedrun.privacy.ghost import layer_chain
from fedrun.privacy.sample import DPSGD, clip_and_sum, per_sample_grads

CHAINS = {
    "mlp": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                                  nn.Linear(16, 4, bias=False)), (12,)),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(4, 6, 3, stride=2, bias=False), nn.GELU(), nn.Flatten(),
                                  nn.Linear(6, 4)), (2, 8, 8)),
}  # fmt: skip


def _setup(name: str, b: int = 8) -> tuple[nn.Module, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    build, shape = CHAINS[name]
    module = build()
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    g = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(b, *shape, generator=g) * 3, "y": torch.randint(0, 4, (b,), generator=g)}
    return module, params, batch


def _loss(module: nn.Module):  # noqa: ANN202 - the functional cross-entropy of ``module``
    def loss(p, batch, ctx):  # noqa: ANN001, ANN202
        return F.cross_entropy(torch.func.functional_call(module, p, (batch["x"],)), batch["y"])

    return loss


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6), (k, float((a[k] - b[k]).abs().max()))


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("clip", [0.05, 1.0, 1e4])  # every sample clipped, some, none
def test_clipped_sum_equals_the_per_sample_gradients(name: str, clip: float) -> None:
    module, params, batch = _setup(name)
    chain = layer_chain(module, params)
    assert chain is not None
    grads, losses = per_sample_grads(_loss(module), params, batch, None)
    pad = torch.tensor([1.0] * 6 + [0.0] * 2)  # the vectorised engine's padding: the last two samples left out
    for weight in (None, pad):
        out = chain.clipped_sum(params, batch, clip, weight)
        assert out is not None
        _close(out[0], clip_and_sum(grads, clip, weight))
        assert torch.allclose(out[1], losses, atol=1e-6)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    assert (norms > 0.05).all() and (norms < 1e4).all()  # the clips above do clip every sample, and none


@pytest.mark.parametrize("name", list(CHAINS))
def test_under_vmap_over_clients_each_row_is_its_clients(name: str) -> None:
    module, params, batch = _setup(name)
    chain = layer_chain(module, params)
    assert chain is not None
    k, noise = 3, torch.zeros(sum(p.numel() for p in params.values()))
    stacked = {n: torch.stack([p * (1 + 0.1 * i) for i in range(k)]) for n, p in params.items()}  # 3 clients' models
    xs = torch.stack([batch["x"] + i for i in range(k)])
    step = DPSGD(0.5, chain)
    out, loss = vmap(lambda p, x: step(_loss(module), p, {"x": x, "y": batch["y"], "dp_noise": noise}, None))(
        stacked, xs
    )
    for i in range(k):
        one = {n: p[i] for n, p in stacked.items()}
        want, want_loss = DPSGD(0.5)(_loss(module), one, {"x": xs[i], "y": batch["y"], "dp_noise": noise}, None)
        _close({n: g[i] for n, g in out.items()}, want)
        assert torch.allclose(loss[i], want_loss, atol=1e-6)


def test_only_where_the_ghost_norm_holds() -> None:
    lin = nn.Sequential(nn.Linear(5, 3))
    params = dict(lin.named_parameters())
    chain = layer_chain(lin, params)
    assert chain is not None
    # a Linear layer on a sequence ([B, T, d]): several vectors per sample, ||a||^2 ||g||^2 is not the norm
    x, y = torch.randn(4, 7, 5), torch.randint(0, 3, (4, 7))
    assert chain.clipped_sum(params, {"x": x, "y": y}, 1.0, None) is None
    assert chain.clipped_sum(params, {"x": x[:, 0], "y": y[:, 0]}, 1.0, None) is not None
    assert layer_chain(nn.Sequential(nn.Linear(5, 3), nn.Dropout(0.5)), params) is None  # random per call
    assert layer_chain(nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3)), params) is None  # mixes the samples
    assert layer_chain(nn.Sequential(nn.Conv2d(2, 4, 3, groups=2)), {}) is None
    assert layer_chain(nn.Sequential(nn.Linear(5, 3)), {"0.weight": params["0.weight"]}) is None  # not its params


def test_dp_sgd_for_takes_book_keeping_only_on_the_plain_objective(make_spec: Callable[..., RunSpec]) -> None:
    from fedrun.privacy.sample import dp_sgd_for
    from fedrun.run.experiment import build_experiment

    small = ("data.max_train_samples=200", "data.max_test_samples=200", "fl.clients=4", "model.hidden=[8]")
    assert dp_sgd_for(build_experiment(make_spec(*small)).algorithm, 1.0).chain is not None
    # FedProx's proximal term enters every sample's gradient: the ghost norm of the layers alone would miss it
    assert dp_sgd_for(build_experiment(make_spec(*small, "algorithm=fedprox")).algorithm, 1.0).chain is None
    assert dp_sgd_for(build_experiment(make_spec(*small, "model.dropout=0.5")).algorithm, 1.0).chain is None


@pytest.mark.parametrize("model", ["model=mlp", "model=lenet"])
def test_whole_runs_match_the_vmap_grad_path(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    import fedrun.privacy.mechanisms.sample as mechanism
    import fedrun.run.experiment as experiment
    from fedrun.privacy.sample import dp_sgd_for
    from tests.run.run_util import finished_run

    spec = make_spec(
        "data.max_train_samples=300", "data.max_test_samples=100", "fl.clients=5", "fl.rounds=2", "fl.batch_size=20",
        "model.hidden=[32]" if model == "model=mlp" else model, "hardware.threads=1", "hardware.engine=vectorised",
        "privacy=sample", "privacy.noise_multiplier=1.1", "privacy.clip=0.5",
    )  # fmt: skip
    fast, _ = finished_run(tmp_path, "fast", spec)
    monkeypatch.setattr(mechanism, "dp_sgd_for", lambda algo, clip: DPSGD(clip))
    slow, _ = finished_run(tmp_path, "slow", spec)
    assert dp_sgd_for(experiment.build_experiment(spec).algorithm, 0.5).chain is not None  # the two paths differ
    pd.testing.assert_frame_equal(fast, slow, rtol=1e-4, check_exact=False)
