"""The asynchronous-server contract (``system.server``, docs/systems.md): an event stream on the simulated clock in
place of synchronous rounds, and the registry of servers.

The run loop's step t is the t-th server update (metrics.csv's ``round`` is the server version after it,
``fl.rounds`` the number of updates). :meth:`AsyncServer.update` advances the server's event queue
(fedrun/system/servers/queue.py) until the next update: free slots are filled (the clients dispatched while one
version is current train as one cohort, one call of the run's cohort-training step, before the update), arrivals
are taken in (completion time, dispatch order), and once :attr:`AsyncServer.arrivals` of them are in, the server
steps the model (:meth:`AsyncServer.step`, each server's own).

A server is one module of this package registering a subclass by name (``@SERVERS.register("fedbuff")``): what its
clients upload (:meth:`AsyncServer.uploads`: models, or deltas), how many arrivals make an update, and its step.
Staleness functions are Xie et al. 2019 (FedAsync, sec. 3) with lag t - tau (the server versions since the
client's dispatch): constant s = 1; polynomial s = (t - tau + 1)^-a; hinge s = 1 if t - tau <= b, else
1 / (a (t - tau - b) + 1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.rng import derive
from fedrun.core.tree import Tensors, Tree, leaves, nbytes, tree_map
from fedrun.models.base import FunctionalModel
from fedrun.system.model import SystemModel
from fedrun.system.registries import SERVERS as SERVERS
from fedrun.system.servers.queue import Event, EventQueue, take_rows

# the run's one cohort-training step (fedrun/run/rounds.py train_cohort_at): (batch key, extras, clients, lr,
# budgets, round for errors) -> the engine's CohortResult
TrainStep = Callable[..., Any]
# first_nonfinite_client of fedrun/run/rounds.py: (stacked uploads, their clients) -> the first bad client or None
FirstBad = Callable[[Tree, torch.Tensor], "int | None"]


def staleness_weight(kind: str, a: float, b: float, lag: int) -> float:
    """s(t - tau) of Xie et al. 2019 (sec. 3, eqs. of the constant, polynomial and hinge functions) at ``lag``, the
    server updates since the client's dispatch (0: trained from the model it is mixed into, s = 1; counted as the
    authors' code counts it, fedrun/system/servers/fedasync.py)."""
    if kind == "polynomial":
        return float((lag + 1.0) ** -a)
    if kind == "hinge":
        return 1.0 if lag <= b else 1.0 / (a * (lag - b) + 1.0)
    return 1.0


@dataclass
class Update:
    """What one server update reports to the run: its arrivals' count and mean local loss, the bytes moved, the
    server step's time, and its columns (the clock, the staleness, the clients in flight)."""

    clients: int
    loss: float
    bytes_down: int
    bytes_up: int
    aggregate_seconds: float
    columns: dict[str, float] = field(default_factory=dict)


class AsyncServer:
    """An asynchronous server: its event queue (its state, :meth:`state_dict`), the shared dispatch-and-arrive loop
    (:meth:`update`), and each server's upload form and step (subclasses)."""

    # an update returns new tensors and never writes w in place: a finished update's model is kept by reference
    fresh_params: ClassVar[bool] = True

    def __init__(self, settings: Any, fl: Any, seed: int, system: SystemModel) -> None:
        self.settings, self.fl, self.seed, self.system = settings, fl, seed, system
        self.queue = EventQueue()
        self.concurrency: int = settings.concurrency if settings.concurrency is not None else fl.cohort_size
        self.bytes: tuple[float, float] | None = None  # a client's bytes down and up, counted once (the shapes stay)
        self.bytes_checked = False  # whether a cohort's upload bytes were checked against ``bytes``

    # -- what each server defines
    @property
    def arrivals(self) -> int:
        """Arrivals per server update."""
        return 1

    def uploads(self, ends: Tensors, start: Tensors) -> tuple[Tensors, torch.Tensor | None]:
        """What the dispatched clients send, from their models ``ends`` (stacked) trained from ``start``, and
        optionally the same as one (clients x parameters) matrix: their models by default."""
        return ends, None

    def step(self, params: Tensors, arrivals: list[Event], staleness: list[float]) -> Tensors:
        """w_t from w_{t-1} = ``params`` and the ``arrivals``' uploads (each with its staleness weight s)."""
        raise NotImplementedError

    # -- config time
    @classmethod
    def check(cls, settings: Any, fl: Any) -> None:
        """Refuse, in one line, what has no meaning on an event stream: round notions (a deadline, over-selection,
        fl.train_all, Bernoulli cohorts), failures and stragglers (not simulated under async yet), more concurrent
        clients than clients; a server adds its own (FedBuff: a buffer larger than the concurrency)."""
        c = settings.concurrency if settings.concurrency is not None else fl.cohort_size
        refusals = (
            ("system.deadline", settings.deadline is not None, "null (an async server has no rounds to close)"),
            ("system.over_selection", settings.over_selection > 1, "1 (an async server has no rounds to close)"),
            ("system.dropout", settings.dropout > 0, "0 (failures are not simulated under an async server yet)"),
            ("system.stragglers", settings.stragglers > 0, "0 (a device's speed already sets its completion time)"),
            ("fl.train_all", fl.train_all, "false (an async server trains only the clients it dispatches)"),
            ("fl.sampling", fl.sampling != "fixed", "fixed (an async server dispatches a fixed number of clients)"),
            ("system.concurrency", c > fl.clients, f"at most fl.clients={fl.clients}"),
        )
        for key, bad, valid in refusals:
            if bad:
                raise ConfigError(key, f"not with system.server={settings.server}; valid: {valid}")

    @classmethod
    def check_method(cls, server: str, algorithm: Algorithm, model: FunctionalModel) -> None:
        """Refuse, in one line naming ``system.server``, a method or model the server cannot step: its server step
        must be FedAvg's plain weighted average of the clients' models (FedAsync's mixing and FedBuff's delta average
        are its asynchronous forms), so a method that overrides ``aggregate`` (server control variates, server
        optimisers, FedLAW, IMA's window) and a model with buffers (BatchNorm statistics, not deltas) are refused."""
        name = type(algorithm).__name__
        if type(algorithm).aggregate is not Algorithm.aggregate or algorithm.owns_buffers:
            raise ConfigError(
                "system.server",
                f"{server} replaces the server step, but {name} has its own (it overrides aggregate); valid: sync, or"
                " a method whose server step is FedAvg's average (fedavg, fedprox, and other client-side methods)",
            )
        if model.buffers:
            raise ConfigError(
                "system.server",
                f"{server} mixes parameters, but the model has buffers ({', '.join(sorted(model.buffers))[:60]});"
                " valid: sync, or a model without BatchNorm",
            )

    # -- the run's view of the stream
    @property
    def irregular_eval(self) -> bool:
        """Whether the evaluated updates follow the clock (``system.eval_every_seconds``), not ``eval.every``."""
        return self.settings.eval_every_seconds is not None

    def is_eval(self, rnd: int, default: bool) -> bool:
        """Whether update ``rnd`` is evaluated: ``default`` (eval.every, and the last), or with
        ``system.eval_every_seconds`` = T the updates at which the clock passed a multiple of T (and the last)."""
        every = self.settings.eval_every_seconds
        if every is None or rnd == self.fl.rounds - 1:
            return default
        return bool(math.floor(self.queue.clock / every) > math.floor(self.queue.last_update / every))

    def state_dict(self) -> Tree:
        return self.queue.to_tree()

    def load_state_dict(self, tree: Tree, where: str) -> None:
        self.queue = EventQueue.from_tree(tree, where)

    def snapshot(self) -> EventQueue:
        return self.queue.copy()

    def restore(self, snap: EventQueue) -> None:
        self.queue = snap.copy()

    # -- one server update
    def update(self, run: Any, state: Any, rnd: int, train: TrainStep, first_bad: FirstBad) -> Update:
        """Server update ``rnd`` (0-based): dispatch into free slots, take arrivals until the update happens, apply
        it; ``state`` (the model, the client states) and the queue are updated in place."""
        queue, cfg = self.queue, self.settings
        last_update, bytes_down = queue.clock, 0
        arrivals: list[Event] = []
        while len(arrivals) < self.arrivals:
            free = self.concurrency - len(queue.heap)
            if free > 0 and not queue.due():
                bytes_down += self.dispatch(run, state, free, rnd, train)
            arrivals.append(queue.pop())
        self.train_open_cohort(run, state, rnd, train)  # (the clients dispatched from w_rnd: their arrivals need it)
        lags = [rnd - e.version for e in arrivals]
        weights = [staleness_weight(cfg.staleness, cfg.staleness_a, cfg.staleness_b, lag) for lag in lags]
        if state.clients:
            state.clients.scatter(torch.tensor([e.client for e in arrivals]), self.gather(arrivals, "states"))
        t_agg = time.perf_counter()
        state.params = self.step(state.params, arrivals, weights)
        agg_seconds = time.perf_counter() - t_agg
        if not finite(state.params):
            bad = first_bad(self.gather(arrivals, "params"), torch.tensor([e.client for e in arrivals]))
            raise DivergenceError(rnd, bad, "non-finite global model after the server update")
        cohort_loss = {b: float(queue.batches[b]["loss"]) for b in {e.batch for e in arrivals}}
        losses = [cohort_loss[e.batch] for e in arrivals]
        # np.mean's value without its wrapper (the same reduction of the same array, one division); one float is itself
        loss = losses[0] if len(losses) == 1 else float(np.add.reduce(np.array(losses)) / len(losses))
        queue.last_update = last_update
        queue.release()
        columns = {
            "sim_seconds": queue.clock - last_update,
            "sim_clock": queue.clock,
            "staleness_mean": sum(lags) / len(lags),  # (np.mean's value: an exact integer sum, one rounded division)
            "staleness_max": int(max(lags)),
            "in_flight": len(queue.heap),
        }
        # each arrival uploads one row of its batch's ``params`` (models or deltas: the model's shapes and dtypes)
        up = len(arrivals) * int(self.client_bytes(run, state)[1])
        return Update(len(arrivals), loss, bytes_down, up, agg_seconds, columns)

    def gather(self, arrivals: list[Event], key: str) -> Tree:
        """The arrivals' rows of their batches' ``key`` tree, stacked in arrival order: a single arrival's rows as
        views (no copy), K from one batch by one index_select, else the rows' views (made once per batch,
        :meth:`EventQueue.row_views`) copied once by one stack per tensor."""
        queue = self.queue
        if len(arrivals) == 1:
            r = queue.row(arrivals[0])
            return tree_map(lambda t: t[r : r + 1], queue.batches[arrivals[0].batch][key])
        if len({e.batch for e in arrivals}) == 1:  # (K from one cohort)
            return take_rows(queue.batches[arrivals[0].batch][key], torch.tensor([queue.row(e) for e in arrivals]))
        views = [queue.row_views(e.batch, key) for e in arrivals]
        rows = [queue.row(e) for e in arrivals]
        return tree_map(lambda *vs: torch.stack([v[r] for v, r in zip(vs, rows, strict=True)]), *views)

    def dispatch(self, run: Any, state: Any, free: int, version: int, train: TrainStep) -> int:
        """Fill ``free`` slots at server ``version`` and the queue's clock: the sampled idle clients join the
        version's open cohort (:meth:`train_open_cohort` trains it) and wait in the queue until their completion
        times, which the clock gives from their planned steps and the bytes they move. Returns the bytes they
        download."""
        queue, algo, system = self.queue, run.algorithm, self.system
        clients = queue.idle_sample(free, self.fl.clients, self.seed)
        if queue.in_open and any(c in queue.in_open for c in clients.tolist()):
            # a client whose first run from this version is still in the open cohort: that cohort trains now, so that
            # the second run is another cohort's (its own batch plan), not a copy of the first
            self.train_open_cohort(run, state, version, train)
        fl = algo.round_fl(queue.cohort())
        if system.flops_per_sample is None:
            extras = algo.broadcast(state.params, state.server_state)
            system.count_flops(algo, run.fed, state.params, extras, algo.local_lr(version, self.fl.lr_at(version)))
        down, up = self.client_bytes(run, state)
        seconds = system.client_seconds(clients, system.planned_steps(clients, fl), fl, down, up)
        queue.push(None, clients, seconds, version)
        return int(down) * len(clients)

    def client_bytes(self, run: Any, state: Any) -> tuple[float, float]:
        """The bytes an async client downloads (w and the extras) and uploads (its model, or FedBuff's delta: checked
        when its cohort trains), counted once per run: the model's shapes never change."""
        if self.bytes is None:
            extras = run.algorithm.broadcast(state.params, state.server_state)
            down = float(run.algorithm.broadcast_bytes(state.params, extras))
            self.bytes = (down, float(nbytes(state.params)))
        return self.bytes

    def train_open_cohort(self, run: Any, state: Any, version: int, train: TrainStep) -> None:
        """Train the queue's open cohort from w_version as one cohort (batch plans and torch's global RNG keyed by its
        batch number, the dispatch that opened it) and store its clients' uploads (FedBuff: their deltas), states,
        steps and loss in the queue. Its steps and upload bytes must be those the clock planned at the dispatches."""
        cohort = self.queue.close()
        if cohort is None:
            return
        b, clients = cohort
        algo = run.algorithm
        ids = torch.as_tensor(clients, dtype=torch.long)
        # torch's global RNG (dropout...) keyed by the cohort; the CPU generator alone: torch.manual_seed costs ms
        seed = derive(self.seed, "torch-global-dispatch", b)  # (one a cohort: none to prefetch)
        torch.default_generator.manual_seed(seed)
        if run.device.type == "cuda":
            torch.cuda.manual_seed(seed)
        lr = algo.local_lr(version, self.fl.lr_at(version))
        extras = algo.broadcast(state.params, state.server_state)
        res = train(b, extras, ids, lr, None, version)
        planned = torch.from_numpy(self.system.planned_steps(clients, algo.round_fl(b)))
        # (the uploads' structure is the method's: their bytes are checked at the run's first cohort)
        bytes_ok = self.bytes_checked or nbytes(res.uploads) == len(clients) * self.client_bytes(run, state)[1]
        self.bytes_checked = True
        if not torch.equal(res.steps, planned.to(res.steps.dtype)) or not bytes_ok:
            raise RuntimeError(
                f"{type(algo).__name__} under system.server={self.settings.server}: the cohort ran other steps or"
                " uploaded other bytes than the simulated clock planned at its dispatch (a method that changes either"
                " needs the clock to know it first)"
            )
        uploads, flat = self.uploads(res.uploads["params"], state.params)
        work = {"params": uploads, "states": res.states, "steps": res.steps, "loss": torch.tensor(res.loss)}
        self.queue.fill(b, work, flat)


def flat_base(params: Tensors) -> torch.Tensor | None:
    """The (1 x parameters) matrix ``params`` are consecutive views of, in order (what FedBuff's step returns,
    :func:`split`), else None: the next step then reads w as it is, with no copy into one row."""
    base = next(iter(params.values()))._base
    if base is None or base.dim() != 2 or base.shape[0] != 1 or not base.is_contiguous():
        return None
    ptr, size = base.data_ptr(), base.element_size()
    for t in params.values():
        if t._base is not base or t.data_ptr() != ptr or not t.is_contiguous() or t.dtype != base.dtype:
            return None
        ptr += t.numel() * size
    return base if ptr == base.data_ptr() + base.numel() * size else None


def split(like: Tensors, flat: torch.Tensor) -> Tensors:
    """``flat`` (the tensors of ``like`` side by side, in its order) as tensors shaped like ``like``'s (views)."""
    new, off = {}, 0
    for k, t in like.items():
        new[k] = flat[off : off + t.numel()].view(t.shape)
        off += t.numel()
    return new


def unflatten(like: Tree, values: Sequence[torch.Tensor]) -> Tree:
    """``values`` (in :func:`leaves` order) in the structure of ``like``."""
    it = iter(values)
    return tree_map(lambda _: next(it), like)


def finite(params: Tensors) -> bool:
    """Whether the model holds no NaN or inf, from one sum per tensor (NaN and inf propagate into a sum; a sum can
    overflow only for a model already diverged), a tenth of ``all_finite``'s cost, paid at every update; one sum
    when the tensors are views of one row (:func:`flat_base`)."""
    base = flat_base(params) if params else None
    if base is not None and base.is_floating_point():
        return math.isfinite(float(base.sum()))
    return all(math.isfinite(float(t.sum())) for t in leaves(params) if t.is_floating_point())
