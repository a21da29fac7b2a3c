"""Fine-tuning a client's model on its own training data before it is evaluated (``eval.finetune_*``).

Two schedules, both SGD on the cross-entropy at ``eval.finetune_lr`` (or the round's local lr), in eval mode:

- ``eval.finetune_steps=k``: k minibatches of ``fl.batch_size`` drawn uniformly *with* replacement, keyed by
  (seed, "finetune", round, client): FedAvg-FT as fedrun has always run it;
- ``eval.finetune_epochs=E``: E passes over the client's training samples, each a fresh permutation keyed by
  (seed, "finetune-epochs", round, client), cut into batches of ``fl.batch_size``, the last one short (a
  shuffled ``DataLoader`` without ``drop_last``): FedBABU's personalisation (``analysis.ipynb``:
  ``personalization_epoch = 5``). Clients of different sizes take different numbers of steps: a client whose
  epochs are done is left exactly as it is while the others go on.

``eval.finetune_momentum=mu`` adds heavy-ball momentum with torch.optim.SGD's semantics (b = mu b + g, the
first step b = g; w <- w - lr b); FedBABU fine-tunes with its training momentum, 0.9. mu = 0 is plain SGD,
the same arithmetic as before the option existed. The draws depend only on the keys above, so a resumed run
fine-tunes exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fedrun.core.rng import np_rng
from fedrun.core.tree import Tensors

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FineTune:
    """One fine-tuning schedule: ``steps`` (with replacement) or ``epochs`` (without), its lr (None: the
    round's), the minibatch size and the momentum."""

    steps: int = 0
    lr: float | None = None
    batch: int = 50
    epochs: int = 0
    momentum: float = 0.0

    @property
    def on(self) -> bool:
        return self.steps > 0 or self.epochs > 0

    @classmethod
    def of(cls, spec: tuple[Any, ...]) -> FineTune:
        """From the runner's tuple (steps, lr, batch[, epochs, momentum])."""
        return cls(*spec)


@dataclass
class TunePlan:
    """Each client's fine-tuning minibatches: ``idx`` [T, c, B] training-sample indices; ``w`` [T, c, B] 1 for a
    real sample, 0 for padding (None: every batch full); ``live`` [T, c] whether the client takes step t (None:
    every client takes every step)."""

    idx: torch.Tensor
    w: torch.Tensor | None = None
    live: torch.Tensor | None = None

    def client(self, j: int) -> TunePlan:
        """Client ``j``'s plan alone ([T, B], [T, B], [T])."""
        pick = lambda t: None if t is None else t[:, j]  # noqa: E731
        return TunePlan(self.idx[:, j], pick(self.w), pick(self.live))


def tune_plan(ft: FineTune, parts: list[torch.Tensor], seed: int, rnd: int, ids: list[int]) -> TunePlan:
    """The plan of clients ``ids`` (their training samples ``parts``) in round ``rnd``."""
    if not ft.epochs:
        rows = []
        for part, cid in zip(parts, ids, strict=True):
            draw = np_rng(seed, "finetune", rnd, cid).integers(0, int(part.numel()), size=(ft.steps, ft.batch))
            rows.append(part[torch.as_tensor(draw, device=part.device)])
        return TunePlan(torch.stack(rows, 1))
    sizes = [int(p.numel()) for p in parts]
    steps = [ft.epochs * math.ceil(n / ft.batch) for n in sizes]
    dev = parts[0].device
    idx = torch.zeros(max(steps), len(parts), ft.batch, dtype=torch.long, device=dev)
    w = torch.zeros(idx.shape, device=dev)
    live = torch.zeros(idx.shape[:2], dtype=torch.bool, device=dev)
    for j, (part, cid, n) in enumerate(zip(parts, ids, sizes, strict=True)):
        rng, per = np_rng(seed, "finetune-epochs", rnd, cid), math.ceil(n / ft.batch)
        for e in range(ft.epochs):
            order = part[torch.as_tensor(rng.permutation(n), device=dev)]
            for s in range(per):
                take, t = order[s * ft.batch : (s + 1) * ft.batch], e * per + s
                idx[t, j], w[t, j, : len(take)], live[t, j] = take[0], 1.0, True  # padding: a real sample, weight 0
                idx[t, j, : len(take)] = take
    return TunePlan(idx, w, live)


def sgd(
    params: Tensors,
    plan: TunePlan,
    batch: Callable[[torch.Tensor], Batch],
    grad: Callable[[Tensors, Batch], Tensors],
    lr: float,
    momentum: float,
) -> Tensors:
    """The plan's SGD steps from ``params`` (stacked [c] or one client's, as ``grad`` takes them): each step's
    batch from ``batch(idx[t])``, its weights added when the plan pads; a client not live at a step keeps its
    parameters and momentum."""
    buf: Tensors | None = None
    for t in range(int(plan.idx.shape[0])):
        b = batch(plan.idx[t])
        if plan.w is not None:
            b = {**b, "w": plan.w[t].to(next(iter(params.values())).dtype)}
        g = grad(params, b)
        if momentum:
            buf = g if buf is None else {k: momentum * buf[k] + g[k] for k in g}
            g = buf
        new = {k: p - lr * g[k] for k, p in params.items()}
        if plan.live is not None:
            on = plan.live[t]
            keep = lambda a, b_, on=on: torch.where(on.reshape(on.shape + (1,) * (a.dim() - on.dim())), a, b_)  # noqa: E731
            new = {k: keep(new[k], params[k]) for k in new}
            if buf is not None:
                buf = {k: keep(v, torch.zeros_like(v)) for k, v in buf.items()}
        params = new
    return params
