"""The asynchronous servers' event stream on the simulated clock (``system.server=fedasync|fedbuff``).

An async server keeps C clients in flight (``system.concurrency``). Each dispatched client trains from the server
version current at its dispatch, and its update reaches the server at its completion time on the simulated clock
(fedrun/system/clock.py: download, compute, upload). Events are ordered by (completion time, dispatch sequence
number): the sequence number is the fixed tie-break, and clients dispatched together are numbered in the order of
their ids. Every arrival at one instant is applied before the server refills its free slots, so the clients
dispatched at one time all start from one version and train as one cohort (one ``engine.train_cohort`` call).

A client's work is trained at its dispatch (its update is a pure function of the version it starts from, its
batch plan and its state) and its finished update waits in the queue until its completion time: the queue is
then all a checkpoint needs to resume mid-stream bit-exactly (:meth:`EventQueue.to_tree`).

Staleness functions are Xie et al. 2019 (FedAsync, sec. 3) with lag t - tau (the server versions since the
client's dispatch): constant s = 1; polynomial s = (t - tau + 1)^-a; hinge s = 1 if t - tau <= b, else
1 / (a (t - tau - b) + 1).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import SystemConfig
from fedrun.core.errors import ConfigError, ResumeError
from fedrun.core.rng import np_rng
from fedrun.core.tree import Tree, tree_map
from fedrun.models.base import FunctionalModel

# (completion time, dispatch sequence number, client, version dispatched at, dispatch batch, row in the batch)
Event = tuple[float, int, int, int, int, int]


def staleness_weight(kind: str, a: float, b: float, lag: int) -> float:
    """s(t - tau) of Xie et al. 2019 (sec. 3, eqs. of the constant, polynomial and hinge functions)."""
    if kind == "polynomial":
        return float((lag + 1.0) ** -a)
    if kind == "hinge":
        return 1.0 if lag <= b else 1.0 / (a * (lag - b) + 1.0)
    return 1.0


def check_async(config: SystemConfig, algorithm: Algorithm, model: FunctionalModel) -> None:
    """Refuse, in one line naming ``system.server``, a method or model an async server cannot step: its server
    step must be FedAvg's plain weighted average of the clients' models (both FedAsync's mixing and FedBuff's
    delta average are that average's asynchronous forms), so a method that overrides ``aggregate`` (server
    control variates, server optimisers, FedLAW, IMA's window) and a model with buffers (BatchNorm statistics,
    which are not deltas) are refused."""
    if config.server == "sync":
        return
    name = type(algorithm).__name__
    own_step = type(algorithm).aggregate is not Algorithm.aggregate or algorithm.owns_buffers
    if own_step:
        raise ConfigError(
            "system.server",
            f"{config.server} replaces the server step, but {name} has its own (it overrides aggregate); valid: sync,"
            " or a method whose server step is FedAvg's average (fedavg, fedprox, and other client-side methods)",
        )
    if model.buffers:
        raise ConfigError(
            "system.server",
            f"{config.server} mixes parameters, but the model has buffers ({', '.join(sorted(model.buffers))[:60]});"
            " valid: sync, or a model without BatchNorm",
        )


@dataclass
class EventQueue:
    """The in-flight clients of an async run and its counters. ``clock``: the simulated time of the last event;
    ``last_update``: the clock at the previous server update; ``dispatches``: dispatch batches so far (each keys
    its cohort's sampling and batch plans); ``seq``: clients dispatched so far; ``batches``: each dispatch batch's
    finished work (stacked trees: ``params`` the uploads, FedBuff's deltas; ``states`` the new client states;
    ``steps``; ``loss``), kept until its last client has arrived."""

    clock: float = 0.0
    last_update: float = 0.0
    dispatches: int = 0
    seq: int = 0
    heap: list[Event] = field(default_factory=list)
    batches: dict[int, Tree] = field(default_factory=dict)

    def idle_sample(self, n: int, clients: int, seed: int) -> np.ndarray:
        """The next dispatch batch: ``n`` of the clients not in flight, uniformly without replacement, keyed by
        (seed, "sample", dispatch batch); sorted ids. With nobody in flight this is fedrun's fixed sampling of a
        round (``sample_clients``), so a FedBuff run with K = C = the cohort and equal completion times draws
        FedAvg's cohorts."""
        free = np.ones(clients, dtype=bool)
        free[np.array([e[2] for e in self.heap], dtype=np.intp)] = False
        idle = free.nonzero()[0]
        if n >= len(idle):
            return idle
        return idle[np.sort(np_rng(seed, "sample", self.dispatches).choice(len(idle), n, replace=False))]

    def push(self, work: Tree, clients: np.ndarray, seconds: np.ndarray, version: int) -> None:
        """Dispatch batch ``work`` of ``clients`` (their simulated times ``seconds``, from now) at ``version``."""
        b = self.dispatches
        self.batches[b] = work
        for row, (c, s) in enumerate(zip(clients.tolist(), seconds.tolist(), strict=True)):
            heapq.heappush(self.heap, (self.clock + s, self.seq, c, version, b, row))
            self.seq += 1
        self.dispatches += 1

    def due(self) -> bool:
        """Whether the next event happens now (a tie with the clock): free slots wait until it has arrived."""
        return bool(self.heap) and self.heap[0][0] <= self.clock

    def pop(self) -> Event:
        """The next arrival; the clock moves to its completion time."""
        event = heapq.heappop(self.heap)
        self.clock = event[0]
        return event

    def release(self) -> None:
        """Drop the dispatch batches none of whose clients is still in flight."""
        live = {e[4] for e in self.heap}
        for b in [b for b in self.batches if b not in live]:
            del self.batches[b]

    def copy(self) -> EventQueue:
        """A copy to rewind to (the batches' tensors are never written in place, so they are shared)."""
        return EventQueue(self.clock, self.last_update, self.dispatches, self.seq, list(self.heap), dict(self.batches))

    def to_tree(self) -> Tree:
        """The queue as a tree of tensors (a checkpoint's ``events``): float64 times, int64 columns, and of each
        batch only the rows still in flight (renumbered), so a checkpoint holds at most C clients' work."""
        heap = sorted(self.heap)
        live: dict[int, list[int]] = {}
        for e in heap:
            live.setdefault(e[4], []).append(e[5])
        keep = {b: sorted(rows) for b, rows in live.items()}
        new_row = {(b, r): i for b, rows in keep.items() for i, r in enumerate(rows)}
        batches = {str(b): take_rows(self.batches[b], torch.tensor(rows)) for b, rows in keep.items()}
        return {
            "times": torch.tensor([e[0] for e in heap], dtype=torch.float64),
            "rows": torch.tensor([(*e[1:5], new_row[(e[4], e[5])]) for e in heap], dtype=torch.int64).reshape(
                len(heap), 5
            ),
            "clock": torch.tensor([self.clock, self.last_update], dtype=torch.float64),
            "counters": torch.tensor([self.dispatches, self.seq], dtype=torch.int64),
            "batches": batches,
        }

    @classmethod
    def from_tree(cls, tree: Tree, where: str) -> EventQueue:
        """The queue a checkpoint saved (:meth:`to_tree`); a damaged one is refused in one line naming ``where``."""
        try:
            times, rows, clock, counters = (tree[k] for k in ("times", "rows", "clock", "counters"))
            batches = {int(b): work for b, work in tree["batches"].items()}
            heap = [
                (float(t), *(int(x) for x in r))
                for t, r in zip(times.tolist(), rows.reshape(len(times), 5).tolist(), strict=True)
            ]
            if any(e[4] not in batches for e in heap):
                raise ValueError("an in-flight client's batch is missing")
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
            raise ResumeError(f"{where}: damaged async event queue ({e}); delete it to restart the run") from None
        heapq.heapify(heap)
        dispatches, seq = (int(x) for x in counters.tolist())
        return cls(float(clock[0]), float(clock[1]), dispatches, seq, heap, batches)  # type: ignore[arg-type]


def take_rows(work: Tree, ix: torch.Tensor) -> Tree:
    """Rows ``ix`` of a dispatch batch's stacked tensors (its 0-d entries, the cohort's loss, as they are)."""
    return tree_map(lambda t: t.index_select(0, ix.to(t.device)) if t.dim() else t, work)
