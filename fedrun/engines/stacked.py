"""The stacked engine: the cohorts of several runs (a sweep's jobs) trained as one vectorised computation, the run
dimension folded into the client dimension.

Each job of a stack runs its own run loop (fedrun/run/: sampling, its capabilities, aggregation, evaluation, its run
directory), in turns with the others (fedrun/host/turns.py); its engine, a :class:`StackedEngine`, hands each
``train_cohort`` call to the stack and waits. When every job still running has handed in its cohort,
:func:`train_stack` trains them all at once: one row per client of each job's cohort, the rows sorted by their local
steps across the jobs so that the rows still training are a prefix (as in fedrun/engines/vectorised.py), each row with
its own job's w^t, broadcast extras, client state, lr and batch plan (keyed by its job's seed and round), its batches
gathered from its own job's data; one ``vmap`` of the method's client step per local step, through one job's method
object (the lead), whose ``hp`` fields named in ``stack_scalars`` each row sees as its own job's. Each job gets back
what the vectorised engine returns: its uploads and states in its cohort order, its steps, samples and loss.

Each job gets, bit for bit on a CPU, what it gets alone on the vectorised engine (tests/engines/test_stacked.py): a
per-row lr or scalar is a tensor where a lone job's is a Python number, so the step's arithmetic is written to round
as the number's does (``sgd_step``'s fused ``w + g (-lr)``, SAM's ``rho`` times a reciprocal), and a short batch's
weighted mean over full rows equals the plain mean. What may still differ is float rounding in batched kernels over
a wider batch, where a backend picks its algorithm by shape (a GPU's matmul; docs/sweeps.md).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import vmap

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.config.schema import FLConfig, HardwareConfig, engine_options
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.tree import Tensors, Tree, tree_map, unstack
from fedrun.data.federated import FederatedData, batch_plan
from fedrun.engines.auto import precision_context
from fedrun.engines.base import CohortResult
from fedrun.engines.chunking import auto_chunk, client_bytes, is_oom
from fedrun.engines.vectorised import (
    VectorisedEngine,
    VectorisedParams,
    _cat,
    _rows,
    cohort_order_key,
    pad_plans,
    vmap_blocker,
)

_SLOT = threading.local()  # the stack the run of this thread trains in: (its turns, its record), set by in_stack
_ALONE = threading.local()  # the record of a run of this thread that would have stacked but runs alone, set by alone


@dataclass
class Request:
    """One job's ``train_cohort`` call, handed to its stack."""

    engine: StackedEngine
    rnd: int
    params: Tensors
    extras: Tree
    clients: torch.Tensor
    states: Tree
    lr: float
    budgets: torch.Tensor | None


@dataclass
class Rows:
    """A stack's rows, one per client of each job's cohort: its job, its place in that cohort, its client id and
    batch plan (cut to its budget), sorted by the plan's length (descending, stable)."""

    job: list[int]
    pos: list[int]
    cid: list[int]
    plans: list[list[torch.Tensor]]

    def part(self, lo: int, hi: int) -> Rows:
        return Rows(self.job[lo:hi], self.pos[lo:hi], self.cid[lo:hi], self.plans[lo:hi])


class StackedEngine(VectorisedEngine):
    """A job's engine inside a stack (module docstring): its ``train_cohort`` waits for the stack's other jobs and is
    trained with theirs. It is the vectorised engine to everything that reads a run (``engine``: vectorised in
    summary.json, which a resume keeps), with the stack it ran in as its ``engine_selection`` and ``stack`` record."""

    def __init__(
        self,
        turns: Any,
        record: dict[str, Any],
        algorithm: Algorithm,
        data: FederatedData,
        fl: FLConfig,
        seed: int,
        hw: HardwareConfig,
        options: VectorisedParams,
    ) -> None:
        super().__init__(algorithm, data, fl, seed, chunk=options.chunk)
        self.turns = turns
        self.stack = record
        self.selection = {"how": "stacked", "jobs": record.get("jobs")}
        self.threads = torch.get_num_threads()  # (set for this run by apply_threads; the stack trains with them)
        self.precision = hw.precision

    def train_cohort(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: torch.Tensor,
        states: Tree,
        lr: float,
        budgets: torch.Tensor | None = None,
    ) -> CohortResult:
        # torch's global generator is the process's: the other jobs seed it for their rounds while this one waits,
        # so this run keeps its own state across the wait (what its checkpoint saves, as when it runs alone)
        rng = torch.get_rng_state()
        try:
            result: CohortResult = self.turns.park(Request(self, rnd, params, extras, clients, states, lr, budgets))
        finally:
            torch.set_rng_state(rng)
        return result


@contextlib.contextmanager
def in_stack(turns: Any, record: dict[str, Any]) -> Iterator[None]:
    """For the ``with`` block, in a stacked job's thread: the run built here trains in the stack of ``turns``
    (fedrun/host/turns.py), ``record`` its summary.json's ``stack``."""
    _SLOT.value = (turns, record)
    try:
        yield
    finally:
        _SLOT.value = None


@contextlib.contextmanager
def alone(record: dict[str, Any]) -> Iterator[None]:
    """For the ``with`` block, in the thread of a sweep's job that would have stacked but runs alone (a ``not
    stacked`` line of the console names it): its summary.json's ``stack`` is ``record`` (``{"jobs": 1,
    "not_stacked": why}``)."""
    _ALONE.value = record
    try:
        yield
    finally:
        _ALONE.value = None


def alone_record() -> dict[str, Any] | None:
    """The :func:`alone` record of the run of this thread, if any."""
    return getattr(_ALONE, "value", None)


def stacked_engine(
    hw: HardwareConfig, pinned: str | None, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int
) -> StackedEngine | None:
    """The engine of a run built inside :func:`in_stack`; None outside one, or when this run cannot join it (another
    engine named or kept by a resume, a method the vectorised engine cannot run): it then runs alone, in its turn."""
    slot = getattr(_SLOT, "value", None)
    if slot is None or hw.engine not in ("auto", "vectorised") or pinned not in (None, "vectorised"):
        return None
    if vmap_blocker(algorithm) is not None:
        return None
    turns, record = slot
    return StackedEngine(turns, record, algorithm, data, fl, seed, hw, engine_options(VectorisedParams, hw))


def serve(requests: list[Request]) -> list[CohortResult | BaseException]:
    """The answers of a stack's jobs to their ``train_cohort`` calls (the serving function of fedrun/host/turns.py):
    :func:`train_stack` with the lead job's torch threads and precision, out of memory as one line naming
    ``hardware.stack``."""
    lead = requests[0].engine
    before = torch.get_num_threads()
    torch.set_num_threads(lead.threads)
    error: BaseException | None = None
    try:
        with precision_context(lead.precision, lead.data.device):
            return train_stack(requests)
    except RuntimeError as e:
        if not is_oom(e):
            raise
        rows = sum(len(r.clients) for r in requests)
        error = ConfigError(
            "hardware.stack",
            f"out of memory on {lead.data.device} training {len(requests)} stacked jobs' cohorts ({rows} clients) at"
            f" once; valid: hardware.stack={max(len(requests) // 2, 1)}, or hardware.chunk=N for fewer at a time",
        )
    finally:
        torch.set_num_threads(before)
    if lead.data.device.type == "cuda":
        torch.cuda.empty_cache()
    return [error] * len(requests)


def train_stack(requests: list[Request]) -> list[CohortResult | BaseException]:
    """Every request's cohort trained (module docstring), in chunks of rows; each job's result, or the
    DivergenceError of its first client with a non-finite local loss."""
    rows = stack_rows(requests)
    total = len(rows.job)
    width = _width(requests, total) if total else 1
    parts = [_train_rows(requests, rows.part(lo, lo + width)) for lo in range(0, total, width)]
    uploads = _cat([p[0] for p in parts])
    states = _cat([p[1] for p in parts]) if parts and parts[0][1] else {}
    steps = torch.cat([p[2] for p in parts]) if parts else torch.zeros(0, dtype=torch.long)
    counts = torch.cat([p[3] for p in parts]) if parts else torch.zeros(0, 2, dtype=torch.long)
    loss = torch.cat([p[4] for p in parts]).cpu() if parts else torch.zeros(0, dtype=torch.float64)
    return [_job_result(r, j, rows, uploads, states, steps, counts, loss) for j, r in enumerate(requests)]


def stack_rows(requests: list[Request]) -> Rows:
    """The stack's rows: each job's cohort in its vectorised order (:func:`cohort_order_key`), then all of them
    sorted by their plans' lengths (descending, stable), so the rows still training at any step are a prefix."""
    entries: list[tuple[int, int, int, list[torch.Tensor]]] = []
    for j, r in enumerate(requests):
        e = r.engine
        fl, ids = e.algorithm.round_fl(r.rnd), r.clients.tolist()
        order = torch.sort(cohort_order_key(e, r.rnd, r.clients, r.budgets), descending=True, stable=True).indices
        for p in order.tolist():
            plan = batch_plan(e.data.clients[ids[p]], fl, e.seed, r.rnd, ids[p])
            entries.append((j, p, ids[p], plan if r.budgets is None else plan[: int(r.budgets[p])]))
    entries.sort(key=lambda x: -len(x[3]))
    return Rows([e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries], [e[3] for e in entries])


def _width(requests: list[Request], total: int) -> int:
    """Rows trained at once: ``hardware.chunk`` clients of each job, or as many as fit in free memory."""
    lead = requests[0].engine
    if lead.chunk is not None:
        return min(total, lead.chunk * len(requests))
    if lead._client_bytes is None:
        first = requests[0]
        lead._client_bytes = client_bytes(lead.algorithm, lead.data, lead.fl, first.params, first.states)
    return auto_chunk(lead._client_bytes, lead.data.device, total)


def _per_row(trees: list[Tree], jobs: torch.Tensor) -> Tree:
    """Each row's copy of its job's tree (w^t, the extras): the jobs' trees stacked, then picked by ``jobs``."""
    if not trees[0]:
        return {}
    return tree_map(lambda *ts: torch.stack(ts).index_select(0, jobs.to(ts[0].device)), *trees)


def _state_rows(requests: list[Request], rows: Rows) -> Tree:
    """Each row's client state: the jobs' cohort states (in cohort order) concatenated, then picked."""
    if not requests[0].states:
        return {}
    offsets = [0]
    for r in requests:
        offsets.append(offsets[-1] + len(r.clients))
    idx = torch.tensor([offsets[j] + p for j, p in zip(rows.job, rows.pos, strict=True)], dtype=torch.long)
    return tree_map(lambda *ts: torch.cat(ts).index_select(0, idx.to(ts[0].device)), *[r.states for r in requests])


def _varying(requests: list[Request], jobs: torch.Tensor, dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    """The per-row values of what differs between the jobs of these rows, as tensors: ``lr`` and the method's
    ``stack_scalars`` (a value equal across them stays a Python number, as the job alone has it)."""
    out: dict[str, Any] = {}
    present = sorted(set(jobs.tolist()))
    lead = _method(requests[0].engine.algorithm)
    values = {"lr": [r.lr for r in requests]}
    values.update({k: [getattr(_method(r.engine.algorithm).hp, k) for r in requests] for k in lead.stack_scalars})
    for name, per_job in values.items():
        if len({per_job[j] for j in present}) > 1:
            out[name] = torch.tensor(per_job, dtype=dtype, device=device).index_select(0, jobs.to(device))
    return out


def _method(algorithm: Algorithm) -> Algorithm:
    """The method inside its wrappers (IMA): whose ``hp`` the stacked step reads."""
    while "inner" in vars(algorithm):
        algorithm = vars(algorithm)["inner"]
    return algorithm


@contextlib.contextmanager
def _own_scalars(algorithm: Algorithm, scalars: dict[str, Any]) -> Iterator[None]:
    """Inside the vmapped step (traced once for all rows): the method's ``hp`` fields ``scalars`` as each row's own
    (batched tensors), put back after."""
    if not scalars:
        yield
        return
    method = _method(algorithm)
    saved = method.hp
    hp = copy.copy(saved)
    for name, value in scalars.items():
        object.__setattr__(hp, name, value)
    method.hp = hp
    try:
        yield
    finally:
        method.hp = saved


def _step_fn(algorithm: Algorithm, has_opt: bool, lr: Any) -> Any:
    """The batched step f(w, opt, batch, state, n_i, w^t, extras, lr, scalars) over rows; ``lr``: the rows' lr
    (a number when equal, batched otherwise)."""

    def one_row(
        p: Tensors, opt: Tensors, batch: dict[str, torch.Tensor], state: Tree, size: torch.Tensor, start: Tensors,
        extras: Tree, row_lr: Any, scalars: dict[str, Any],
    ) -> Any:  # fmt: skip
        with _own_scalars(algorithm, scalars):
            ctx = ClientContext(start, extras, state, row_lr, size)
            p, opt_out, new_state, loss = algorithm.client_step(p, opt if has_opt else None, batch, ctx)
        return p, (opt_out if has_opt else {}), new_state, loss

    lr_dim = 0 if isinstance(lr, torch.Tensor) else None
    return vmap(one_row, in_dims=(0, 0, 0, 0, 0, 0, 0, lr_dim, 0), randomness="different")


def _batch(requests: list[Request], idx: torch.Tensor, rows: Rows, t: int, k: int, ids: torch.Tensor) -> Tree:
    """The live rows' minibatches at step ``t``: each job's rows gathered from its own data (its augmentation and its
    method's batch extras keyed by its round), put back in row order."""
    live = rows.job[:k]
    present = sorted(set(live))
    if len(present) == 1:
        r = requests[present[0]]
        return r.engine.data.train_batch(idx[:k], r.rnd, ids[:k], t, r.engine.algorithm.batch_extras)
    parts, order = [], []
    for j in present:
        sel = torch.tensor([i for i, job in enumerate(live) if job == j], dtype=torch.long, device=idx.device)
        r = requests[j]
        data, extras_of = r.engine.data, r.engine.algorithm.batch_extras
        parts.append(data.train_batch(idx.index_select(0, sel), r.rnd, ids.index_select(0, sel), t, extras_of))
        order.append(sel)
    if live == sorted(live):  # each job's rows together, in job order (equal plans): already in row order
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    out = {key: first.new_empty((k, *first.shape[1:])) for key, first in parts[0].items()}
    for sel, part in zip(order, parts, strict=True):  # each job's rows written in place: one copy of the batch
        for key, rows_of_job in part.items():
            out[key].index_copy_(0, sel.to(rows_of_job.device), rows_of_job)
    return out


def _train_rows(requests: list[Request], rows: Rows) -> tuple[Tree, Tree, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk of rows trained through every local step (the vectorised engine's chunk, fedrun/engines/vectorised.py,
    its rows of several jobs): uploads, new states, steps, (samples, sample slots) and float64 loss sums, by row."""
    lead = requests[0].engine
    algo, fl, device = lead.algorithm, lead.fl, lead.data.device
    dtype = next(iter(requests[0].params.values())).dtype
    c = len(rows.job)
    plan = pad_plans(rows.plans, device, dtype)
    jobs = torch.tensor(rows.job, dtype=torch.long)
    ids = torch.tensor(rows.cid, dtype=torch.long, device=device)
    start, extras = _per_row([r.params for r in requests], jobs), _per_row([r.extras for r in requests], jobs)
    state = _state_rows(requests, rows)
    sizes = torch.tensor(
        [float(requests[j].engine.data.sizes[cid]) for j, cid in zip(rows.job, rows.cid, strict=True)],
        dtype=dtype, device=device,
    )  # fmt: skip
    varying = _varying(requests, jobs, dtype, device)
    lr = varying.pop("lr", requests[rows.job[0]].lr)  # (equal across these rows: the number the jobs alone use)
    opt: Tensors | None = None
    if fl.keep_momentum and state and "_momentum" in state:
        opt = state["_momentum"]
    elif fl.momentum:
        opt = tree_map(torch.zeros_like, start)
    has_opt, opt = opt is not None, opt if opt is not None else {}
    step = _step_fn(algo, has_opt, lr)
    w, size, live = start, sizes, c
    loss_sum = torch.zeros(c, dtype=torch.float64, device=device)
    finished: list[tuple[Tree, Tree, Tree]] = []  # rows set aside when their plans end
    for t, k in enumerate(plan.live):
        if k < live:
            finished.append((_rows(w, k, live), _rows(opt, k, live), _rows(state, k, live)))
            w, opt, state = _rows(w, 0, k), _rows(opt, 0, k), _rows(state, 0, k)
            size, live = size[:k], k
        batch = _batch(requests, plan.idx[t], rows, t, k, ids)
        if plan.padded[t]:
            batch["w"] = plan.w[t, :k]
        row_lr = lr[:k] if isinstance(lr, torch.Tensor) else lr
        scalars = {name: v[:k] for name, v in varying.items()}
        w, opt, state, loss = step(w, opt, batch, state, size, _rows(start, 0, k), _rows(extras, 0, k), row_lr, scalars)
        loss_sum[:k] += loss.detach().to(torch.float64)
    if finished:
        finished.append((w, opt, state))
        w, opt, state = (_cat([part[i] for part in reversed(finished)]) for i in range(3))
    uploads, new_states = _finish_rows(requests, rows, (start, extras, w, state, sizes), plan.steps.to(device), lr,
                                       varying)  # fmt: skip
    if fl.keep_momentum and has_opt:
        new_states = {**new_states, "_momentum": opt}
    samples = torch.tensor([[sum(int(b.numel()) for b in p), len(p) * int(plan.idx.shape[-1])] for p in rows.plans])
    return uploads, new_states, plan.steps, samples.reshape(c, 2), loss_sum


def _finish_rows(
    requests: list[Request], rows: Rows, trees: tuple[Tree, Tree, Tree, Tree, torch.Tensor], steps: torch.Tensor,
    lr: Any, scalars: dict[str, Any],
) -> tuple[Tree, Tree]:  # fmt: skip
    """``client_finish`` for the rows (``trees``: each row's w^t, extras, end, state and n_i): vmapped through the lead
    method, or, where the hook is not vmappable, each row through its own job's method."""
    start, extras, end, state, sizes = trees
    lead = requests[0].engine
    algo = lead.algorithm
    if lead._finish_vmappable:

        def one(s: Tensors, e: Tensors, st: Tree, n_i: Any, n: Any, ex: Tree, row_lr: Any, sc: dict[str, Any]) -> Any:
            with _own_scalars(algo, sc):
                return algo.client_finish(s, e, ClientContext(s, ex, st, row_lr, n_i), n)

        lr_dim = 0 if isinstance(lr, torch.Tensor) else None
        try:
            run = vmap(one, in_dims=(0, 0, 0, 0, 0, 0, lr_dim, 0), randomness="different")
            out: tuple[Tree, Tree] = run(start, end, state, sizes, steps, extras, lr, scalars)
            return out
        except RuntimeError:  # data-dependent Python control flow (e.g. on ``steps``): row by row instead
            lead._finish_vmappable = False
    outs = []
    for i, j in enumerate(rows.job):
        r = requests[j]
        ctx = ClientContext(r.params, r.extras, unstack(state, i), r.lr, sizes[i])
        outs.append(r.engine.algorithm.client_finish(r.params, unstack(end, i), ctx, steps[i]))
    one_row = lambda tree: tree_map(lambda t: t.unsqueeze(0), tree)  # noqa: E731
    return _cat([one_row(u) for u, _ in outs]), _cat([one_row(s) for _, s in outs])


def _job_result(
    r: Request, j: int, rows: Rows, uploads: Tree, states: Tree, steps: torch.Tensor, counts: torch.Tensor,
    loss: torch.Tensor,
) -> CohortResult | BaseException:  # fmt: skip
    """Job ``j``'s rows back in its cohort's order, as the vectorised engine returns them (its engine's padding
    statistics counted); the DivergenceError of its first client with a non-finite local loss."""
    where = [0] * len(r.clients)
    for i, (job, p) in enumerate(zip(rows.job, rows.pos, strict=True)):
        if job == j:
            where[p] = i
    idx = torch.tensor(where, dtype=torch.long)
    job_loss = loss.index_select(0, idx)
    bad = ~torch.isfinite(job_loss)
    if bool(bad.any()):
        return DivergenceError(r.rnd, int(r.clients[int(bad.nonzero()[0, 0])]), "non-finite local loss")
    pick = lambda t: t.index_select(0, idx.to(t.device))  # noqa: E731
    job_steps, job_counts = pick(steps), pick(counts)
    stats = r.engine.stats
    stats["samples"] += int(job_counts[:, 0].sum())
    stats["sample_slots"] += int(job_counts[:, 1].sum())
    stats["chunks"] += 1
    stats["chunk_width"] = max(stats["chunk_width"], len(rows.job))
    n_steps = int(job_steps.sum())
    return CohortResult(
        uploads=tree_map(pick, uploads),
        states=tree_map(pick, states) if states else {},
        steps=job_steps,
        samples=int(job_counts[:, 0].sum()),
        loss=float(job_loss.sum()) / max(n_steps, 1),
        client_loss=job_loss,
    )
