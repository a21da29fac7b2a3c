"""The reference engine: one client after another, one step at a time."""

from __future__ import annotations

import torch

from fedrun.algorithms.base import ClientContext
from fedrun.config.registry import ENGINES
from fedrun.core.errors import DivergenceError
from fedrun.core.tree import Tensors, Tree, clone, stack, tree_map, unstack, zeros_like
from fedrun.data.federated import batch_plan
from fedrun.engines.base import CohortResult, Engine


@ENGINES.register("sequential")
class SequentialEngine(Engine):
    """Loops over the cohort; the semantics every other engine must reproduce."""

    runs_every_method = True

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
        algo = self.algorithm
        fl = algo.round_fl(rnd)  # this round's settings (IMA's ed lowers the local epochs)
        uploads, new_states, steps = [], [], []
        samples, loss_sum, loss_n = 0, 0.0, 0
        for j, cid in enumerate(clients.tolist()):
            state = unstack(states, j) if states else {}
            opt = state.get("_momentum") if fl.keep_momentum else None
            if opt is None and fl.momentum:
                opt = zeros_like(params)
            dtype = next(iter(params.values())).dtype
            n_i = torch.tensor(float(self.data.sizes[cid]), dtype=dtype, device=self.data.device)
            ctx = ClientContext(params, extras, state, lr, n_i)
            w = tree_map(lambda t: t.clone(), params)
            plan = batch_plan(self.data.clients[cid], fl, self.seed, rnd, cid)
            if budgets is not None:  # a straggler's partial work: the prefix of its own plan
                plan = plan[: int(budgets[j])]
            buffers = clone(algo.model.buffers)  # this client's copy of the global BatchNorm statistics
            for t, idx in enumerate(plan):
                batch = self.data.train_batch(idx, rnd, cid, t, algo.batch_extras)
                batch = {**batch, "buffers": buffers} if buffers else batch  # type: ignore[dict-item]
                w, opt, new_state, loss = algo.client_step(w, opt, batch, ctx)
                ctx = ctx._replace(state=new_state)
                loss_sum += float(loss)
                loss_n += 1
                samples += int(idx.numel())
            if loss_n and not torch.isfinite(torch.tensor(loss_sum)):
                raise DivergenceError(rnd, cid, "non-finite local loss")
            n_steps = torch.tensor(len(plan))
            upload, state = algo.client_finish(params, w, ctx, n_steps)
            if buffers:
                upload = {**upload, "buffers": buffers}
            if fl.keep_momentum and opt is not None:
                state = {**state, "_momentum": opt}
            uploads.append(upload)
            new_states.append(state)
            steps.append(len(plan))
        return CohortResult(
            uploads=stack(uploads),
            states=stack(new_states) if new_states and new_states[0] else {},
            steps=torch.tensor(steps),
            samples=samples,
            loss=loss_sum / max(loss_n, 1),
        )
