"""The asynchronous servers' event queue on the simulated clock (``system.server``: fedrun/system/servers/).

An async server keeps C clients in flight (``system.concurrency``). Each dispatched client trains from the server
version current at its dispatch, and its update reaches the server at its completion time on the simulated clock
(fedrun/system/clock.py: download, compute, upload). Events are ordered by (completion time, dispatch sequence
number): the sequence number is the fixed tie-break, and clients dispatched together are numbered in the order of
their ids. Every arrival at one instant is applied before the server refills its free slots.

The clients dispatched while one server version is current all start from it, so they train as one cohort (one
``engine.train_cohort`` call): a dispatch only places its clients in the version's open cohort, at their
completion times (which depend on the devices, the bytes and the planned steps, never on the model), and the
cohort trains when the version ends, before the server update that needs its arrivals (or earlier, when a client
that arrived is dispatched again while its first run is still in the open cohort). A client's update is a pure
function of the version it starts from, its batch plan and its state, so when it is computed does not change it.
Its finished update waits in the queue until its completion time: the queue is then all a checkpoint needs to
resume mid-stream bit-exactly (:meth:`EventQueue.to_tree`; a checkpoint is taken between updates, when no cohort
is open).

Staleness functions are Xie et al. 2019 (FedAsync, sec. 3) with lag t - tau (the server versions since the
client's dispatch): constant s = 1; polynomial s = (t - tau + 1)^-a; hinge s = 1 if t - tau <= b, else
1 / (a (t - tau - b) + 1).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from fedrun.core.errors import ResumeError
from fedrun.core.rng import derive, np_rng
from fedrun.core.tree import Tree, tree_map


class Event(NamedTuple):
    """One dispatched client's arrival. Events order as tuples: by completion ``time``, then ``seq``."""

    time: float  # its completion time on the simulated clock
    seq: int  # the dispatch sequence number: the fixed tie-break
    client: int
    version: int  # the server version it was dispatched at (and trains from)
    batch: int  # its cohort's batch number (the dispatch that opened the cohort)
    row: int  # its row in the cohort in dispatch order (:meth:`EventQueue.row` gives where its work is stored)


# dispatch batches whose keyed generators and seeds are made at once (a warm loop, not one cold call a dispatch)
PREFETCH = 64


@dataclass
class EventQueue:
    """The in-flight clients of an async run and its counters. ``clock``: the simulated time of the last event;
    ``last_update``: the clock at the previous server update; ``dispatches``: dispatch batches so far (each keys
    its sampling; the one that opens a cohort keys the cohort's batch plans and is its batch number); ``seq``:
    clients dispatched so far; ``batches``: each trained cohort's
    finished work (stacked trees: ``params`` the uploads, FedBuff's deltas; ``states`` the new client states;
    ``steps``; ``loss``), kept until its last client has arrived.

    The other fields are derived, never saved nor copied, and rebuilt from ``heap`` when missing: ``idle`` (which
    clients are not in flight), ``live`` (in-flight clients per batch) and ``done`` (batches whose last client has
    arrived, dropped at :meth:`release`), ``views`` (:meth:`row_views`) and ``keyed`` (:meth:`keyed`), so that a
    dispatch and an update cost a few numpy and torch calls, not one per client or per in-flight event. ``rowmap``
    and ``flat`` (each cohort's row order and uploads matrix, :meth:`row`, :meth:`uploads_matrix`) are copied but
    not saved: a checkpoint stores the rows in their stored order, renumbered, and the matrix is rebuilt from them.
    ``open``, ``pending``, ``pending_times``, ``in_open``: the open cohort (:meth:`cohort`), empty between updates."""

    clock: float = 0.0
    last_update: float = 0.0
    dispatches: int = 0
    seq: int = 0
    heap: list[Event] = field(default_factory=list)
    batches: dict[int, Tree] = field(default_factory=dict)
    idle: np.ndarray | None = field(default=None, repr=False, compare=False)
    live: dict[int, int] | None = field(default=None, repr=False, compare=False)
    done: list[int] = field(default_factory=list, repr=False, compare=False)
    views: dict[tuple[int, str], Tree] = field(default_factory=dict, repr=False, compare=False)
    keyed: dict[tuple[str, int, int], Any] = field(default_factory=dict, repr=False, compare=False)
    # the open cohort: its batch number (the dispatch that opened it) and its clients in row order; not saved
    # (None between updates)
    open: int | None = field(default=None, repr=False, compare=False)
    pending: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)
    pending_times: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)
    in_open: set[int] = field(default_factory=set, repr=False, compare=False)
    # a trained cohort's rows are stored in completion order (an update's arrivals from one cohort are then
    # consecutive rows): each cohort's dispatch row -> stored row (absent: the same), and its uploads as one matrix
    rowmap: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    flat: dict[int, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    def idle_sample(self, n: int, clients: int, seed: int) -> np.ndarray:
        """The next dispatch batch: ``n`` of the clients not in flight, uniformly without replacement, keyed by
        (seed, "sample", dispatch batch); sorted ids. With nobody in flight this is fedrun's fixed sampling of a
        round (``sample_clients``), so a FedBuff run with K = C = the cohort and equal completion times draws
        FedAvg's cohorts."""
        if self.idle is None or len(self.idle) != clients:
            self.idle = np.ones(clients, dtype=bool)
            self.idle[np.array([e.client for e in self.heap], dtype=np.intp)] = False
        idle = np.flatnonzero(self.idle)
        if n >= len(idle):
            return idle
        rng = self.keyed_draw("sample", seed)
        # up to 10,000 numpy draws the set by Floyd's algorithm whatever ``shuffle`` says, and the set is sorted
        # here, so its shuffle (an RNG pass whose order nothing reads) is skipped; above, ``shuffle`` picks the method
        out: np.ndarray = idle[np.sort(rng.choice(len(idle), n, replace=False, shuffle=len(idle) > 10_000))]
        return out

    def keyed_draw(self, purpose: str, seed: int) -> Any:
        """This dispatch batch's ``np_rng(seed, "sample", batch)`` (``purpose`` "sample") or
        ``derive(seed, "torch-global-dispatch", batch)`` ("torch"): the same values as made one at a time, made
        for :data:`PREFETCH` batches at once."""
        got = self.keyed.pop((purpose, seed, self.dispatches), None)
        if got is None:
            batches = range(self.dispatches, self.dispatches + PREFETCH)
            make = (
                (lambda b: np_rng(seed, "sample", b))
                if purpose == "sample"
                else (lambda b: derive(seed, "torch-global-dispatch", b))
            )
            self.keyed = {k: v for k, v in self.keyed.items() if k[0] != purpose}
            self.keyed.update({(purpose, seed, b): make(b) for b in batches})
            got = self.keyed.pop((purpose, seed, self.dispatches))
        return got

    def push(self, work: Tree | None, clients: np.ndarray, seconds: np.ndarray, version: int) -> None:
        """Dispatch ``clients`` (their simulated times ``seconds``, from now) at ``version``: their finished
        ``work`` as a batch of their own, or with ``work`` None into the open cohort (:meth:`cohort`), whose work
        :meth:`fill` stores once it has trained."""
        seq, heap = self.seq, self.heap
        if work is None:
            b = self.cohort()
            first = sum(len(c) for c in self.pending)
            self.pending.append(clients)
            self.pending_times.append(self.clock + seconds)
            self.in_open.update(clients.tolist())
        else:
            b, first = self.dispatches, 0
            self.batches[b] = work
        ids, now = clients.tolist(), self.clock
        for row, (c, s) in enumerate(zip(ids, seconds.tolist(), strict=True), start=first):
            heapq.heappush(heap, Event(now + s, seq + row - first, c, version, b, row))
        self.seq += len(ids)
        self.dispatches += 1
        if self.idle is not None:
            self.idle[clients] = False
        if self.live is not None and ids:
            self.live[b] = self.live.get(b, 0) + len(ids)

    def cohort(self) -> int:
        """The open cohort's batch number (the next dispatch's, opening it, when none is open)."""
        if self.open is None:
            self.open = self.dispatches
        return self.open

    def close(self) -> tuple[int, np.ndarray] | None:
        """The open cohort, now closed: its batch number and its clients in the order their work is to be stored,
        that of their completion (time, then dispatch order; :meth:`row`); None when none is open."""
        if self.open is None:
            return None
        b, clients = self.open, np.concatenate(self.pending)
        order = np.argsort(np.concatenate(self.pending_times), kind="stable")
        if bool((order != np.arange(len(order))).any()):
            self.rowmap[b] = np.argsort(order)
        self.open, self.pending, self.pending_times, self.in_open = None, [], [], set()
        return b, clients[order]

    def fill(self, batch: int, work: Tree, flat: torch.Tensor | None = None) -> None:
        """Store closed cohort ``batch``'s finished work (rows in :meth:`close`'s order); ``flat``: its uploads as
        one (rows x parameters) matrix whose column blocks ``work["params"]`` views (:meth:`uploads_matrix`)."""
        self.batches[batch] = work
        if flat is not None:
            self.flat[batch] = flat

    def row(self, event: Event) -> int:
        """Where the event's client's work is stored in its batch."""
        m = self.rowmap.get(event.batch)
        return event.row if m is None else int(m[event.row])

    def uploads_matrix(self, batch: int) -> torch.Tensor:
        """Batch ``batch``'s uploads as one (rows x parameters) matrix, the tensors' columns side by side in the
        order of their names in ``params`` (made once from the tensors for a queue a checkpoint restored)."""
        got = self.flat.get(batch)
        if got is None:
            up = self.batches[batch]["params"]
            rows = next(iter(up.values())).shape[0]
            got = self.flat[batch] = torch.cat([t.reshape(rows, -1) for t in up.values()], dim=1)
        return got

    def due(self) -> bool:
        """Whether the next event happens now (a tie with the clock): free slots wait until it has arrived."""
        return bool(self.heap) and self.heap[0].time <= self.clock

    def pop(self) -> Event:
        """The next arrival; the clock moves to its completion time."""
        event = heapq.heappop(self.heap)
        self.clock = event.time
        if self.idle is not None:
            self.idle[event.client] = True
        if self.live is not None:
            left = self.live[event.batch] - 1
            if left:
                self.live[event.batch] = left
            else:
                del self.live[event.batch]
                self.done.append(event.batch)
        return event

    def row_views(self, batch: int, key: str) -> Tree:
        """Dispatch batch ``batch``'s ``key`` tree with each tensor split into its rows (a tuple of views, made
        once per batch): the arrivals of an update are then stacked by one copy per tensor."""
        got = self.views.get((batch, key))
        if got is None:
            got = self.views[(batch, key)] = {k: _rows(v) for k, v in self.batches[batch][key].items()}
        return got

    def release(self) -> None:
        """Drop the cohorts none of whose clients is still in flight."""
        if self.live is None:  # (a fresh copy or a restored queue: count from the heap)
            self.live = {}
            for e in self.heap:
                self.live[e.batch] = self.live.get(e.batch, 0) + 1
            self.done = [b for b in self.batches if b not in self.live]
        for b in self.done:
            if b in self.live:  # a client of the open cohort arrived before the cohort's last dispatch joined it
                continue
            self.batches.pop(b, None)
            self.views.pop((b, "params"), None)
            self.views.pop((b, "states"), None)
            self.rowmap.pop(b, None)
            self.flat.pop(b, None)
        self.done = []

    def copy(self) -> EventQueue:
        """A copy to rewind to (the batches' tensors are never written in place, so they are shared); taken between
        updates, when no cohort is open."""
        assert self.open is None, "a queue with an open cohort is copied"
        return EventQueue(
            self.clock, self.last_update, self.dispatches, self.seq, list(self.heap), dict(self.batches),
            rowmap=dict(self.rowmap), flat=dict(self.flat),
        )  # fmt: skip

    def to_tree(self) -> Tree:
        """The queue as a tree of tensors (a checkpoint's ``events``): float64 times, int64 columns, and of each
        batch only the rows still in flight (renumbered), so a checkpoint holds at most C clients' work."""
        assert self.open is None, "a queue with an open cohort is saved"
        heap = sorted(self.heap)
        live: dict[int, list[int]] = {}
        for e in heap:
            live.setdefault(e.batch, []).append(self.row(e))
        keep = {b: sorted(rows) for b, rows in live.items()}
        new_row = {(b, r): i for b, rows in keep.items() for i, r in enumerate(rows)}
        batches = {str(b): take_rows(self.batches[b], torch.tensor(rows)) for b, rows in keep.items()}
        return {
            "times": torch.tensor([e.time for e in heap], dtype=torch.float64),
            "rows": torch.tensor([(*e[1:5], new_row[(e.batch, self.row(e))]) for e in heap], dtype=torch.int64).reshape(
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
                Event(float(t), *(int(x) for x in r))
                for t, r in zip(times.tolist(), rows.reshape(len(times), 5).tolist(), strict=True)
            ]
            if any(e.batch not in batches for e in heap):
                raise ValueError("an in-flight client's batch is missing")
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
            raise ResumeError(f"{where}: damaged async event queue ({e}); delete it to restart the run") from None
        heapq.heapify(heap)
        dispatches, seq = (int(x) for x in counters.tolist())
        return cls(float(clock[0]), float(clock[1]), dispatches, seq, heap, batches)


def _rows(v: Any) -> Any:
    """A tree's tensors split into their rows (tuples of views)."""
    return {k: _rows(x) for k, x in v.items()} if isinstance(v, dict) else v.unbind(0)


def take_rows(work: Tree, ix: torch.Tensor) -> Tree:
    """Rows ``ix`` of a cohort's stacked tensors (its 0-d entries, the cohort's loss, as they are)."""
    return tree_map(lambda t: t.index_select(0, ix.to(t.device)) if t.dim() else t, work)
