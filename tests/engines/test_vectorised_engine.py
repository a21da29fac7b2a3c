"""The vectorised engine reproduces the sequential reference engine, for every registered algorithm."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from fedrun.algorithms.base import AlgoParams, Algorithm, Batch, ClientContext, RoundInfo
from fedrun.config.registry import ALGORITHMS
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.tree import Tensors, Tree, leaves, tree_map, zeros_like
from fedrun.data.federated import num_local_steps
from fedrun.engines.sampling import sample_clients
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedEngine, pad_plans
from fedrun.models.base import FunctionalModel
from fedrun.run.client_states import ClientStates
from fedrun.run.experiment import Experiment, build_experiment
from fedrun.run.loop import lr_at

# Dirichlet(0.3) over 5 clients: unequal sizes, so clients finish at different steps and last batches are short
SMALL = (
    "data.max_train_samples=400",
    "data.max_test_samples=100",
    "fl.clients=5",
    "fl.batch_size=16",
    "partition.alpha=0.3",
    "model.hidden=[24]",
    "hardware.engine=sequential",
    "hardware.threads=1",  # on a shared CPU two spinning OpenMP threads can run 100x slower
)
# every path at once: kept momentum, weight decay, clipping, partial participation, several chunks
HARD = ("fl.momentum=0.5", "fl.keep_momentum=true", "fl.weight_decay=0.001", "fl.grad_clip=5.0", "fl.participation=0.8")


def fresh_run(exp: Experiment) -> tuple[SequentialEngine, Tensors, Tree, ClientStates]:
    """The reference engine, w^0, the server state and every client's initial state of ``exp``'s run."""
    algo, fl = exp.algorithm, exp.spec.fl
    params = exp.model.init_params()
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    seq = SequentialEngine(algo, exp.fed, fl, exp.spec.seed)
    return seq, params, algo.server_init(params), ClientStates(template, fl.clients, exp.device)


def assert_same_run(exp: Experiment, vec: VectorisedEngine, rounds: int, rtol: float, atol: float) -> None:
    """The runner's round loop, each round trained by both engines from the same w^t, extras and states.

    The sequential result drives the run (aggregation, states), so a server step that amplifies tiny
    float differences (e.g. FedDF's distillation) cannot blur what is compared: the engines' outputs.
    """
    spec, algo, fl = exp.spec, exp.algorithm, exp.spec.fl
    seq, params, server_state, states = fresh_run(exp)
    for rnd in range(rounds):
        clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
        lr = algo.local_lr(rnd, lr_at(spec, rnd))
        extras = algo.broadcast(params, server_state)
        cohort_states = states.gather(clients) if states else {}
        a = seq.train_cohort(rnd, params, extras, clients, cohort_states, lr)
        b = vec.train_cohort(rnd, params, extras, clients, cohort_states, lr)
        assert torch.equal(a.steps, b.steps)
        assert a.samples == b.samples
        assert b.loss == pytest.approx(a.loss, rel=rtol, abs=atol)
        assert set(a.uploads) == set(b.uploads) and set(a.states) == set(b.states)
        for x, y in zip(leaves(a.uploads) + leaves(a.states), leaves(b.uploads) + leaves(b.states), strict=True):
            torch.testing.assert_close(y, x, rtol=rtol, atol=atol)
        if states:
            states.scatter(clients, a.states)
        sizes = exp.fed.sizes[clients].to(torch.float64)
        weights = sizes / sizes.sum() if fl.weighting == "size" else torch.full_like(sizes, 1 / len(sizes))
        info = RoundInfo(rnd, fl.clients, clients, sizes, a.steps, lr)
        params, server_state, _ = algo.aggregate(params, server_state, a.uploads, weights.to(exp.device), info)


@pytest.fixture
def experiment(make_spec: Callable[..., RunSpec]) -> Callable[..., Experiment]:
    return lambda *overrides: build_experiment(make_spec(*SMALL, *overrides))


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_matches_sequential_fp32(
    name: str, experiment: Callable[..., Experiment], make_spec: Callable[..., RunSpec]
) -> None:
    # the dataclass defaults, so a method registered without a conf/algorithm file is covered too
    hard = [o for o in HARD if name != "fednova" or "keep_momentum" not in o]  # FedNova refuses kept momentum
    if name == "fedrep":  # FedRep refuses a round that leaves its head no epoch (one epoch, one of them the body's)
        hard.append("fl.local_epochs=2")
    if name == "fedbn":  # needs BatchNorm: ResNet-8 normalising by batch statistics (no running statistics: vmappable)
        small = [o for o in SMALL if not o.startswith("model.")]
        # fixed local steps: no padded batch, whose padding would enter the batch statistics on the vectorised engine;
        # fp64: in fp32 batch-statistics BatchNorm amplifies the batched convolution's rounding past 1e-3 (FedAvg too)
        bn = ("model=resnet8", "model.running_stats=false", "data.image_size=32", "fl.local_steps=2")
        bn = (*bn, "hardware.precision=fp64")
        exp = build_experiment(make_spec(*small, "algorithm=fedavg", f"algorithm.name={name}", *hard, *bn))
    else:
        exp = experiment("algorithm=fedavg", f"algorithm.name={name}", *hard)
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)
    assert vec.stats["chunks"] == 4  # 2 rounds x ceil(4 clients / 2)
    assert vec.waste == (0.0 if name == "fedbn" else pytest.approx(expected_waste(exp, rounds=2, chunk=2)))


@pytest.mark.parametrize(
    "options",
    [
        ("algorithm=apfl", "algorithm.form=code"),
        ("algorithm=pfedme", "algorithm.score=code"),
        ("algorithm=ditto", "algorithm.prox=implicit"),
        ("algorithm=lg_fedavg", "algorithm.warm_rounds=1", "algorithm.warm_lr=0.2"),  # the split in round 1 of 2
    ],
    ids=lambda o: " ".join(o),
)
def test_the_personalised_code_forms_match_sequential(options: tuple[str, ...], experiment: Callable[..., Experiment]):
    exp = experiment(*options, *HARD)
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)


def expected_waste(exp: Experiment, rounds: int, chunk: int) -> float:
    """Share of padded sample slots when each round's cohort is sorted by size and cut into chunks.

    A chunk computes, per step, one batch of width min(batch, largest client) for each client still
    training; clients that finished cost nothing, so only short last batches are padding.
    """
    fl, used, slots = exp.spec.fl, 0, 0
    for rnd in range(rounds):
        sizes = sorted((int(exp.fed.sizes[c]) for c in sample_clients(fl, exp.spec.seed, rnd)), reverse=True)
        for lo in range(0, len(sizes), chunk):
            part = sizes[lo : lo + chunk]
            width = min(fl.batch_size, part[0])
            used += sum(part) * fl.local_epochs
            slots += sum(num_local_steps(n, fl) for n in part) * width
    return 1 - used / slots


def test_float64_matches_to_1e12(experiment: Callable[..., Experiment]) -> None:
    exp = experiment("algorithm=fedprox", "hardware.precision=fp64", "fl.momentum=0.9")
    assert all(t.dtype == torch.float64 for t in leaves(exp.model.init_params()))
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=None)
    assert_same_run(exp, vec, rounds=2, rtol=1e-12, atol=1e-12)


def test_fixed_local_steps_with_reshuffles_match(experiment: Callable[..., Experiment]) -> None:
    # 40 steps x 16 exceeds every client's data: each client's batches come from several permutations
    exp = experiment("fl.local_steps=40", "fl.momentum=0.9", "fl.weighting=uniform")
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=3)
    assert_same_run(exp, vec, rounds=1, rtol=1e-4, atol=2e-5)
    assert vec.waste == 0.0  # every batch full: nothing padded


def test_clients_smaller_than_one_batch_match(experiment: Callable[..., Experiment]) -> None:
    exp = experiment("fl.batch_size=64", "partition.alpha=0.1", "fl.clients=8", "fl.local_epochs=2")
    assert int(exp.fed.sizes.min()) < 64 < int(exp.fed.sizes.max())
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=8)
    assert_same_run(exp, vec, rounds=1, rtol=1e-4, atol=2e-5)


# ---- an algorithm that uses every hook the contract offers, including a non-vmappable client_finish --------
@dataclass
class ProbeParams(AlgoParams):
    rho: float = 0.05
    python_finish: bool = False


class Probe(Algorithm):
    """Per-step client state, extras, a SAM-style two-pass gradient and a step-dependent upload."""

    Params = ProbeParams
    hp: ProbeParams

    def client_init(self, params: Tensors) -> Tree:
        return {"seen": torch.zeros((), dtype=torch.float64), "scale": torch.ones(()), "drift": zeros_like(params)}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"shift": tree_map(lambda t: 1e-3 * torch.ones_like(t), params)}

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        return ctx.state["scale"] * super().local_loss(params, batch, ctx)

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        g, loss = torch.func.grad_and_value(self.local_loss)(params, batch, ctx)
        norm = torch.sqrt(sum(x.pow(2).sum() for x in g.values())) + 1e-12
        shifted = {k: params[k] + self.hp.rho * g[k] / norm for k in params}
        g2 = torch.func.grad(self.local_loss)(shifted, batch, ctx)
        return {k: g2[k] + ctx.extras["shift"][k] for k in g2}, loss

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        new, opt, _, loss = super().client_step(params, opt, batch, ctx)
        n = batch["w"].sum() if "w" in batch else torch.tensor(float(batch["y"].shape[-1]))
        drift = tree_map(lambda d, a, b: d + (a - b), ctx.state["drift"], new, params)
        return new, opt, {**ctx.state, "seen": ctx.state["seen"] + n, "drift": drift}, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        # int() of a batched tensor cannot be vmapped: the engine must fall back to a loop for this hook
        k = max(int(steps), 1) if self.hp.python_finish else steps.clamp_min(1)
        per_step = tree_map(lambda d: d / k, ctx.state["drift"])
        return {"params": end, "per_step": per_step}, {**ctx.state, "drift": zeros_like(per_step)}


@pytest.mark.parametrize("python_finish", [False, True])
def test_contract_hooks_match(python_finish: bool, experiment: Callable[..., Experiment]) -> None:
    exp = experiment("fl.momentum=0.9", "fl.keep_momentum=true")
    exp.algorithm = Probe(ProbeParams(python_finish=python_finish), exp.spec.fl, exp.model)
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=4)
    assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)
    assert vec._finish_vmappable is not python_finish


def test_divergent_client_is_named(experiment: Callable[..., Experiment]) -> None:
    exp = experiment()
    exp.algorithm = Probe(ProbeParams(), exp.spec.fl, exp.model)
    params = exp.model.init_params()
    template = exp.algorithm.client_init(params)
    states = tree_map(lambda t: t.unsqueeze(0).repeat((3,) + (1,) * t.dim()), template)
    states["scale"] = torch.tensor([1.0, float("inf"), 1.0])
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed)
    extras = exp.algorithm.broadcast(params, {})
    with pytest.raises(DivergenceError, match="client 3"):
        vec.train_cohort(0, params, extras, torch.tensor([0, 3, 4]), states, 0.05)


# ---- padding ---------------------------------------------------------------------------------------------------
def test_pad_plans_pads_short_batches_and_counts_live_clients() -> None:
    plans = [
        [torch.tensor([5, 6, 7]), torch.tensor([8, 9, 10]), torch.tensor([11, 12])],
        [torch.tensor([1, 2, 3]), torch.tensor([4])],
        [torch.tensor([20, 21])],  # a client smaller than one batch
        [],
    ]
    p = pad_plans(plans, torch.device("cpu"), torch.float32)
    assert p.idx.shape == (3, 4, 3)
    assert p.steps.tolist() == [3, 2, 1, 0]
    assert p.live == [3, 2, 1]
    assert p.idx[1, 0].tolist() == [8, 9, 10]
    assert p.w[1, 1].tolist() == [1.0, 0.0, 0.0]
    assert p.w[2, 0].tolist() == [1.0, 1.0, 0.0]
    assert p.idx[0, 2, :2].tolist() == [20, 21] and p.w[0, 2].tolist() == [1.0, 1.0, 0.0]
    assert p.padded == [True, True, True]
    assert p.samples == 14


def test_pad_plans_needs_clients_sorted_by_steps() -> None:
    with pytest.raises(ValueError, match="sorted"):
        pad_plans([[torch.tensor([1])], [torch.tensor([2]), torch.tensor([3])]], torch.device("cpu"), torch.float32)


# ---- models that cannot be vmapped ------------------------------------------------------------------------------
def test_batchnorm_model_is_refused_with_one_line(experiment: Callable[..., Experiment]) -> None:
    exp = experiment()
    bn = FunctionalModel(nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.BatchNorm1d(8), nn.Linear(8, 10)))
    algo = type(exp.algorithm)(exp.algorithm.hp, exp.spec.fl, bn)
    with pytest.raises(ConfigError) as err:
        VectorisedEngine(algo, exp.fed, exp.spec.fl, exp.spec.seed)
    assert err.value.field == "hardware.engine"
    assert "buffers" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("variant", ["law", "official"])
def test_feddyn_code_variants_match_sequential(variant: str, experiment: Callable[..., Experiment]) -> None:
    """The code variants' per-client alpha_i (official: from the client's n_i) under vmap."""
    exp = experiment("algorithm=feddyn", f"algorithm.variant={variant}", *HARD)
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("mode", ["crop_flip", "flip_crop_half"])
def test_augmented_batches_match_sequential(mode: str, experiment: Callable[..., Experiment]) -> None:
    # data.augment: each row of the [clients, batch] gather draws its own client's crops and flips
    exp = experiment(f"data.augment={mode}", *HARD)
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)
    plain = experiment(*HARD)  # the augmentation is live: the same round without it trains other models
    clients = torch.as_tensor(sample_clients(exp.spec.fl, exp.spec.seed, 0), dtype=torch.long)
    params = exp.model.init_params()
    a = SequentialEngine(exp.algorithm, exp.fed, exp.spec.fl, 0).train_cohort(0, params, {}, clients, {}, 0.05)
    b = SequentialEngine(plain.algorithm, plain.fed, plain.spec.fl, 0).train_cohort(0, params, {}, clients, {}, 0.05)
    assert not torch.allclose(a.uploads["params"]["1.weight"], b.uploads["params"]["1.weight"])
