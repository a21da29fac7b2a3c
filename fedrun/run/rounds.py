"""One federated round: sample the cohort, train it, aggregate (:func:`train_round`), with the run's capabilities at
their fixed points (fedrun/capabilities/base.py); a driver's step in its place (:func:`driver_step`: an
asynchronous server's update); the one cohort-training step both use (:func:`train_cohort_at`); and the metrics
row of an evaluated round (:func:`evaluation_row`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedrun.algorithms.base import RoundInfo, average_buffers
from fedrun.capabilities.base import RoundCtx, RoundResult
from fedrun.config.schema import RunSpec
from fedrun.core.errors import DivergenceError
from fedrun.core.rng import derive
from fedrun.core.tree import Tree, all_finite, leaves, nbytes, tree_map
from fedrun.engines.auto import precision_context
from fedrun.engines.base import CohortResult
from fedrun.engines.sampling import aggregated_part, sample_clients, training_clients
from fedrun.metrics.client_weights import effective_weights, weight_rows
from fedrun.metrics.clients import ClientAccuracy
from fedrun.metrics.diagnostics import round_diagnostics
from fedrun.metrics.evaluate import evaluate
from fedrun.run.state import RunState

if TYPE_CHECKING:
    from fedrun.run.experiment import Experiment

__all__ = ["RoundResult", "lr_at", "train_round", "train_step"]


def lr_at(spec: RunSpec, rnd: int) -> float:
    """The configured local lr of round ``rnd`` (0-based): lr * lr_decay^rnd."""
    return spec.fl.lr_at(rnd)


def first_nonfinite_client(uploads: Tree, clients: torch.Tensor) -> int | None:
    """The first client of the cohort whose upload holds a NaN/inf (None when all are finite)."""
    bad = torch.zeros(len(clients), dtype=torch.bool)
    for t in leaves(uploads):
        if t.is_floating_point() and t.dim() > 0 and t.shape[0] == len(clients):
            bad |= ~torch.isfinite(t.reshape(len(clients), -1)).all(1).cpu()
    hit = torch.nonzero(bad).flatten()
    return int(clients[hit[0]]) if hit.numel() else None


def aggregation_weights(sizes: torch.Tensor, weighting: str) -> torch.Tensor:
    """p_i: n_i / sum_S n_j (``size``) or 1/m (``uniform``), float64. A cohort holding no training sample at all
    (a natural partition cut to few samples) is weighted uniformly: each of its clients took no step and uploads
    w^t, which the uniform mean keeps, where n_i / 0 would stop the run as diverged."""
    if weighting == "size" and sizes.sum() > 0:
        return sizes / sizes.sum()
    return torch.full_like(sizes, 1 / len(sizes))


def engine_states(experiment: Experiment, state: RunState, clients: torch.Tensor) -> Any:
    """The persistent states of ``clients`` the engine trains with: all but the capabilities' own rows."""
    if not state.clients:
        return {}
    states = state.clients.gather(clients)
    for key in experiment.capabilities.private_keys:
        states.pop(key, None)
    return states


def train_cohort_at(
    experiment: Experiment,
    state: RunState,
    key: int,
    extras: Tree,
    clients: torch.Tensor,
    lr: float,
    budgets: torch.Tensor | None = None,
    at: int | None = None,
) -> CohortResult:
    """The one cohort-training step of every round and server update: ``clients`` trained by the engine from w^t with
    their persistent states, their batch plans keyed by ``key`` (the round; an async cohort's batch number), on
    ``budgets`` when some straggle partially; the train time and samples counted. A non-finite local loss stops the
    run as diverged at round ``at`` (default ``key``), naming the first bad client."""
    cohort_states = engine_states(experiment, state, clients)
    t_train = time.perf_counter()
    with precision_context(experiment.spec.hardware.precision, experiment.device):
        if budgets is None:
            res = experiment.engine.train_cohort(key, state.params, extras, clients, cohort_states, lr)
        else:
            res = experiment.engine.train_cohort(key, state.params, extras, clients, cohort_states, lr, budgets)
    state.train_time += time.perf_counter() - t_train
    state.samples += res.samples
    if not math.isfinite(res.loss):
        raise DivergenceError(key if at is None else at, first_nonfinite_client(res.uploads, clients),
                              "non-finite local loss")  # fmt: skip
    return res


def train_step(experiment: Experiment, state: RunState, rnd: int) -> RoundResult:
    """The run loop's step ``rnd``: a driver's (an asynchronous server's update) or a synchronous round."""
    driver = experiment.capabilities.driver
    return train_round(experiment, state, rnd) if driver is None else driver_step(experiment, state, rnd, driver)


def is_eval_step(experiment: Experiment, rnd: int) -> bool:
    """Whether step ``rnd`` is evaluated: every ``eval.every`` rounds and the last, or as the driver decides."""
    default = is_eval_round(experiment.spec, rnd)
    driver = experiment.capabilities.driver
    return default if driver is None else bool(driver.is_eval(rnd, default))


def driver_step(experiment: Experiment, state: RunState, rnd: int, driver: Any) -> RoundResult:
    """Step ``rnd`` (0-based) of a driver (an asynchronous server: fedrun/system/servers/base.py): its update, on the
    run's cohort-training step; ``state`` is updated in place."""
    started = time.perf_counter()
    train = lambda *a: train_cohort_at(experiment, state, *a)  # noqa: E731
    update = driver.update(experiment, state, rnd, train, first_nonfinite_client)
    state.agg_time += update.aggregate_seconds
    lr = experiment.algorithm.local_lr(rnd, lr_at(experiment.spec, rnd))
    return RoundResult(rnd, update.clients, lr, update.loss, update.bytes_down, update.bytes_up,
                       update.aggregate_seconds, started, system=update.columns)  # fmt: skip


def train_round(experiment: Experiment, state: RunState, rnd: int) -> RoundResult:
    """Round ``rnd`` (0-based): the cohort chosen, who works planned, the workers trained from w^t, who reports
    decided, the reports aggregated; ``state`` is updated in place. The capabilities act at each point (module
    docstring); without any, every sampled client trains its whole plan and reports. A round nobody reports keeps
    w^t and the server state and records ``clients`` = 0.

    Raises DivergenceError on a non-finite local loss or global model (naming the first bad client).
    """
    spec, algo, fl, caps = experiment.spec, experiment.algorithm, experiment.spec.fl, experiment.capabilities
    started = time.perf_counter()
    # torch's global RNG (dropout...) re-keyed per round: a resumed round draws what it would have
    torch.manual_seed(derive(spec.seed, "torch-global", rnd))
    sampled = sample_clients(fl, spec.seed, rnd)
    ctx = RoundCtx(rnd, sampled, len(sampled))
    caps.choose(ctx)
    lr = algo.local_lr(rnd, lr_at(spec, rnd))
    if not len(ctx.sampled):  # an empty cohort (Poisson sampling): a capability may step the model alone
        t_agg = time.perf_counter()
        caps.empty_round(ctx, state)
        seconds = time.perf_counter() - t_agg
        return RoundResult(rnd, 0, lr, math.nan, 0, 0, seconds, started, diagnostics=ctx.columns)
    clients = torch.as_tensor(ctx.sampled, dtype=torch.long)
    ctx.trained = training_clients(fl, clients)  # fl.train_all: every client trains, the sampled are aggregated
    ctx.lr, ctx.extras = lr, algo.broadcast(state.params, state.server_state)
    caps.plan(ctx, state)
    workers = ctx.trained if ctx.works is None else ctx.trained[torch.as_tensor(ctx.works)]
    ctx.workers = workers
    ctx.result = res = _train(experiment, state, ctx)
    ctx.down_bytes = float(algo.broadcast_bytes(state.params, ctx.extras))
    sent = caps.upload_bytes(res.uploads)  # a client's upload bytes: as the upload stages send it
    ctx.up_bytes = sent if sent is not None else nbytes(res.uploads) / max(len(workers), 1)
    caps.report(ctx)
    bytes_down = int(ctx.down_bytes) * len(workers)  # fl.train_all: every client downloads
    if ctx.reports is None:
        if state.clients:
            state.clients.scatter(workers, res.states)
        res = aggregated_part(res, workers, clients)
        return _aggregated(experiment, state, rnd, res, clients, lr, bytes_down, started, ctx)
    reporters = torch.as_tensor(np.flatnonzero(ctx.reports), dtype=torch.long)
    if state.clients and len(reporters):
        rows = tree_map(lambda t: t.index_select(0, reporters.to(t.device)), res.states)
        state.clients.scatter(workers[reporters], rows)
    keep = reporters[torch.isin(workers[reporters], clients)]
    if not len(keep):  # nobody to aggregate: w^t stays, and the row says so
        return RoundResult(rnd, 0, lr, res.loss, bytes_down, 0, 0.0, started, system=ctx.columns)
    pick = lambda t: t.index_select(0, keep.to(t.device))  # noqa: E731
    part = CohortResult(tree_map(pick, res.uploads), {}, res.steps[keep], res.samples, res.loss)
    return _aggregated(experiment, state, rnd, part, workers[keep], lr, bytes_down, started, ctx)


def _train(experiment: Experiment, state: RunState, ctx: RoundCtx) -> CohortResult:
    """The round's workers trained (an empty result, no uploads and a NaN loss, when nobody works)."""
    assert ctx.workers is not None
    if not len(ctx.workers):
        return CohortResult({}, {}, torch.zeros(0, dtype=torch.long), 0, math.nan)
    return train_cohort_at(experiment, state, ctx.rnd, ctx.extras, ctx.workers, ctx.lr, ctx.budgets)


def _aggregated(
    experiment: Experiment, state: RunState, rnd: int, res: CohortResult, clients: torch.Tensor, lr: float,
    bytes_down: int, started: float, ctx: RoundCtx,
) -> RoundResult:  # fmt: skip
    result = aggregate_round(experiment, state, rnd, res, clients, lr, bytes_down, started)
    result.system = ctx.columns
    return result


def aggregate_round(
    experiment: Experiment,
    state: RunState,
    rnd: int,
    res: CohortResult,
    clients: torch.Tensor,
    lr: float,
    bytes_down: int,
    started: float,
) -> RoundResult:
    """The server's half of round ``rnd``: the uploads ``res`` of ``clients`` (in their order) into w^{t+1} with
    weights renormalised over them (:func:`aggregation_weights`); ``state`` is updated in place."""
    spec, algo, fl = experiment.spec, experiment.algorithm, experiment.spec.fl
    sizes = experiment.fed.sizes[clients].to(torch.float64)
    weighting = experiment.capabilities.weighting(fl.weighting)  # (DP-FedAvg weighs clients uniformly)
    weights = aggregation_weights(sizes, weighting).to(experiment.device)
    info = RoundInfo(rnd, fl.clients, clients, sizes, res.steps, lr)
    # what the server receives: the uploads after the capabilities' upload stages (compressed; a noised sum)
    sent = experiment.capabilities.upload_bytes(res.uploads)
    bytes_up = nbytes(res.uploads) if sent is None else len(clients) * int(sent)
    assert experiment.view is not None
    uploads, upload_diag = experiment.capabilities.uploads(state, rnd, res.uploads, clients, weights, experiment.view)
    res = dataclasses.replace(res, uploads=uploads)
    diagnostics = round_diagnostics(state.params, res.uploads, weights, res.steps, lr) if spec.eval.diagnostics else {}
    t_agg = time.perf_counter()  # after the diagnostics: aggregate_seconds times the method alone
    state.params, state.server_state, method_diag = algo.aggregate(
        state.params, state.server_state, res.uploads, weights, info
    )
    if "buffers" in res.uploads and not algo.owns_buffers:  # else aggregate() set them
        experiment.model.set_buffers(average_buffers(res.uploads["buffers"], weights))
    agg_seconds = time.perf_counter() - t_agg
    state.agg_time += agg_seconds
    if not all_finite(state.params):
        bad = first_nonfinite_client(res.uploads, clients)
        raise DivergenceError(rnd, bad, "non-finite global model after aggregation")
    rows = []
    if spec.eval.client_weights:
        rows = weight_rows(rnd, clients, sizes, weights, effective_weights(res.uploads["params"], state.params))
    return RoundResult(
        rnd, len(clients), lr, res.loss,
        bytes_down=bytes_down,
        bytes_up=bytes_up,
        aggregate_seconds=agg_seconds,
        started=started,
        diagnostics={**method_diag, **diagnostics, **upload_diag},
        weight_rows=rows,
    )  # fmt: skip


def is_eval_round(spec: RunSpec, rnd: int) -> bool:
    """Whether round ``rnd`` (0-based) is evaluated: every ``eval.every`` rounds, and always the last."""
    return (rnd + 1) % spec.eval.every == 0 or rnd == spec.fl.rounds - 1


def evaluation_row(
    experiment: Experiment,
    state: RunState,
    r: RoundResult,
    t0: float,
    client_acc: ClientAccuracy | None,
) -> dict[str, Any]:
    """metrics.csv's row of round ``r.rnd``: test (and train) accuracy and loss of w^{t+1}, the capabilities'
    columns of an evaluated round (epsilon...), then the round's lr, cohort size, local loss, bytes, timings, the
    capabilities' columns of the round (the clock...), diagnostics and the evaluated columns after them
    (personalised accuracy)."""
    ev = experiment.spec.eval
    model = experiment.algorithm.eval_params(state.params, state.server_state)
    acc, loss = evaluate(experiment.model, model, experiment.fed, experiment.fed.test, ev.batch_size)
    row: dict[str, Any] = {"round": r.rnd + 1, "test_acc": acc, "test_loss": loss}
    leading, evaluated = experiment.capabilities.eval_columns(r.rnd, state, model, r.lr)
    row.update(leading)
    if ev.train_acc:
        row["train_acc"], row["train_loss"] = evaluate(
            experiment.model, model, experiment.fed, experiment.fed.train, ev.batch_size
        )
    now = time.perf_counter()
    row.update(
        {
            "lr": r.lr,
            "clients": r.clients,
            "local_loss": r.loss,
            "bytes_down": r.bytes_down,
            "bytes_up": r.bytes_up,
            "round_seconds": now - r.started,
            "aggregate_seconds": r.aggregate_seconds,
            "seconds": now - t0,
            **r.system,
            **r.diagnostics,
            **(client_acc(model) if client_acc else {}),
            **evaluated,
        }
    )
    return row
