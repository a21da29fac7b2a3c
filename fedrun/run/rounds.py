"""One federated round: sample the cohort, train it, aggregate (:func:`train_round`); and its metrics row
(:func:`evaluation_row`)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedrun.algorithms.base import RoundInfo, average_buffers
from fedrun.config.schema import RunSpec
from fedrun.core.errors import DivergenceError
from fedrun.core.rng import derive
from fedrun.core.tree import Tree, all_finite, leaves, nbytes, tree_map
from fedrun.data.federated import num_local_steps
from fedrun.engines.auto import precision_context
from fedrun.engines.base import CohortResult
from fedrun.engines.sampling import aggregated_part, participations, sample_clients, training_clients
from fedrun.metrics.client_weights import effective_weights, weight_rows
from fedrun.metrics.clients import ClientAccuracy
from fedrun.metrics.diagnostics import round_diagnostics
from fedrun.metrics.evaluate import evaluate
from fedrun.metrics.personal import LocalEvaluation
from fedrun.run.state import RunState
from fedrun.system.clock import flops_per_sample
from fedrun.system.model import RoundClose, RoundPlan, SystemModel
from fedrun.upload.base import UploadContext
from fedrun.upload.pipeline import UPLOAD_STATE

if TYPE_CHECKING:
    from fedrun.run.experiment import Experiment


@dataclass
class RoundResult:
    """What a trained and aggregated round reports: its local lr and loss, the bytes it moved, the server's
    time, the method's and the optional diagnostics, and the round's client-weight rows."""

    rnd: int
    clients: int
    lr: float
    loss: float
    bytes_down: int
    bytes_up: int
    aggregate_seconds: float
    started: float
    diagnostics: dict[str, float] = field(default_factory=dict)
    weight_rows: list[dict[str, Any]] = field(default_factory=list)
    system: dict[str, float] = field(default_factory=dict)  # the simulated system's columns (none when ideal)


def lr_at(spec: RunSpec, rnd: int) -> float:
    """The configured local lr of round ``rnd`` (0-based): lr * lr_decay^rnd."""
    return spec.fl.lr * spec.fl.lr_decay**rnd


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


def train_round(experiment: Experiment, state: RunState, rnd: int) -> RoundResult:
    """Round ``rnd`` (0-based): the cohort trains from w^t, the algorithm aggregates; ``state`` is updated in place.

    Raises DivergenceError on a non-finite local loss or global model (naming the first bad client). With a
    system model (``system.*`` not ideal) the round is :func:`train_system_round`'s.
    """
    if experiment.system is not None:
        return train_system_round(experiment, state, rnd, experiment.system)
    spec, algo, fl = experiment.spec, experiment.algorithm, experiment.spec.fl
    started = time.perf_counter()
    # torch's global RNG (dropout...) re-keyed per round: a resumed round draws what it would have
    torch.manual_seed(derive(spec.seed, "torch-global", rnd))
    poisson = spec.privacy.mode == "client" and spec.privacy.sampling == "poisson"
    clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd, poisson), dtype=torch.long)
    if not len(clients):  # an empty Poisson cohort: DP-FedAvg releases the noise alone
        return empty_private_round(experiment, state, rnd, started)
    trained = training_clients(fl, clients)  # fl.train_all: every client trains, the sampled are aggregated
    lr = algo.local_lr(rnd, lr_at(spec, rnd))
    extras = algo.broadcast(state.params, state.server_state)
    cohort_states = engine_states(state, trained)
    t_train = time.perf_counter()
    with precision_context(spec.hardware.precision, experiment.device):
        res = experiment.engine.train_cohort(rnd, state.params, extras, trained, cohort_states, lr)
    state.train_time += time.perf_counter() - t_train
    state.samples += res.samples
    if not math.isfinite(res.loss):
        raise DivergenceError(rnd, first_nonfinite_client(res.uploads, trained), "non-finite local loss")
    if state.clients:
        state.clients.scatter(trained, res.states)
    res = aggregated_part(res, trained, clients)
    bytes_down = len(trained) * algo.broadcast_bytes(state.params, extras)  # fl.train_all: every client downloads
    return aggregate_round(experiment, state, rnd, res, clients, lr, bytes_down, started)


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
    # DP-FedAvg weighs clients uniformly: a client's weight bounds its sensitivity (docs/privacy.md)
    weights = aggregation_weights(sizes, "uniform" if experiment.privacy else fl.weighting).to(experiment.device)
    info = RoundInfo(rnd, fl.clients, clients, sizes, res.steps, lr)
    bytes_up, upload_diag = nbytes(res.uploads), dict[str, float]()
    # the upload stages (fedrun/upload/): what the server receives; under client-level DP its clipped, noised sum
    if experiment.upload is not None:
        res, upload_diag = upload_round(experiment, state, rnd, res, clients, weights)
        bytes_up = len(clients) * experiment.upload.bytes_per_client(res.uploads)
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


def empty_private_round(experiment: Experiment, state: RunState, rnd: int, started: float) -> RoundResult:
    """Round ``rnd`` of client-level DP whose Poisson cohort is empty: w^{t+1} = w^t + N(0, z^2 S^2) / m_exp
    (McMahan et al. 2018 Alg. 1 with an empty sum); the method's server state and the model's buffers stay.
    ``clients`` = 0 and a NaN local loss say so in metrics.csv."""
    dp = experiment.privacy
    if dp is None:
        raise RuntimeError("an empty cohort is drawn only by client-level DP's Poisson sampling")
    t_agg = time.perf_counter()
    state.params, columns = dp.aggregate(state.params, None, rnd)
    seconds = time.perf_counter() - t_agg
    state.agg_time += seconds
    lr = experiment.algorithm.local_lr(rnd, lr_at(experiment.spec, rnd))
    return RoundResult(rnd, 0, lr, math.nan, 0, 0, seconds, started, diagnostics=columns)


def engine_states(state: RunState, clients: torch.Tensor) -> Any:
    """The persistent states of ``clients`` the engine trains with: all but the upload stages' rows."""
    if not state.clients:
        return {}
    states = state.clients.gather(clients)
    states.pop(UPLOAD_STATE, None)
    return states


def upload_round(
    experiment: Experiment, state: RunState, rnd: int, res: CohortResult, clients: torch.Tensor, weights: torch.Tensor
) -> tuple[CohortResult, dict[str, float]]:
    """The cohort's uploads through the upload pipeline (fedrun/upload/pipeline.py), its stateful stages' rows of
    ``clients`` read and written back (staged with the round's other client-state writes)."""
    pipe, algo = experiment.upload, experiment.algorithm
    assert pipe is not None
    rows = state.clients.gather(clients)[UPLOAD_STATE] if pipe.stateful else None
    extras = algo.broadcast(state.params, state.server_state) if any(p.broadcast_ref for p in pipe.parts) else {}
    ctx = UploadContext(rnd, clients, experiment.spec.seed, weights, experiment.device)
    uploads, new_rows, diag = pipe.apply(state.params, extras, res.uploads, rows, ctx)
    if new_rows is not None:
        state.clients.scatter(clients, {UPLOAD_STATE: new_rows})
    return dataclasses.replace(res, uploads=uploads), diag


def is_eval_round(spec: RunSpec, rnd: int) -> bool:
    """Whether round ``rnd`` (0-based) is evaluated: every ``eval.every`` rounds, and always the last."""
    return (rnd + 1) % spec.eval.every == 0 or rnd == spec.fl.rounds - 1


def evaluation_row(
    experiment: Experiment,
    state: RunState,
    r: RoundResult,
    t0: float,
    client_acc: ClientAccuracy | None,
    local_eval: LocalEvaluation | None = None,
) -> dict[str, Any]:
    """metrics.csv's row of round ``r.rnd``: test (and train) accuracy and loss of w^{t+1}, then the round's
    lr, cohort size, local loss, bytes, timings and diagnostics."""
    ev = experiment.spec.eval
    model = experiment.algorithm.eval_params(state.params, state.server_state)
    acc, loss = evaluate(experiment.model, model, experiment.fed, experiment.fed.test, ev.batch_size)
    row: dict[str, Any] = {"round": r.rnd + 1, "test_acc": acc, "test_loss": loss}
    if experiment.privacy is not None:  # the budget spent so far, at privacy.delta (dp-accounting)
        row["epsilon"] = experiment.privacy.epsilon(r.rnd + 1)
    if experiment.sample_privacy is not None:  # the largest client's budget: its steps so far at q_i = B / n_i
        fl = experiment.spec.fl
        steps = participations(fl, experiment.spec.seed, r.rnd + 1) * np.array(
            [num_local_steps(int(n), fl) for n in experiment.fed.sizes]
        )
        row["epsilon"] = experiment.sample_privacy.epsilon(steps)
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
            **(local_eval(experiment.algorithm, model, state.clients, r.rnd, r.lr) if local_eval else {}),
        }
    )
    return row


def train_system_round(experiment: Experiment, state: RunState, rnd: int, system: SystemModel) -> RoundResult:
    """Round ``rnd`` under a system model (fedrun/system/model.py): the cohort (over-selected), who fails and who
    straggles decided before training, only the workers trained (stragglers on their budgets), the reporters
    decided on the simulated clock, and only they aggregated and their client states kept. A round nobody reports
    keeps w^t and the server state and records ``clients`` = 0."""
    spec, algo, fl = experiment.spec, experiment.algorithm, experiment.spec.fl
    started = time.perf_counter()
    torch.manual_seed(derive(spec.seed, "torch-global", rnd))
    sampled, target = system.sample(rnd, sample_clients(fl, spec.seed, rnd))
    trained = training_clients(fl, torch.as_tensor(sampled, dtype=torch.long)).numpy()
    lr = algo.local_lr(rnd, lr_at(spec, rnd))
    extras = algo.broadcast(state.params, state.server_state)
    if system.flops_per_sample is None:
        system.flops_per_sample = flops_per_sample(algo, experiment.fed, state.params, extras, lr)
    plan = system.plan(rnd, trained, algo.round_fl(rnd), state.clock)
    workers = torch.as_tensor(trained[plan.works], dtype=torch.long)
    res = _train_workers(experiment, state, rnd, extras, workers, lr, plan)
    down = float(algo.broadcast_bytes(state.params, extras))
    up = float(nbytes(res.uploads)) / max(len(workers), 1)
    if experiment.upload is not None:  # a client's upload time at its compressed size
        up = float(experiment.upload.bytes_per_client(res.uploads))
    seconds = system.client_seconds(plan.clients[plan.works], res.steps.numpy(), algo.round_fl(rnd), down, up)
    close = system.close(plan, target if system.config.over_selection > 1 else len(trained), seconds)
    state.clock += close.seconds
    reporters = torch.as_tensor(np.flatnonzero(close.reports), dtype=torch.long)
    if state.clients and len(reporters):
        state.clients.scatter(
            workers[reporters], tree_map(lambda t: t.index_select(0, reporters.to(t.device)), res.states)
        )
    keep = reporters[torch.isin(workers[reporters], torch.as_tensor(sampled, dtype=torch.long))]
    columns = system_columns(plan, close, state.clock)
    bytes_down = int(down) * len(workers)
    if not len(keep):  # nobody to aggregate: w^t stays, and the row says so
        return RoundResult(rnd, 0, lr, res.loss, bytes_down, 0, 0.0, started, system=columns)
    pick = lambda t: t.index_select(0, keep.to(t.device))  # noqa: E731
    part = CohortResult(tree_map(pick, res.uploads), {}, res.steps[keep], res.samples, res.loss)
    result = aggregate_round(experiment, state, rnd, part, workers[keep], lr, bytes_down, started)
    result.system = columns
    return result


def _train_workers(
    experiment: Experiment, state: RunState, rnd: int, extras: Tree, workers: torch.Tensor, lr: float, plan: RoundPlan
) -> CohortResult:
    """The engine's training of this round's ``workers`` (on ``plan.budgets`` when some straggle partially); an
    empty result (no uploads, NaN loss) when nobody works."""
    if not len(workers):
        return CohortResult({}, {}, torch.zeros(0, dtype=torch.long), 0, math.nan)
    spec = experiment.spec
    cohort_states = engine_states(state, workers)
    t_train = time.perf_counter()
    with precision_context(spec.hardware.precision, experiment.device):
        if plan.budgets is None:
            res = experiment.engine.train_cohort(rnd, state.params, extras, workers, cohort_states, lr)
        else:
            res = experiment.engine.train_cohort(rnd, state.params, extras, workers, cohort_states, lr, plan.budgets)
    state.train_time += time.perf_counter() - t_train
    state.samples += res.samples
    if not math.isfinite(res.loss):
        raise DivergenceError(rnd, first_nonfinite_client(res.uploads, workers), "non-finite local loss")
    return res


def system_columns(plan: RoundPlan, close: RoundClose, clock: float) -> dict[str, float]:
    """metrics.csv's columns of a round under a system model: its simulated length and the clock after it
    (seconds), and how many clients failed to report, straggled, missed the deadline, or reported after the
    first cohort-many (over-selection)."""
    return {
        "sim_seconds": close.seconds,
        "sim_clock": clock,
        "dropped": int(plan.dropped.sum()),
        "stragglers": int(plan.straggles.sum()),
        "late": close.late,
        "over_selected": close.discarded,
    }
