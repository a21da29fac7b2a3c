"""The vectorised engine: a round's cohort trained as one batched computation under ``torch.func.vmap``.

The cohort's parameters, optimizer buffers and client states are stacked along a leading client
dimension and the algorithm's own :meth:`Algorithm.client_step` is ``vmap``-ed over it, so every method
built on the contract runs unchanged. Each client uses exactly the minibatches of :func:`batch_plan` (the
sequential engine's plan): at local step ``t`` the chunk's batches are gathered as one ``[clients, batch]``
index tensor and short batches (an epoch's last) are padded with per-sample weight ``w = 0``.

Unequal clients (Dirichlet splits) are ordered by step count: the cohort is sorted by size, largest
first, before being cut into chunks of ``chunk`` clients, so inside a chunk the clients still training at
step ``t`` are always a prefix. With step budgets (stragglers' partial work, fedrun/system/) the sort key is the
steps each client really runs (:func:`cohort_order_key`), so partial clients stay in the same vmap. When a
client's plan ends its final values are set aside and the stacked tensors shrink to the remaining prefix: a
finished client stops updating and costs nothing afterwards.
The only waste left is padding inside short batches, counted in :attr:`VectorisedEngine.stats`. Chunks
bound the memory of large cohorts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import vmap

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.config.registry import ENGINES, positive
from fedrun.config.schema import FLConfig, HardwareConfig
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.tree import Tensors, Tree, tree_map, unstack
from fedrun.data.federated import FederatedData, batch_plan, num_local_steps
from fedrun.engines.base import CohortResult, Engine
from fedrun.engines.chunking import auto_chunk, client_bytes, is_oom, oom_error


def vmap_blocker(algorithm: Algorithm) -> str | None:
    """Why this algorithm/model cannot run under ``vmap`` (None when it can)."""
    model = algorithm.model
    if model.buffers:
        return f"the model has buffers ({', '.join(list(model.buffers)[:3])}: e.g. BatchNorm statistics)"
    if not model.vmap_safe:
        return "the model is marked vmap_safe=False"
    if not getattr(algorithm, "vmap_safe", True):
        return f"algorithm {type(algorithm).__name__} is marked vmap_safe=False"
    return None


@dataclass
class Plan:
    """One chunk's local-training schedule, padded to a rectangle (clients sorted by step count, descending).

    ``idx`` [S, c, B] global sample indices, ``w`` [S, c, B] 1 for real samples and 0 for padding,
    ``steps`` [c] each client's number of steps, ``live[t]`` how many clients (a prefix) train at step t,
    ``padded[t]`` whether one of them has a short batch then (only then does ``w`` go into the batch).
    """

    idx: torch.Tensor
    w: torch.Tensor
    steps: torch.Tensor
    live: list[int]
    padded: list[bool]
    samples: int


def pad_plans(plans: list[list[torch.Tensor]], device: torch.device, dtype: torch.dtype) -> Plan:
    """Stack per-client batch lists (ragged in steps and in the size of each epoch's last batch)."""
    c = len(plans)
    steps = [len(p) for p in plans]
    if steps != sorted(steps, reverse=True):
        raise ValueError(f"clients must come sorted by step count, descending; got {steps}")
    n_steps = max(steps, default=0)
    width = max((int(b.numel()) for p in plans for b in p), default=1)
    idx = torch.zeros(n_steps, c, width, dtype=torch.long, device=device)
    lengths = torch.zeros(n_steps, c, dtype=torch.long)
    for j, plan in enumerate(plans):
        if plan:
            rows = torch.nn.utils.rnn.pad_sequence(plan, batch_first=True, padding_value=0)
            idx[: len(plan), j, : rows.shape[1]] = rows
            lengths[: len(plan), j] = torch.tensor([b.numel() for b in plan])
    steps_t = torch.tensor(steps, dtype=torch.long)
    active = torch.arange(n_steps).unsqueeze(1) < steps_t.unsqueeze(0)
    w = (torch.arange(width).view(1, 1, -1) < lengths.unsqueeze(-1)).to(dtype)
    return Plan(
        idx=idx,
        w=w.to(device),
        steps=steps_t,
        live=active.sum(1).tolist(),
        padded=((lengths < width) & active).any(1).tolist(),
        samples=int(lengths.sum()),
    )


def _rows(tree: Tree, lo: int, hi: int) -> Tree:
    return tree_map(lambda t: t[lo:hi], tree)


def _expand(tree: Tree, c: int) -> Tree:
    """``c`` independent copies of an unstacked tree, stacked on a new leading dimension."""
    return tree_map(lambda t: t.unsqueeze(0).repeat((c,) + (1,) * t.dim()), tree)


def _cat(parts: list[Tree]) -> Tree:
    if not parts or not parts[0]:
        return {}
    return tree_map(lambda *xs: torch.cat(xs), parts[0], *parts[1:])


def cohort_order_key(engine: Engine, rnd: int, clients: torch.Tensor, budgets: torch.Tensor | None) -> torch.Tensor:
    """What the cohort is sorted by (descending, stable) before it is cut into chunks: each client's size, which
    orders the full plans' step counts; with ``budgets`` (partial work) the steps each client will really run,
    min(budget, its plan's length), so the clients still training at any step stay a prefix of their chunk."""
    sizes = engine.data.sizes[clients]
    if budgets is None:
        return sizes
    fl = engine.algorithm.round_fl(rnd)
    full = torch.tensor([num_local_steps(int(n), fl) for n in sizes.tolist()], dtype=torch.long)
    return torch.minimum(full, budgets.to(torch.long).cpu())


@dataclass
class VectorisedParams:
    """The vectorised engine's options (``hardware.*``)."""

    chunk: int | None = None  # clients trained at once (None: sized from free memory)
    compile: bool = False  # torch.compile the batched client step

    def __post_init__(self) -> None:
        positive("chunk", self.chunk)


@ENGINES.register("vectorised", VectorisedParams)
class VectorisedEngine(Engine):
    """Trains the cohort in chunks; inside a chunk every local step is one ``vmap``-ed client step.

    ``chunk``: clients per chunk (None: sized from free memory by :func:`auto_chunk`);
    ``compile``: wrap the batched step in ``torch.compile``.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        data: FederatedData,
        fl: FLConfig,
        seed: int,
        chunk: int | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(algorithm, data, fl, seed)
        reason = vmap_blocker(algorithm)
        if reason:
            raise ConfigError("hardware.engine", f"vectorised cannot run this run: {reason}; use sequential or auto")
        self.chunk = chunk
        self.compile = compile
        self._finish_vmappable = True
        self._client_bytes: int | None = None
        self._steps: dict[bool, Callable[..., Any]] = {}
        self.stats = {"samples": 0, "sample_slots": 0, "chunks": 0, "chunk_width": 0}

    @classmethod
    def build(
        cls, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, hw: HardwareConfig, options: Any
    ) -> VectorisedEngine:
        return cls(algorithm, data, fl, seed, chunk=options.chunk, compile=options.compile)

    @classmethod
    def method_blocker(cls, algorithm: Algorithm) -> str | None:
        reason = vmap_blocker(algorithm)
        return f"not vmappable: {reason}" if reason else None

    @classmethod
    def probe_failure(cls, error: BaseException) -> str:
        return f"not vmappable: {super().probe_failure(error)}"  # whatever vmap refuses (.item(), an if on data)

    @property
    def waste(self) -> float:
        """Fraction of computed sample slots that were padding (in short batches)."""
        slots = self.stats["sample_slots"]
        return 1.0 - self.stats["samples"] / slots if slots else 0.0

    def chunk_width(self, params: Tensors, states: Tree, cohort: int) -> int:
        if self.chunk is not None:
            return min(self.chunk, cohort)
        if self._client_bytes is None:
            self._client_bytes = client_bytes(self.algorithm, self.data, self.fl, params, states)
        return auto_chunk(self._client_bytes, self.data.device, cohort)

    # ---- the batched step --------------------------------------------------------------------------------
    def _step_fn(self, has_opt: bool) -> Callable[..., Any]:
        """The batched step f(w, opt, batch, state, n_i, w^t, extras, lr), built (and compiled) once per engine.

        w^t, extras and lr are arguments rather than closure values so that a compiled step is reused
        across rounds instead of recompiled for each round's new tensors.
        """
        if has_opt in self._steps:
            return self._steps[has_opt]
        algo = self.algorithm

        def one_client(
            p: Tensors,
            opt: Tensors,
            batch: dict[str, torch.Tensor],
            state: Tree,
            size: torch.Tensor,
            start: Tensors,
            extras: Tree,
            lr: Any,
        ) -> Any:
            ctx = ClientContext(start, extras, state, lr, size)
            p, opt_out, new_state, loss = algo.client_step(p, opt if has_opt else None, batch, ctx)
            return p, (opt_out if has_opt else {}), new_state, loss

        fn = vmap(one_client, in_dims=(0, 0, 0, 0, 0, None, None, None), randomness="different")
        if self.compile:
            fn = torch.compile(fn)
        self._steps[has_opt] = fn
        return fn

    def _finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """``client_finish`` for the chunk: vmapped, or one client at a time if the hook is not vmappable."""
        algo = self.algorithm
        if self._finish_vmappable:

            def one(e: Tensors, state: Tree, size: torch.Tensor, n: torch.Tensor) -> tuple[Tree, Tree]:
                return algo.client_finish(start, e, ctx._replace(state=state, size=size), n)

            try:
                return vmap(one, randomness="different")(end, ctx.state, ctx.size, steps)  # type: ignore[arg-type]
            except RuntimeError:
                # data-dependent Python control flow (e.g. on ``steps``) cannot be vmapped: loop instead
                self._finish_vmappable = False
        outs = [
            algo.client_finish(
                start,
                unstack(end, j),
                ctx._replace(state=unstack(ctx.state, j), size=ctx.size[j]),  # type: ignore[index]
                steps[j],
            )
            for j in range(int(steps.shape[0]))
        ]
        return _cat([tree_map(lambda t: t.unsqueeze(0), u) for u, _ in outs]), _cat(
            [tree_map(lambda t: t.unsqueeze(0), s) for _, s in outs]
        )

    # ---- one chunk ----------------------------------------------------------------------------------------
    def _train_chunk(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: list[int],
        states: Tree,
        lr: float,
        budgets: list[int] | None = None,
    ) -> tuple[Tree, Tree, torch.Tensor, int, torch.Tensor]:
        fl, data = self.algorithm.round_fl(rnd), self.data  # this round's settings (IMA's ed: fewer epochs)
        c = len(clients)
        dtype = next(iter(params.values())).dtype
        plans = [batch_plan(data.clients[cid], fl, self.seed, rnd, cid) for cid in clients]
        if budgets is not None:  # partial work: each client's plan cut to its budget (sorted by it: train_cohort)
            plans = [p[:b] for p, b in zip(plans, budgets, strict=True)]
        plan = pad_plans(plans, data.device, dtype)
        rows = torch.tensor(clients, dtype=torch.long, device=data.device)  # client id of each row of the plan
        w = _expand(params, c)
        sizes = self.data.sizes[torch.tensor(clients, dtype=torch.long)].to(device=data.device, dtype=dtype)
        size = sizes  # the rows still training, like w, opt and state
        opt: Tensors | None = None
        if fl.keep_momentum and states and "_momentum" in states:
            opt = states["_momentum"]
        elif fl.momentum:
            opt = _expand(tree_map(torch.zeros_like, params), c)
        has_opt = opt is not None
        opt = opt if opt is not None else {}
        state = states
        step = self._step_fn(has_opt)
        extras_of = self.algorithm.batch_extras  # (the method's per-step inputs: DP-SGD's noise)
        # compiled: lr as a tensor, or every new lr value (a decay schedule) would trigger a recompile
        step_lr = torch.tensor(lr, dtype=dtype, device=data.device) if self.compile else lr
        loss_sum = torch.zeros(c, dtype=torch.float64, device=data.device)
        finished: list[tuple[Tree, Tree, Tree]] = []  # rows set aside when their clients' plans end
        live = c
        for t, k in enumerate(plan.live):
            if k < live:
                finished.append((_rows(w, k, live), _rows(opt, k, live), _rows(state, k, live)))
                w, opt, state = _rows(w, 0, k), _rows(opt, 0, k), _rows(state, 0, k)
                size, live = size[:k], k
            batch = data.train_batch(plan.idx[t, :k], rnd, rows[:k], t, extras_of)
            if plan.padded[t]:
                batch["w"] = plan.w[t, :k]
            w, opt, state, loss = step(w, opt, batch, state, size, params, extras, step_lr)
            loss_sum[:k] += loss.detach().to(torch.float64)
        if finished:
            finished.append((w, opt, state))
            w, opt, state = (_cat([part[i] for part in reversed(finished)]) for i in range(3))
        opt = opt if has_opt else None
        steps = plan.steps.to(data.device)
        ctx = ClientContext(params, extras, state, lr, sizes)
        uploads, new_states = self._finish(params, w, ctx, steps)
        if fl.keep_momentum and opt is not None:
            new_states = {**new_states, "_momentum": opt}
        self.stats["samples"] += plan.samples
        self.stats["sample_slots"] += sum(plan.live) * int(plan.idx.shape[-1])
        self.stats["chunks"] += 1
        self.stats["chunk_width"] = max(self.stats["chunk_width"], c)
        return uploads, new_states, plan.steps, plan.samples, loss_sum

    def _run_chunk(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: list[int],
        states: Tree,
        lr: float,
        budgets: list[int] | None = None,
    ) -> tuple[Tree, Tree, torch.Tensor, int, torch.Tensor]:
        """:meth:`_train_chunk`, with out-of-memory turned into a ConfigError naming ``hardware.chunk``."""
        error = None
        try:
            return self._train_chunk(rnd, params, extras, clients, states, lr, budgets)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            if not is_oom(e):
                raise
            error = oom_error(self.data.device, len(clients), self._client_bytes)
        # raised here, outside the except block: the allocator's traceback (and the chunk's tensors its frames
        # hold) is dropped, so the memory is free again for whatever runs next in this process (a sweep's job)
        if self.data.device.type == "cuda":
            torch.cuda.empty_cache()
        raise error

    # ---- the cohort -----------------------------------------------------------------------------------------
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
        ids = clients.tolist()
        m = len(ids)
        # most steps first: in every chunk the clients still training are a prefix (see the module docstring)
        order = torch.sort(cohort_order_key(self, rnd, clients, budgets), descending=True, stable=True).indices
        width = self.chunk_width(params, states, m)
        uploads, new_states, steps, loss_parts = [], [], [], []
        samples = 0
        for lo in range(0, m, width):
            pos = order[lo : lo + width]
            chunk_states = tree_map(lambda t, p=pos: t.index_select(0, p.to(t.device)), states) if states else {}
            cut = None if budgets is None else [int(budgets[i]) for i in pos]
            up, st, n, s, loss = self._run_chunk(rnd, params, extras, [ids[i] for i in pos], chunk_states, lr, cut)
            uploads.append(up)
            new_states.append(st)
            steps.append(n)
            loss_parts.append(loss)
            samples += s
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(m)
        unsort = lambda t: t.index_select(0, inverse.to(t.device))  # noqa: E731
        steps_all = unsort(torch.cat(steps))
        loss_all = unsort(torch.cat(loss_parts)).cpu()
        bad = ~torch.isfinite(loss_all)
        if bool(bad.any()):
            raise DivergenceError(rnd, ids[int(bad.nonzero()[0, 0])], "non-finite local loss")
        uploads_all = tree_map(unsort, _cat(uploads))
        states_all = tree_map(unsort, _cat(new_states)) if new_states and new_states[0] else {}
        n_steps = int(steps_all.sum())
        return CohortResult(
            uploads=uploads_all,
            states=states_all,
            steps=steps_all,
            samples=samples,
            loss=float(loss_all.sum()) / max(n_steps, 1),
            client_loss=loss_all,
        )
