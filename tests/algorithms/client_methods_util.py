"""Helpers for the client-side method tests: a tiny float64 model, hook-level contexts, short real runs."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedrun.algorithms.base import Algorithm, ClientContext, RoundInfo
from fedrun.config.registry import ALGORITHMS, build_params
from fedrun.config.schema import FLConfig, RunSpec
from fedrun.core.tree import Tensors, Tree
from fedrun.engines.sampling import sample_clients
from fedrun.models.base import FunctionalModel
from fedrun.run.experiment import build_experiment
from fedrun.run.rounds import aggregation_weights, lr_at, train_cohort_at
from fedrun.run.state import fresh_state

# A few seconds per run: 4 clients on 800 FMNIST samples, a one-hidden-layer MLP.
SMALL = (
    "experiment=smoke",
    "data.max_train_samples=800",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=2",
    "model=mlp",
    "model.hidden=[16]",
    "fl.batch_size=50",
    "hardware.threads=1",
    "eval.local_test=none",  # every method on the same data (a personal method's default holds out local tests)
)


def tiny_model(seed: int = 0) -> FunctionalModel:
    """4 -> 3 -> 2 MLP in float64, for checks against hand-computed values."""
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    return FunctionalModel(module)


def tiny_batch(seed: int = 1, n: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, 4, generator=g, dtype=torch.float64), "y": torch.randint(0, 2, (n,), generator=g)}


def make_algo(name: str, model: FunctionalModel | None = None, fl: FLConfig | None = None, **hp: Any) -> Algorithm:
    entry = ALGORITHMS.get(name)
    params = build_params(entry.params, hp, "algorithm")
    return entry.obj(params, fl or FLConfig(), model or tiny_model())


def ctx_for(algo: Algorithm, params: Tensors, extras: Tree | None = None, state: Tree | None = None, lr: float = 0.1):
    """A ClientContext at w^t = ``params`` with the algorithm's initial server extras and client state."""
    if extras is None:
        extras = algo.broadcast(params, algo.server_init(params))
    if state is None:
        state = algo.client_init(params)
    return ClientContext(params, extras, state, lr)


def plain_grad(model: FunctionalModel, params: Tensors, batch: dict[str, torch.Tensor]) -> Tensors:
    """Reference gradient of the mean cross-entropy by ordinary autograd (no torch.func)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = model.loss(leaves, batch)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return dict(zip(leaves, grads, strict=True))


def shifted(params: Tensors, eps: Tensors) -> Tensors:
    return {k: params[k] + eps[k] for k in params}


def train(spec: RunSpec, rounds: int | None = None) -> tuple[Tensors, Tree, list[dict[str, Any]]]:
    """The runner's rounds without evaluation, on its one cohort-training step (fedrun/run/rounds.py
    ``train_cohort_at``): (final params, server state, per-round extras/uploads info)."""
    exp = build_experiment(spec)
    algo, fl = exp.algorithm, spec.fl
    state = fresh_state(exp)
    log = []
    for rnd in range(rounds or fl.rounds):
        clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
        lr = algo.local_lr(rnd, lr_at(spec, rnd))
        extras = algo.broadcast(state.params, state.server_state)
        res = train_cohort_at(exp, state, rnd, extras, clients, lr)
        if state.clients:
            state.clients.scatter(clients, res.states)
        sizes = exp.fed.sizes[clients].to(torch.float64)
        weights = aggregation_weights(sizes, fl.weighting)
        info = RoundInfo(rnd, fl.clients, clients, sizes, res.steps, lr)
        start = state.params
        state.params, state.server_state, _ = algo.aggregate(
            state.params, state.server_state, res.uploads, weights, info
        )
        log.append({"start": start, "uploads": res.uploads, "info": info, "weights": weights, "states": state.clients})
    return state.params, state.server_state, log


def assert_trees_equal(a: Tensors, b: Tensors, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if atol:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0)
        else:
            assert torch.equal(a[k], b[k]), k
