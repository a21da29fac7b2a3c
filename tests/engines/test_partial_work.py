"""Partial work (a straggler's budget of local steps) on every engine: each client runs the prefix of its own batch
plan, the vectorised engine keeps the cohort in one vmap and reproduces the sequential engine, Ray reproduces the
vectorised engine bit for bit, and ``CohortResult.steps`` are the true counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.core.tree import leaves, tree_map
from fedrun.data.federated import batch_plan, num_local_steps
from fedrun.engines.sampling import sample_clients
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import Experiment, build_experiment
from tests.engines.test_vectorised_engine import HARD, SMALL, fresh_run


def budgets_for(exp: Experiment, clients: torch.Tensor, rnd: int) -> torch.Tensor:
    """Unequal budgets: a full plan, a cut one, one step, none, and a budget past the plan's end."""
    full = [num_local_steps(int(exp.fed.sizes[c]), exp.spec.fl) for c in clients.tolist()]
    pattern = [lambda s: s, lambda s: max(s // 2, 1), lambda s: 1, lambda s: 0, lambda s: s + 5]
    return torch.tensor([pattern[(j + rnd) % len(pattern)](s) for j, s in enumerate(full)], dtype=torch.long)


def compare(exp: Experiment, vec: VectorisedEngine, rounds: int, rtol: float, atol: float) -> None:
    """Both engines train each round's cohort on the same budgets from the same w^t and states."""
    spec, algo, fl = exp.spec, exp.algorithm, exp.spec.fl
    seq, params, server_state, states = fresh_run(exp)
    for rnd in range(rounds):
        clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
        budgets = budgets_for(exp, clients, rnd)
        extras = algo.broadcast(params, server_state)
        cohort = states.gather(clients) if states else {}
        a = seq.train_cohort(rnd, params, extras, clients, cohort, fl.lr, budgets)
        b = vec.train_cohort(rnd, params, extras, clients, cohort, fl.lr, budgets)
        full = torch.tensor([num_local_steps(int(exp.fed.sizes[c]), fl) for c in clients.tolist()])
        assert torch.equal(a.steps, torch.minimum(budgets, full)) and torch.equal(a.steps, b.steps)
        used = sum(int(i.numel()) for c, s in zip(clients.tolist(), a.steps.tolist(), strict=True)
                   for i in batch_plan(exp.fed.clients[c], fl, spec.seed, rnd, c)[:s])  # fmt: skip
        assert a.samples == b.samples == used
        assert b.loss == pytest.approx(a.loss, rel=rtol, abs=atol)
        for x, y in zip(leaves(a.uploads) + leaves(a.states), leaves(b.uploads) + leaves(b.states), strict=True):
            torch.testing.assert_close(y, x, rtol=rtol, atol=atol)
        if states:
            states.scatter(clients, a.states)
        params = tree_map(lambda t: t.mean(0), a.uploads["params"])


@pytest.mark.parametrize("name", ["fedavg", "fednova", "scaffold", "fedprox"])
def test_vectorised_matches_sequential_on_budgets(name: str, make_spec: Callable[..., RunSpec]) -> None:
    hard = [o for o in HARD if name != "fednova" or "keep_momentum" not in o]  # FedNova refuses kept momentum
    exp = build_experiment(make_spec(*SMALL, f"algorithm={name}", *hard, "fl.local_epochs=2"))
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    compare(exp, vec, rounds=3, rtol=1e-4, atol=2e-5)
    assert vec.stats["chunks"] == 6  # one vmap per chunk of 2 (3 rounds x ceil(4 / 2)): no split by budget


def test_full_budgets_are_the_full_plan_bit_for_bit(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "fl.local_epochs=2", "fl.momentum=0.5"))
    seq = SequentialEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed)
    params = exp.model.init_params()
    clients = torch.tensor([0, 2, 3])
    full = torch.tensor([num_local_steps(int(exp.fed.sizes[c]), exp.spec.fl) for c in clients.tolist()])
    a = seq.train_cohort(0, params, {}, clients, {}, 0.05)
    b = seq.train_cohort(0, params, {}, clients, {}, 0.05, full)
    assert a.loss == b.loss and torch.equal(a.steps, b.steps)
    assert all(torch.equal(x, y) for x, y in zip(leaves(a.uploads), leaves(b.uploads), strict=True))


def test_zero_budget_uploads_the_broadcast_model(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL))
    params = exp.model.init_params()
    for engine in (SequentialEngine, VectorisedEngine):
        res = engine(exp.algorithm, exp.fed, exp.spec.fl, 0).train_cohort(  # type: ignore[abstract]
            0, params, {}, torch.tensor([1, 4]), {}, 0.05, torch.tensor([0, 3])
        )
        assert res.steps.tolist() == [0, 3]
        assert all(torch.equal(res.uploads["params"][k][0], params[k]) for k in params)
        assert not all(torch.equal(res.uploads["params"][k][1], params[k]) for k in params)


@pytest.mark.xdist_group("ray")  # with the other Ray tests: one worker, one cluster at a time
def test_ray_equals_vectorised_on_budgets_exactly(make_spec: Callable[..., RunSpec], local_cluster: None) -> None:
    pytest.importorskip("ray")
    from fedrun.engines.ray_engine import RayEngine

    spec = make_spec(*SMALL, "fl.participation=0.8", "fl.local_epochs=2")
    exp = build_experiment(spec)
    hw = dataclasses.replace(spec.hardware, engine="ray", actors=2, chunk=2)
    engine = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=hw)
    vec = VectorisedEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, chunk=2)
    try:
        params = exp.model.init_params()
        for rnd in range(2):
            clients = torch.as_tensor(sample_clients(spec.fl, spec.seed, rnd), dtype=torch.long)
            budgets = budgets_for(exp, clients, rnd)
            a = vec.train_cohort(rnd, params, {}, clients, {}, 0.05, budgets)
            b = engine.train_cohort(rnd, params, {}, clients, {}, 0.05, budgets)
            assert a.loss == b.loss and a.samples == b.samples and torch.equal(a.steps, b.steps)
            assert all(torch.equal(x, y) for x, y in zip(leaves(a.uploads), leaves(b.uploads), strict=True))
            params = tree_map(lambda t: t.mean(0), b.uploads["params"])
    finally:
        engine.close()
