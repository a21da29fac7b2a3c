"""The vectorised engine: a round's cohort trained as one batched computation under ``torch.func.vmap``.

The cohort's parameters, optimizer buffers and client states are stacked along a leading client
dimension and the algorithm's own :meth:`Algorithm.client_step` is ``vmap``-ed over it, so every method
built on the contract runs unchanged. Each client uses exactly the minibatches of :func:`batch_plan` (the
sequential engine's plan): at local step ``t`` the chunk's batches are gathered as one ``[clients, batch]``
index tensor, short batches are padded with per-sample weight ``w = 0``, and a client whose plan has
ended keeps its values through ``torch.where`` (its padded step is computed and discarded; the share of
such wasted client-steps is counted in :attr:`VectorisedEngine.stats`). Clients are sorted by step count
before being cut into chunks of ``chunk`` clients, so clients of similar size share a chunk and little is
wasted on Dirichlet splits; chunks bound the memory of large cohorts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import vmap

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.config import FLConfig
from fedrun.data.federated import FederatedData, batch_plan
from fedrun.engines.base import CohortResult, Engine
from fedrun.engines.chunking import auto_chunk, client_bytes
from fedrun.errors import ConfigError, DivergenceError
from fedrun.registry import ENGINES
from fedrun.tree import Tensors, Tree, tree_map, unstack


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
    """One chunk's local-training schedule, padded to a rectangle.

    ``idx`` [S, c, B] global sample indices, ``w`` [S, c, B] 1 for real samples and 0 for padding,
    ``active`` [S, c] whether client j still trains at step t, ``steps`` [c] its number of steps,
    ``padded`` [S] whether step t has a short batch in an active client (then ``w`` goes in the batch).
    """

    idx: torch.Tensor
    w: torch.Tensor
    active: torch.Tensor
    steps: torch.Tensor
    padded: list[bool]
    all_active: list[bool]
    samples: int


def pad_plans(plans: list[list[torch.Tensor]], device: torch.device, dtype: torch.dtype) -> Plan:
    """Stack per-client batch lists (ragged in steps and in the size of each epoch's last batch)."""
    c = len(plans)
    steps = [len(p) for p in plans]
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
    padded = ((lengths < width) & active).any(1).tolist()
    return Plan(
        idx=idx,
        w=w.to(device),
        active=active.to(device),
        steps=steps_t,
        padded=padded,
        all_active=active.all(1).tolist(),
        samples=int(lengths.sum()),
    )


def _select(mask: torch.Tensor, new: Tree, old: Tree) -> Tree:
    """Per client: ``new`` where ``mask`` (shape [c]) else ``old`` (a finished client stops updating)."""

    def pick(n: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.view((-1,) + (1,) * (n.dim() - 1)), n, o)

    return tree_map(pick, new, old)


def _expand(tree: Tree, c: int) -> Tree:
    """``c`` independent copies of an unstacked tree, stacked on a new leading dimension."""
    return tree_map(lambda t: t.unsqueeze(0).repeat((c,) + (1,) * t.dim()), tree)


def _cat(parts: list[Tree]) -> Tree:
    if not parts or not parts[0]:
        return {}
    return tree_map(lambda *xs: torch.cat(xs), parts[0], *parts[1:])


@ENGINES.register("vectorised")
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
        self._compiled: dict[Any, Callable[..., Any]] = {}
        self.stats = {"client_steps": 0, "slot_steps": 0, "chunks": 0, "chunk_width": 0}

    @property
    def waste(self) -> float:
        """Fraction of computed client-steps that were padding (a finished client's discarded step)."""
        slots = self.stats["slot_steps"]
        return 1.0 - self.stats["client_steps"] / slots if slots else 0.0

    def chunk_width(self, params: Tensors, states: Tree, cohort: int) -> int:
        if self.chunk is not None:
            return min(self.chunk, cohort)
        if self._client_bytes is None:
            self._client_bytes = client_bytes(self.algorithm, self.data, self.fl, params, states)
        return auto_chunk(self._client_bytes, self.data.device, cohort)

    # ---- the batched step --------------------------------------------------------------------------------
    def _step_fn(self, global_params: Tensors, extras: Tree, lr: float, has_opt: bool) -> Callable[..., Any]:
        algo = self.algorithm

        def one_client(p: Tensors, opt: Tensors, batch: dict[str, torch.Tensor], state: Tree) -> Any:
            ctx = ClientContext(global_params, extras, state, lr)
            p, opt_out, new_state, loss = algo.client_step(p, opt if has_opt else None, batch, ctx)
            return p, (opt_out if has_opt else {}), new_state, loss

        fn = vmap(one_client, randomness="different")
        if self.compile:
            fn = torch.compile(fn, dynamic=False)
        return fn

    def _finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """``client_finish`` for the chunk: vmapped, or one client at a time if the hook is not vmappable."""
        algo = self.algorithm
        if self._finish_vmappable:

            def one(e: Tensors, state: Tree, n: torch.Tensor) -> tuple[Tree, Tree]:
                return algo.client_finish(start, e, ctx._replace(state=state), n)

            try:
                return vmap(one, randomness="different")(end, ctx.state, steps)
            except RuntimeError:
                # data-dependent Python control flow (e.g. on ``steps``) cannot be vmapped: loop instead
                self._finish_vmappable = False
        outs = [
            algo.client_finish(start, unstack(end, j), ctx._replace(state=unstack(ctx.state, j)), steps[j])
            for j in range(int(steps.shape[0]))
        ]
        return _cat([tree_map(lambda t: t.unsqueeze(0), u) for u, _ in outs]), _cat(
            [tree_map(lambda t: t.unsqueeze(0), s) for _, s in outs]
        )

    # ---- one chunk ----------------------------------------------------------------------------------------
    def _train_chunk(
        self, rnd: int, params: Tensors, extras: Tree, clients: list[int], states: Tree, lr: float
    ) -> tuple[Tree, Tree, torch.Tensor, int, torch.Tensor]:
        fl, data = self.fl, self.data
        c = len(clients)
        dtype = next(iter(params.values())).dtype
        plan = pad_plans(
            [batch_plan(data.clients[cid], fl, self.seed, rnd, cid) for cid in clients], data.device, dtype
        )
        w = _expand(params, c)
        opt: Tensors | None = None
        if fl.keep_momentum and states and "_momentum" in states:
            opt = states["_momentum"]
        elif fl.momentum:
            opt = _expand(tree_map(torch.zeros_like, params), c)
        has_opt = opt is not None
        state = states
        step = self._step_fn(params, extras, lr, has_opt)
        loss_sum = torch.zeros(c, dtype=torch.float64, device=data.device)
        for t in range(plan.idx.shape[0]):
            batch = data.batch(plan.idx[t])
            if plan.padded[t]:
                batch["w"] = plan.w[t]
            new_w, new_opt, new_state, loss = step(w, opt if has_opt else {}, batch, state)
            if plan.all_active[t]:
                w, state = new_w, new_state
                opt = new_opt if has_opt else None
                loss_sum += loss.detach().to(torch.float64)
            else:
                act = plan.active[t]
                w, state = _select(act, new_w, w), _select(act, new_state, state)
                opt = _select(act, new_opt, opt) if has_opt else None
                loss_sum += torch.where(act, loss.detach().to(torch.float64), 0.0)
        steps = plan.steps.to(data.device)
        ctx = ClientContext(params, extras, state, lr)
        uploads, new_states = self._finish(params, w, ctx, steps)
        if fl.keep_momentum and opt is not None:
            new_states = {**new_states, "_momentum": opt}
        self.stats["client_steps"] += int(plan.steps.sum())
        self.stats["slot_steps"] += int(plan.idx.shape[0]) * c
        self.stats["chunks"] += 1
        self.stats["chunk_width"] = max(self.stats["chunk_width"], c)
        return uploads, new_states, plan.steps, plan.samples, loss_sum

    # ---- the cohort -----------------------------------------------------------------------------------------
    def train_cohort(
        self, rnd: int, params: Tensors, extras: Tree, clients: torch.Tensor, states: Tree, lr: float
    ) -> CohortResult:
        ids = clients.tolist()
        m = len(ids)
        sizes = self.data.sizes[clients]
        # similar step counts in one chunk: little padding; a stable sort keeps the cohort order otherwise
        order = torch.sort(sizes, descending=True, stable=True).indices
        width = self.chunk_width(params, states, m)
        uploads, new_states, steps, loss_parts = [], [], [], []
        samples = 0
        for lo in range(0, m, width):
            pos = order[lo : lo + width]
            chunk_states = tree_map(lambda t, p=pos: t.index_select(0, p.to(t.device)), states) if states else {}
            up, st, n, s, loss = self._train_chunk(rnd, params, extras, [ids[i] for i in pos], chunk_states, lr)
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
        )
