"""Robust FL in the upload pipeline (fedrun/upload/pipeline.py): a model attack as an upload stage that replaces the
malicious clients' rows, and a defence as a stage whose aggregate replaces the weighted sum.

Both work on the cohort's rows [m, d] (row i: client i's update w_i - w^t, float32), whatever engine trained them:
the attack stage (order 50) runs first, before compression (100) and DP noise (200), so what the attackers send is
what the rest of the pipeline and the server see; an omniscient attacker reads the honest rows of the same matrix.
The defence's :meth:`~fedrun.upload.base.UploadStage.replace_sum` is the robust aggregate of the rows the server
received (after every stage), the pipeline then shifts the rows so that the method's weighted mean of them *is*
that aggregate (a method that steps from the mean: :attr:`Algorithm.steps_from_mean`). Only the model update
(part ``params``) is attacked and defended: such a method uploads nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

import torch

from fedrun.robust.base import (
    Aggregate,
    AttackView,
    Defence,
    ModelAttack,
    PreAggregator,
    ServerView,
    refusal,
    robust_aggregate,
    round_generator,
)
from fedrun.upload.base import RowStage, UploadContext, UploadStage

log = logging.getLogger("fedrun")
PARAMS = "params"  # the upload part attacked and defended: the model update


def malicious_rows(clients: torch.Tensor, malicious: torch.Tensor) -> torch.Tensor:
    """Which rows of a cohort (client ids ``clients``, in row order) are the malicious clients', [m] bool on CPU."""
    return torch.isin(clients.cpu(), malicious)


class AttackStage(RowStage):
    """A model attack on the malicious rows of each round (or model replacement behind a backdoor): a row stage, so
    the pipeline rebuilds only the attackers' uploads (the honest ones are passed on as they are).

    Column ``attack_uploads``: the malicious uploads of the round (the attackers sampled and reporting), 0 in a round
    outside ``window`` (0-based first and last round, inclusive; None: to the end), whose uploads are left as sent.
    """

    name = "attack"
    order: ClassVar[int] = 50

    def __init__(
        self, attack: ModelAttack, malicious: torch.Tensor, server_lr: float = 1.0,
        window: tuple[int, int | None] = (0, None),
    ) -> None:  # fmt: skip
        self.attack, self.malicious, self.server_lr, self.window = attack, malicious.cpu(), server_lr, window

    def replace_rows(
        self, delta: torch.Tensor, ctx: UploadContext
    ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, dict[str, float]]:
        if ctx.part != PARAMS:
            return None, {}
        first, last = self.window
        if ctx.rnd < first or (last is not None and ctx.rnd > last):
            return None, {"attack_uploads": 0.0}
        bad = malicious_rows(ctx.clients, self.malicious)
        a = int(bad.sum())
        if a == 0:
            return None, {"attack_uploads": 0.0}
        at = bad.nonzero().flatten().to(delta.device)
        own = delta.index_select(0, at)
        # the honest rows, copied only for an attack that reads them (an omniscient one)
        honest = (
            own[:0]
            if self.attack.knowledge == "own"
            else delta.index_select(0, (~bad).nonzero().flatten().to(delta.device))
        )
        view = AttackView(
            n=delta.shape[0],
            weights=ctx.weights.index_select(0, at.to(ctx.weights.device)),
            server_lr=self.server_lr,
            generator=round_generator(ctx.seed, "attack", ctx.rnd),
        )
        # a round of attackers alone: an omniscient attacker sees no honest row, and its own stand in for them
        sent = self.attack(own, honest if honest.shape[0] else own, view)
        return (at, sent.to(delta.dtype)), {"attack_uploads": float(a)}


class DefenceStage(UploadStage):
    """A robust aggregation rule (after its pre-aggregators) in place of the weighted sum of the received rows.

    ``f_of(m)``: the Byzantine count the rule tolerates in a cohort of m; ``malicious``: the attack's clients (the
    columns say how the rule treated them; None without an attack); ``root``: FLTrust's server update of the
    round, as the cohort's rows are laid out; ``previous``: the last aggregate (centered clipping's centre), the
    capability's checkpointed state. A cohort too small for the rule (Bernoulli sampling, dropouts) keeps w^t:
    every upload becomes w^t (zero rows, before the sum), the round's ``defence_skipped`` is 1, and one log line
    says why.
    """

    name = "defence"
    order: ClassVar[int] = 250

    def __init__(
        self,
        defence: Defence,
        pre: tuple[PreAggregator, ...],
        f_of: Callable[[int], int],
        malicious: torch.Tensor | None = None,
        root: Callable[[], torch.Tensor] | None = None,
    ) -> None:
        self.defence, self.pre, self.f_of = defence, pre, f_of
        self.malicious = malicious.cpu() if malicious is not None else None
        self.root = root
        self.previous: torch.Tensor | None = None
        self.skipped = 0  # rounds that kept w^t (their cohort too small for the rule), the capability's state
        self._skip: int | None = None  # the round :meth:`apply` found too small

    def apply(
        self, delta: torch.Tensor, state: torch.Tensor | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        """The rows as received; in a round whose cohort is too small for the rule, zero rows (every upload w^t:
        the method's mean keeps w^t), one log line and ``defence_skipped`` = 1."""
        self._skip = None
        if ctx.part != PARAMS:
            return delta, None, {}
        f = self.f_of(delta.shape[0])
        why = refusal(self.defence, self.pre, delta.shape[0], f)
        if why is None:
            return delta, None, {}
        log.warning("round %d: defence %s skipped, w^t kept: %s", ctx.rnd + 1, self.defence.name, why)
        self.skipped += 1
        self._skip = ctx.rnd
        return torch.zeros_like(delta), None, {"defence_f": float(f), "defence_skipped": 1.0}

    def replace_sum(self, rows: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]] | None:
        if ctx.part != PARAMS or self._skip == ctx.rnd:
            return None
        f = self.f_of(rows.shape[0])
        cols: dict[str, float] = {"defence_f": float(f), "defence_skipped": 0.0}
        view = ServerView(
            f=f,
            weights=ctx.weights,
            root=self.root() if self.defence.needs_root and self.root is not None else None,
            previous=self.previous if self.defence.stateful else None,
            generator=round_generator(ctx.seed, "defence", ctx.rnd),
        )
        agg = robust_aggregate(rows, self.defence, view, self.pre)
        if self.defence.stateful:
            self.previous = agg.value.detach().clone()
        return agg.value, {**cols, **self.decisions(agg, ctx.clients)}

    def decisions(self, agg: Aggregate, clients: torch.Tensor) -> dict[str, float]:
        """The round's columns of what the rule decided: ``defence_kept`` (uploads kept) and, under an attack,
        ``defence_kept_malicious`` (of them, the attackers'), ``defence_malicious_weight`` (their share of the
        weights, where the rule weighs the uploads) and ``defence_malicious`` (the attackers' uploads received)."""
        if not self.defence.decides:
            return {}
        out: dict[str, float] = {}
        bad = malicious_rows(clients, self.malicious) if self.malicious is not None else None
        if agg.selected is not None:
            kept = agg.selected.cpu()
            out["defence_kept"] = float(kept.sum())
            if bad is not None:
                out["defence_kept_malicious"] = float((kept & bad).sum())
        if agg.weights is not None and bad is not None:
            w = agg.weights.detach().double().cpu().abs()
            total = float(w.sum())
            out["defence_malicious_weight"] = float(w[bad].sum()) / total if total > 0 else 0.0
        if bad is not None:
            out["defence_malicious"] = float(bad.sum())
        return out
