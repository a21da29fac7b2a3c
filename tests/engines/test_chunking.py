"""The automatic chunk width follows the memory estimate and the budget."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.core.tree import nbytes
from fedrun.engines import chunking
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import build_experiment

TINY = (
    "data.max_train_samples=300",
    "data.max_test_samples=50",
    "proxy.per_class=0",  # 50 test images: a proxy set of 10 per class would take them all (refused)
    "fl.clients=20",
    "model.hidden=[64]",
    "hardware.threads=1",
)


def test_client_bytes_counts_parameters_momentum_and_activations(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*TINY, "fl.batch_size=10"))
    params = exp.model.init_params()
    plain = chunking.client_bytes(exp.algorithm, exp.fed, exp.spec.fl, params, {})
    act = chunking.activation_bytes(exp.algorithm, exp.fed, 10)
    # input 10x784, flatten 10x784, linear 10x64, relu 10x64, linear 10x10, all fp32
    assert act == 4 * 10 * (784 + 784 + 64 + 64 + 10)
    assert plain == chunking.PARAM_COPIES * nbytes(params) + chunking.ACTIVATION_COPIES * act
    with_momentum = build_experiment(make_spec(*TINY, "fl.batch_size=10", "fl.momentum=0.9"))
    assert chunking.client_bytes(with_momentum.algorithm, with_momentum.fed, with_momentum.spec.fl, params, {}) == (
        plain + chunking.OPT_COPIES * nbytes(params)
    )


def test_auto_width_divides_the_budget(make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    exp = build_experiment(make_spec(*TINY))
    engine = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed)
    params = exp.model.init_params()
    per_client = chunking.client_bytes(exp.algorithm, exp.fed, exp.spec.fl, params, {})
    monkeypatch.setattr(chunking, "free_bytes", lambda device: 7 * per_client + 1)
    assert engine.chunk_width(params, {}, 20) == 7
    assert engine.chunk_width(params, {}, 5) == 5  # never wider than the cohort
    monkeypatch.setattr(chunking, "free_bytes", lambda device: 0)
    assert engine.chunk_width(params, {}, 20) == 1  # at least one client
    assert VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, 0, chunk=4).chunk_width(params, {}, 20) == 4


def test_cpu_budget_is_capped() -> None:
    budget = chunking.free_bytes(torch.device("cpu"))
    assert 0 < budget <= chunking.CPU_CAP_BYTES
