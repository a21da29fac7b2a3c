"""Across the client-side methods: configs validate, bad values fail, what travels, and vmap-ability."""

from __future__ import annotations

import csv

import pytest
import torch
from client_methods_util import SMALL, ctx_for, make_algo, tiny_batch, tiny_model

from fedrun.algorithms.base import ClientContext
from fedrun.core.errors import ConfigError
from fedrun.core.tree import leaves, nbytes, stack, tree_map, unstack
from fedrun.run.client_states import ClientStates
from fedrun.run.loop import run

METHODS = [
    "fedsam", "fedasam", "mofedsam", "fedgam", "fedgam_cv", "fedsmoo", "scaffold", "fednova",
    "feddyn", "moon", "fedcos", "fedfa", "fedcm", "mimelite", "fedrobust",
]  # fmt: skip
# (vectors sent down with w^t, vectors uploaded) in units of the model size, as the papers send them
TRAFFIC = {"mofedsam": (2, 1), "fedcm": (2, 1), "fedcos": (2, 1), "scaffold": (2, 2), "fedgam_cv": (2, 2),
           "fedsmoo": (2, 2), "mimelite": (2, 2)}  # fmt: skip


@pytest.mark.parametrize("name", METHODS)
def test_config_composes_with_paper_defaults(make_spec, name: str) -> None:
    spec = make_spec(f"algorithm={name}")
    assert spec.algorithm.name == name


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("algorithm=fedsam algorithm.rho=-0.1", "algorithm.rho"),
        ("algorithm=mofedsam algorithm.alpha=1.5", "algorithm.alpha"),
        ("algorithm=fedcm algorithm.alpha=-0.1", "algorithm.alpha"),
        ("algorithm=fedgam algorithm.variant=gam2", "algorithm.variant"),
        ("algorithm=fedcos algorithm.server=adam", "algorithm.server"),
        ("algorithm=feddyn algorithm.alpha=0", "algorithm.alpha"),
        ("algorithm=moon algorithm.tau=0", "algorithm.tau"),
        ("algorithm=mimelite algorithm.beta=2", "algorithm.beta"),
        ("algorithm=fedrobust algorithm.structure=lowrank", "algorithm.structure"),
        ("algorithm=scaffold algorithm.server_lr=0", "algorithm.server_lr"),
    ],
)
def test_bad_values_raise_config_error(make_spec, override: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_spec(*override.split())
    assert err.value.field == field


def _algo(name: str):  # noqa: ANN202
    algo = make_algo(name, tiny_model())
    algo.input_shape = (4,)  # FedRobust's perturbation size, normally read from the data in setup()
    algo.num_classes = 2  # FedFA's anchors, likewise
    return algo


@pytest.mark.parametrize("name", METHODS)
def test_traffic_per_client(name: str) -> None:
    algo = _algo(name)
    w = algo.model.init_params()
    ctx = ctx_for(algo, w)
    upload, _ = algo.client_finish(w, w, ctx, torch.tensor(1))
    down, up = TRAFFIC.get(name, (1, 1))
    model_bytes = nbytes(w)
    side = 0  # FedFA's class anchors (C x d) and round flags travel with the model, both ways
    if name == "fedfa":
        side = nbytes({"a": ctx.extras["anchors"]})
        assert nbytes(upload) == model_bytes + side
        assert nbytes(ctx.extras) == side + nbytes({"f": ctx.extras["flags"]})
        return
    assert algo.broadcast_bytes(w, ctx.extras) == down * model_bytes  # what the runner counts (FedCos: not b)
    assert nbytes(upload) == up * model_bytes


@pytest.mark.parametrize("name", METHODS)
def test_client_step_vmaps_like_a_loop(name: str) -> None:
    """Every client step must be a pure tensor function: vmap over 2 clients == 2 sequential calls."""
    algo = _algo(name)
    w = algo.model.init_params()
    ctx = ctx_for(algo, w, lr=0.05)
    params = stack([tree_map(lambda t: t + 0.01, w), tree_map(lambda t: t - 0.02, w)])
    states = stack([ctx.state, ctx.state]) if ctx.state else {}
    batches = stack([tiny_batch(1), tiny_batch(2)])

    def step(p, s, b):  # noqa: ANN001, ANN202
        new_p, _, new_s, loss = algo.client_step(p, None, b, ClientContext(w, ctx.extras, s, 0.05))
        return new_p, new_s, loss

    vp, vs, vl = torch.func.vmap(step, randomness="different")(params, states, batches)
    for j in range(2):
        lp, ls, ll = step(unstack(params, j), unstack(states, j) if states else {}, unstack(batches, j))
        for k in lp:
            torch.testing.assert_close(vp[k][j], lp[k], atol=1e-10, rtol=1e-8)
        for a, b in zip(torch.utils._pytree.tree_leaves(vs), torch.utils._pytree.tree_leaves(ls), strict=True):
            torch.testing.assert_close(a[j], b, atol=1e-10, rtol=1e-8)
        torch.testing.assert_close(vl[j], ll)


def test_metrics_report_scaffold_traffic(make_spec, tmp_path) -> None:
    rows = {}
    for name in ("fedavg", "scaffold"):
        (tmp_path / name).mkdir()
        run(make_spec(f"algorithm={name}", *SMALL, "fl.rounds=1"), tmp_path / name)
        with open(tmp_path / name / "metrics.csv") as f:
            rows[name] = next(csv.DictReader(f))
    assert int(rows["scaffold"]["bytes_up"]) == 2 * int(rows["fedavg"]["bytes_up"])
    assert int(rows["scaffold"]["bytes_down"]) == 2 * int(rows["fedavg"]["bytes_down"])


@pytest.mark.parametrize("name", METHODS)
def test_client_finish_vmaps_like_a_loop(name: str) -> None:
    algo = _algo(name)
    w = algo.model.init_params()
    ctx = ctx_for(algo, w, lr=0.05)
    ends = stack([tree_map(lambda t: t + 0.01, w), tree_map(lambda t: t - 0.02, w)])
    states = stack([ctx.state, ctx.state]) if ctx.state else {}
    steps = torch.tensor([3, 5])

    def finish(end, s, k):  # noqa: ANN001, ANN202
        return algo.client_finish(w, end, ClientContext(w, ctx.extras, s, 0.05), k)

    v_up, v_st = torch.func.vmap(finish)(ends, states, steps)
    for j in range(2):
        up, st = finish(unstack(ends, j), unstack(states, j) if states else {}, steps[j])
        got = torch.utils._pytree.tree_leaves((v_up, v_st))
        want = torch.utils._pytree.tree_leaves((up, st))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a[j], b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize(
    "name", ["scaffold", "fedgam_cv", "feddyn", "moon", "fedsmoo", "mimelite", "fedfa", "fedrobust"]
)
def test_client_state_is_compact_and_restorable(name: str) -> None:
    """Per-client state lives as stacked rows (no model object per client) and round-trips via state_dict."""
    algo = _algo(name)
    w = algo.model.init_params()
    template = algo.client_init(w)
    assert template
    states = ClientStates(template, 5, torch.device("cpu"))
    cohort = torch.tensor([1, 3])
    new = tree_map(lambda t: torch.randn((2, *t.shape), dtype=t.dtype), template)
    states.scatter(cohort, new)
    restored = ClientStates(template, 5, torch.device("cpu"))
    restored.load_state_dict(states.state_dict())
    for a, b in zip(leaves(restored.gather(cohort)), leaves(new), strict=True):
        assert torch.equal(a, b)
    for a, t in zip(leaves(restored.gather(torch.tensor([0]))), leaves(template), strict=True):
        assert torch.equal(a[0], t)
