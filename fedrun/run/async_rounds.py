"""One server update of an asynchronous server (``system.server=fedasync|fedbuff``, docs/systems.md).

The run loop's "round" t is the t-th server update (metrics.csv's ``round`` is the server version after it,
``fl.rounds`` the number of updates). :func:`train_update` advances the event stream of fedrun/system/events.py
until the next update: free slots are filled (the clients dispatched while one version is current train as one
cohort, one ``engine.train_cohort`` call, before the update), arrivals are taken in (completion time, dispatch
order), and

- FedAsync (Xie et al. 2019, Alg. 1 and eq. of sec. 3): each arrival x_new, dispatched at version tau, is one
  update ``w_t = (1 - a_t) w_{t-1} + a_t x_new``, ``a_t = alpha s(t - tau)``;
- FedBuff (Nguyen et al. 2022, Alg. 1): each arrival's delta ``Delta_i = y_i - w_tau`` joins the buffer; at K
  of them ``w_t = w_{t-1} + eta_g sum_i p_i s(t - tau_i) Delta_i`` with ``p_i`` fedrun's aggregation weights
  over the buffer (``fl.weighting``: n_i / sum n_j, or the paper's 1/K with ``uniform``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedrun.core.errors import DivergenceError
from fedrun.core.rng import derive
from fedrun.core.tree import Tensors, Tree, leaves, nbytes, tree_map
from fedrun.engines.auto import precision_context
from fedrun.run.rounds import (
    RoundResult,
    first_nonfinite_client,
    is_eval_round,
    lr_at,
    train_round,
)
from fedrun.run.state import RunState
from fedrun.system.clock import flops_per_sample
from fedrun.system.events import Event, EventQueue, staleness_weight, take_rows
from fedrun.system.model import SystemModel

if TYPE_CHECKING:
    from fedrun.run.experiment import Experiment


def is_async(experiment: Experiment) -> bool:
    """Whether the run's server is asynchronous (``system.server`` other than ``sync``)."""
    return experiment.system is not None and experiment.system.config.server != "sync"


def train_update(experiment: Experiment, state: RunState, rnd: int) -> RoundResult:
    """The run loop's step ``rnd`` under an async server (:func:`train_async_update`); a synchronous round else."""
    if experiment.system is None or not is_async(experiment):
        return train_round(experiment, state, rnd)
    return train_async_update(experiment, state, rnd, experiment.system)


def is_eval_update(experiment: Experiment, state: RunState, rnd: int) -> bool:
    """Whether step ``rnd`` is evaluated: :func:`is_eval_round`, or under an async server with
    ``system.eval_every_seconds`` = T, the updates at which the clock passed a multiple of T (and the last)."""
    every = experiment.system.config.eval_every_seconds if experiment.system is not None else None
    if every is None or not isinstance(state.events, EventQueue) or rnd == experiment.spec.fl.rounds - 1:
        return is_eval_round(experiment.spec, rnd)
    return math.floor(state.events.clock / every) > math.floor(state.events.last_update / every)


def train_async_update(experiment: Experiment, state: RunState, rnd: int, system: SystemModel) -> RoundResult:
    """Server update ``rnd`` (0-based) of the async server: dispatch into free slots, take arrivals until the
    update happens, apply it; ``state`` (model, client states, event queue, clock) is updated in place."""
    started = time.perf_counter()
    queue = state.events if isinstance(state.events, EventQueue) else EventQueue()
    state.events = queue
    cfg, fl = system.config, experiment.spec.fl
    concurrency = cfg.concurrency if cfg.concurrency is not None else fl.cohort_size
    need = cfg.buffer if cfg.server == "fedbuff" else 1
    last_update, bytes_down = queue.clock, 0
    arrivals: list[Event] = []
    while len(arrivals) < need:
        free = concurrency - len(queue.heap)
        if free > 0 and not queue.due():
            bytes_down += dispatch(experiment, state, queue, free, rnd)
        arrivals.append(queue.pop())
    train_open_cohort(experiment, state, queue, rnd)  # (the clients dispatched from w_rnd: their arrivals need it)
    lags = [rnd - e[3] for e in arrivals]
    weights = [staleness_weight(cfg.staleness, cfg.staleness_a, cfg.staleness_b, lag) for lag in lags]
    if state.clients:
        state.clients.scatter(torch.tensor([e[2] for e in arrivals]), _gather(queue, arrivals, "states"))
    t_agg = time.perf_counter()
    state.params = server_step(experiment, state.params, queue, arrivals, weights)
    agg_seconds = time.perf_counter() - t_agg
    state.agg_time += agg_seconds
    if not finite(state.params):
        raise DivergenceError(
            rnd,
            first_nonfinite_client(_gather(queue, arrivals, "params"), torch.tensor([e[2] for e in arrivals])),
            "non-finite global model after the server update",
        )
    cohort_loss = {b: float(queue.batches[b]["loss"]) for b in {e[4] for e in arrivals}}
    losses = [cohort_loss[e[4]] for e in arrivals]
    # np.mean's value without its wrapper (the same reduction of the same array, one division); one float is itself
    loss = losses[0] if len(losses) == 1 else float(np.add.reduce(np.array(losses)) / len(losses))
    queue.last_update, state.clock = last_update, queue.clock
    queue.release()
    lr = experiment.algorithm.local_lr(rnd, lr_at(experiment.spec, rnd))
    columns = {
        "sim_seconds": queue.clock - last_update,
        "sim_clock": queue.clock,
        "staleness_mean": sum(lags) / len(lags),  # (np.mean's value: an exact integer sum, one rounded division)
        "staleness_max": int(max(lags)),
        "in_flight": len(queue.heap),
    }
    # each arrival uploads one row of its batch's ``params`` (models or deltas: the model's shapes and dtypes)
    up = len(arrivals) * int(client_bytes(experiment, state)[1])
    return RoundResult(rnd, len(arrivals), lr, loss, bytes_down, up, agg_seconds, started, system=columns)


def server_step(
    experiment: Experiment, params: Tensors, queue: EventQueue, arrivals: list[Event], weights: list[float]
) -> Tensors:
    """w_t from w_{t-1} and the arrivals' uploads (their rows of the queue's cohorts): FedAsync's mixing of
    the one arrival's model, or FedBuff's step along the buffer's weighted, staleness-scaled mean delta (module
    docstring)."""
    cfg = experiment.spec.system
    if cfg.server == "fedasync":
        a = cfg.mixing * weights[0]
        # (1 - a) w + a x as torch's lerp, one pass over each tensor: w + a (x - w) for a < 0.5, else
        # x - (1 - a)(x - w), so that a = 1 gives x exactly (FedAsync with mixing 1 is sequential SGD)
        ws, xs = leaves(params), [x[0] for x in leaves(_gather(queue, arrivals, "params"))]
        return _unflatten(params, torch._foreach_lerp(ws, xs, a))
    assert experiment.system is not None
    sizes = experiment.system.sizes[[e[2] for e in arrivals]].tolist()
    q = buffer_weights(sizes, experiment.spec.fl.weighting, weights, cfg.server_lr)
    if len({t.dtype for t in params.values()}) > 1:  # (a model of mixed dtypes: its tensors one by one)
        deltas, q64 = _gather(queue, arrivals, "params"), torch.tensor(q, dtype=torch.float64)
        return {k: w + torch.tensordot(q64.to(w.device, w.dtype), deltas[k], dims=1) for k, w in params.items()}
    # w + sum_i q_i Delta_i summed cohort by cohort, in the order the cohorts first arrive: per cohort one
    # (1 x r)(r x parameters) product over its arriving rows of its uploads matrix, added to w by addmm (into the
    # previous cohorts' sum). A cohort's rows are stored in completion order, so an update's arrivals from it are
    # consecutive rows, read where the cohort left them (else one index_select)
    parts: dict[int, list[tuple[int, float]]] = {}
    for e, q_i in zip(arrivals, q, strict=True):
        parts.setdefault(e[4], []).append((queue.row(e), q_i))
    out: torch.Tensor | None = None
    for b, rows in parts.items():
        rows.sort()
        ix = [r for r, _ in rows]
        m = queue.uploads_matrix(b)
        if ix[-1] - ix[0] == len(ix) - 1:
            m = m[ix[0] : ix[-1] + 1]
        else:
            m = m.index_select(0, torch.tensor(ix, device=m.device))
        row = torch.tensor([[q_i for _, q_i in rows]], dtype=m.dtype, device=m.device)
        if out is None:
            w = flat_base(params)
            w = torch.cat([t.reshape(1, -1) for t in params.values()], dim=1) if w is None else w
            out = torch.addmm(w, row, m)
        else:
            out.addmm_(row, m)
    assert out is not None
    return _split(params, out[0])


def flat_base(params: Tensors) -> torch.Tensor | None:
    """The (1 x parameters) matrix ``params`` are consecutive views of, in order (what FedBuff's step returns,
    :func:`_split`), else None: the next step then reads w as it is, with no copy into one row."""
    base = next(iter(params.values()))._base
    if base is None or base.dim() != 2 or base.shape[0] != 1 or not base.is_contiguous():
        return None
    ptr, size = base.data_ptr(), base.element_size()
    for t in params.values():
        if t._base is not base or t.data_ptr() != ptr or not t.is_contiguous() or t.dtype != base.dtype:
            return None
        ptr += t.numel() * size
    return base if ptr == base.data_ptr() + base.numel() * size else None


def _split(like: Tensors, flat: torch.Tensor) -> Tensors:
    """``flat`` (the tensors of ``like`` side by side, in its order) as tensors shaped like ``like``'s (views)."""
    new, off = {}, 0
    for k, t in like.items():
        new[k] = flat[off : off + t.numel()].view(t.shape)
        off += t.numel()
    return new


def _unflatten(like: Tree, values: Sequence[torch.Tensor]) -> Tree:
    """``values`` (in :func:`leaves` order) in the structure of ``like``."""
    it = iter(values)
    return tree_map(lambda _: next(it), like)


def buffer_weights(sizes: list[int], weighting: str, staleness: list[float], server_lr: float) -> list[float]:
    """FedBuff's eta_g p_i s(t - tau_i) in float64, with p_i :func:`aggregation_weights`' (n_i / sum_j n_j, or 1/K
    uniform or when the buffer holds no sample) as the same floats: the sizes are integers, so their sum is exact
    in any order, and each n_i / sum is one rounded division, as are the products after it."""
    total = sum(sizes)
    p = [n / total for n in sizes] if weighting == "size" and total > 0 else [1 / len(sizes)] * len(sizes)
    return [server_lr * (p_i * s_i) for p_i, s_i in zip(p, staleness, strict=True)]


def finite(params: Tensors) -> bool:
    """Whether the model holds no NaN or inf, from one sum per tensor (NaN and inf propagate into a sum; a sum can
    overflow only for a model already diverged), a tenth of ``all_finite``'s cost, paid at every update; one sum
    when the tensors are views of one row (:func:`flat_base`)."""
    base = flat_base(params) if params else None
    if base is not None and base.is_floating_point():
        return math.isfinite(float(base.sum()))
    return all(math.isfinite(float(t.sum())) for t in leaves(params) if t.is_floating_point())


def client_uploads(server: str, ends: Tensors, start: Tensors) -> tuple[Tensors, torch.Tensor | None]:
    """What the dispatched clients send: FedAsync their models y_i; FedBuff their deltas Delta_i = y_i - w_tau (so
    the server needs no old version), written as one (clients x parameters) matrix, the tensors side by side in
    the order of ``start``'s names, and returned also as views of it (the matrix second; None for FedAsync)."""
    if server != "fedbuff":
        return ends, None
    if len({t.dtype for t in start.values()}) > 1:  # (mixed dtypes: no one matrix; server_step reads them one by one)
        return {k: ends[k] - w for k, w in start.items()}, None
    rows = next(iter(ends.values())).shape[0]
    first = next(iter(start.values()))
    flat = torch.empty(rows, sum(t.numel() for t in start.values()), dtype=first.dtype, device=first.device)
    deltas, off = {}, 0
    for k, w in start.items():
        block = flat[:, off : off + w.numel()].view(rows, *w.shape)
        torch.sub(ends[k], w, out=block)
        deltas[k], off = block, off + w.numel()
    return deltas, flat


def _gather(queue: EventQueue, arrivals: list[Event], key: str) -> Tree:
    """The arrivals' rows of their batches' ``key`` tree, stacked in arrival order: a single arrival's rows as
    views (FedAsync: no copy), K from one batch by one index_select, else the rows' views (made once per batch,
    :meth:`EventQueue.row_views`) copied once by one stack per tensor."""
    if len(arrivals) == 1:
        r = queue.row(arrivals[0])
        return tree_map(lambda t: t[r : r + 1], queue.batches[arrivals[0][4]][key])
    if len({e[4] for e in arrivals}) == 1:  # (K from one cohort)
        return take_rows(queue.batches[arrivals[0][4]][key], torch.tensor([queue.row(e) for e in arrivals]))
    views = [queue.row_views(e[4], key) for e in arrivals]
    rows = [queue.row(e) for e in arrivals]
    return tree_map(lambda *vs: torch.stack([v[r] for v, r in zip(vs, rows, strict=True)]), *views)


def dispatch(experiment: Experiment, state: RunState, queue: EventQueue, free: int, version: int) -> int:
    """Fill ``free`` slots at server ``version`` and the queue's clock: the sampled idle clients join the version's
    open cohort (:func:`train_open_cohort` trains it) and wait in the queue until their completion times, which the
    clock gives from their planned steps and the bytes they move. Returns the bytes they download."""
    spec, algo, system = experiment.spec, experiment.algorithm, experiment.system
    assert system is not None
    clients = queue.idle_sample(free, spec.fl.clients, spec.seed)
    if queue.in_open and any(c in queue.in_open for c in clients.tolist()):
        # a client whose first run from this version is still in the open cohort: that cohort trains now, so that
        # the second run is another cohort's (its own batch plan), not a copy of the first
        train_open_cohort(experiment, state, queue, version)
    fl = algo.round_fl(queue.cohort())
    if system.flops_per_sample is None:
        extras = algo.broadcast(state.params, state.server_state)
        lr = algo.local_lr(version, lr_at(spec, version))
        system.flops_per_sample = flops_per_sample(algo, experiment.fed, state.params, extras, lr)
    down, up = client_bytes(experiment, state)
    seconds = system.client_seconds(clients, system.planned_steps(clients, fl), fl, down, up)
    queue.push(None, clients, seconds, version)
    return int(down) * len(clients)


def client_bytes(experiment: Experiment, state: RunState) -> tuple[float, float]:
    """The bytes an async client downloads (w and the extras) and uploads (its model, or FedBuff's delta: checked
    when its cohort trains), counted once per run: the model's shapes never change."""
    system = experiment.system
    assert system is not None
    if system.async_bytes is None:
        extras = experiment.algorithm.broadcast(state.params, state.server_state)
        down = float(experiment.algorithm.broadcast_bytes(state.params, extras))
        system.async_bytes = (down, float(nbytes(state.params)))
    return system.async_bytes


def train_open_cohort(experiment: Experiment, state: RunState, queue: EventQueue, version: int) -> None:
    """Train the queue's open cohort from w_version as one cohort (batch plans and torch's global RNG keyed by its
    batch number, the dispatch that opened it) and store its clients' uploads (FedBuff: their deltas), states,
    steps and loss in the queue. Its steps and upload bytes must be those the clock planned at the dispatches."""
    cohort = queue.close()
    if cohort is None:
        return
    b, clients = cohort
    spec, algo, system = experiment.spec, experiment.algorithm, experiment.system
    assert system is not None
    ids = torch.as_tensor(clients, dtype=torch.long)
    # torch's global RNG (dropout...) keyed by the cohort; the CPU generator alone: torch.manual_seed costs ms
    seed = derive(spec.seed, "torch-global-dispatch", b)  # (one a cohort: none to prefetch)
    torch.default_generator.manual_seed(seed)
    if experiment.device.type == "cuda":
        torch.cuda.manual_seed(seed)
    lr = algo.local_lr(version, lr_at(spec, version))
    extras = algo.broadcast(state.params, state.server_state)
    states = state.clients.gather(ids) if state.clients else {}
    t_train = time.perf_counter()
    with precision_context(spec.hardware.precision, experiment.device):
        res = experiment.engine.train_cohort(b, state.params, extras, ids, states, lr)
    state.train_time += time.perf_counter() - t_train
    state.samples += res.samples
    if not math.isfinite(res.loss):
        raise DivergenceError(version, first_nonfinite_client(res.uploads, ids), "non-finite local loss")
    planned = torch.from_numpy(system.planned_steps(clients, algo.round_fl(b)))
    # (the uploads' structure is the method's: their bytes are checked at the run's first cohort)
    bytes_ok = system.async_checked or nbytes(res.uploads) == len(clients) * client_bytes(experiment, state)[1]
    system.async_checked = True
    if not torch.equal(res.steps, planned.to(res.steps.dtype)) or not bytes_ok:
        raise RuntimeError(
            f"{type(algo).__name__} under system.server={spec.system.server}: the cohort ran other steps or uploaded"
            " other bytes than the simulated clock planned at its dispatch (a method that changes either needs the"
            " clock to know it first)"
        )
    uploads, flat = client_uploads(spec.system.server, res.uploads["params"], state.params)
    queue.fill(b, {"params": uploads, "states": res.states, "steps": res.steps, "loss": torch.tensor(res.loss)}, flat)
