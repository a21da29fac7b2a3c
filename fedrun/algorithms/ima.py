"""IMA, iterative moving averaging (Zhou et al., FedIMA, eq. 5): a switch on top of any algorithm.

The base method runs unchanged; IMA keeps a ring buffer of its last W aggregation outputs ("FMA"
models) in the server state and, from round t_s = int(start * R) on (and once W models are stored, t >= W
as in FedIMA's ``aggregator.py``), the new global model is their mean

    w^{t+1} = (1/W) sum_{k=t-W+1}^{t} w_FMA^k,

which clients start from and which is evaluated. After t_s the client lr decays further ("mild client
exploration", :meth:`IMA.local_lr`).

Server-optimiser bases (those with ``server_update``, i.e. FedAdam/FedYogi/...) follow FedIMA's code: the
buffer holds the plain weighted averages, the window mean replaces the average, and the server step uses
Delta = mean - w^t. The moment "reset" at t_s is the code's, which the paper does not describe: in
``utils/aggregator.py`` (fedadam+ima lines 178-183, fedyogi+ima 122-127) ``m_t, v_t = zeros`` only rebinds
the function's local names, so round t_s steps from m = v = 0 while the caller's moments (mutated in place
every other round) keep their round t_s - 1 values, and round t_s + 1 continues from those: the reset lasts
one round and round t_s's moment update is lost. It happens only when t_s >= W (it sits in the ``t >= W``
branch). Here: the base's ``ima_reset`` (FedAdam/FedYogi: m = v = 0) gives round t_s's step, and the server
state keeps the moments from before t_s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedrun.algorithms.base import Algorithm, Batch, ClientContext, RoundInfo, SetupEnv
from fedrun.config.schema import FLConfig, IMAConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree, tree_map, weighted_mean


class IMA(Algorithm):
    """Wraps ``inner``: delegates every hook, overrides :meth:`local_lr` and :meth:`aggregate`."""

    def __init__(self, inner: Algorithm, cfg: IMAConfig) -> None:
        super().__init__(inner.hp, inner.fl, inner.model)
        self.inner = inner
        self.cfg = cfg
        self.start_round = int(cfg.start * inner.fl.rounds)
        self.base_epochs = inner.fl.local_epochs
        if cfg.schedule == "ed" and inner.fl.local_steps is not None:
            raise ConfigError("ima.schedule", "ed lowers fl.local_epochs, but fl.local_steps is set")

    def __getattr__(self, name: str) -> Any:
        # Anything IMA does not define (method-specific attributes, hooks added later) is the base's.
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    @property
    def owns_buffers(self) -> bool:  # type: ignore[override]
        """The base's (a server-side base sets the global BatchNorm statistics in its ``aggregate``)."""
        return self.inner.owns_buffers

    @property
    def first_average_round(self) -> int:
        """The first round whose output is a window mean: max(t_s, W) (FedIMA: t >= t_start, t >= W)."""
        return max(self.start_round, self.cfg.window)

    # ---- delegated hooks -----------------------------------------------------------------------------
    def setup(self, env: SetupEnv) -> None:
        self.env = env
        self.inner.setup(env)

    def server_init(self, params: Tensors) -> Tree:
        window = tree_map(lambda p: torch.zeros((self.cfg.window, *p.shape), dtype=p.dtype, device=p.device), params)
        return {"inner": self.inner.server_init(params), "window": window, "count": torch.zeros((), dtype=torch.long)}

    def client_init(self, params: Tensors) -> Tree:
        return self.inner.client_init(params)

    def client_rows(self, rows: Tree) -> Tree:
        return self.inner.client_rows(rows)

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return self.inner.broadcast(params, server_state["inner"])

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        return self.inner.local_loss(params, batch, ctx)

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        return self.inner.local_grad(params, batch, ctx)

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        return self.inner.client_step(params, opt, batch, ctx)

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        return self.inner.client_finish(start, end, ctx, steps)

    @property
    def personal(self) -> bool:  # type: ignore[override]
        return self.inner.personal

    @property
    def batch_extras(self) -> Any:  # type: ignore[override]
        return self.inner.batch_extras

    @property
    def adaptation(self) -> tuple[int, float | None]:  # type: ignore[override]
        return self.inner.adaptation

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return self.inner.personal_model(params, client_state)

    @property
    def select_on_test(self) -> bool:  # type: ignore[override]
        return self.inner.select_on_test

    def own_logits(self, own: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        return self.inner.own_logits(own, x, buffers)

    def own_loss(self, own: Tensors, batch: Batch) -> torch.Tensor:
        return self.inner.own_loss(own, batch)

    def personal_keys(self) -> list[str] | None:
        return self.inner.personal_keys()

    def personal_buffers(self, client_state: Tree) -> Tensors:
        return self.inner.personal_buffers(client_state)

    def broadcast_bytes(self, params: Tensors, extras: Tree) -> int:
        return self.inner.broadcast_bytes(params, extras)

    # ---- what IMA changes ----------------------------------------------------------------------------
    def local_lr(self, rnd: int, lr: float) -> float:
        """The client lr of round ``rnd`` (FedIMA Sec. IV-C, Table III), given the configured schedule's lr.

        Before t_s: unchanged. After: lr(t_s) = the configured schedule frozen at t_s, then exd:
        lr(t_s) * lr_decay^(t - t_s); nad: the configured lr; clr: min_lr; cd: a triangle from lr(t_s) down
        to min_lr and back every ``period`` rounds; sd: lr(t_s) / 2^floor((t - t_s)/period); ed: the
        configured lr, with fl.local_epochs lowered by one every ``period`` rounds (at least 1).
        Two FedIMA-code quirks are not copied (``server_se1.py``): its ED restarts the lr decay at t_s
        (lr0 * 0.99^(t - t_s)), and its CD's rising half overshoots to ~2 lr(t_s) instead of a triangle.
        The lr after t_s assumes the configured schedule is fl.lr * fl.lr_decay^t (lr(t_s) is recovered
        from it), which keeps this a pure function of the round, so resumed runs get the same lr.
        """
        lr = self.inner.local_lr(rnd, lr)
        cfg, k = self.cfg, rnd - self.start_round
        if k < 0:
            return lr
        lr_ts = lr / self.fl.lr_decay**k
        if cfg.schedule == "exd":
            return lr_ts * cfg.lr_decay**k
        if cfg.schedule == "clr":
            return cfg.min_lr
        if cfg.schedule == "cd":
            phase = (k % cfg.period) / cfg.period
            return lr_ts + (cfg.min_lr - lr_ts) * (1.0 - abs(1.0 - 2.0 * phase))
        if cfg.schedule == "sd":
            return lr_ts * 0.5 ** (k // cfg.period)
        return lr  # nad, ed

    def round_fl(self, rnd: int) -> FLConfig:
        """``ed``: fl.local_epochs lowered by one every ``period`` rounds from t_s on (at least 1); the
        others: the base's settings. Engines read this per round (``fl`` itself is never changed)."""
        fl = self.inner.round_fl(rnd)
        k = rnd - self.start_round
        if self.cfg.schedule != "ed" or k < 0:
            return fl
        return dataclasses.replace(fl, local_epochs=max(1, self.base_epochs - k // self.cfg.period))

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        inner, state = self.inner, server_state["inner"]
        active = info.round >= self.first_average_round
        if hasattr(inner, "server_update"):
            window, count = self.push(server_state, weighted_mean(uploads["params"], weights))
            avg = self.window_mean(window) if active else unstack_last(window, count)
            if info.round == self.start_round >= self.cfg.window and hasattr(inner, "ima_reset"):
                # FedIMA's one-round reset (module docstring): step from zero moments, keep the old ones
                new, _, diag = inner.server_update(params, inner.ima_reset(state), avg, info)
            else:
                new, state, diag = inner.server_update(params, state, avg, info)
        else:
            new, state, diag = inner.aggregate(params, state, uploads, weights, info)
            window, count = self.push(server_state, new)
            if active:
                new = self.window_mean(window)
        return new, {"inner": state, "window": window, "count": count}, {**diag, "ima_active": float(active)}

    def push(self, server_state: Tree, model: Tensors) -> tuple[Tree, torch.Tensor]:
        """Store ``model`` in the ring buffer's next slot (in place: W models are not copied each round)."""
        count = server_state["count"]
        pos = int(count) % self.cfg.window

        def put(buf: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            buf[pos].copy_(w)
            return buf

        return tree_map(put, server_state["window"], model), count + 1

    @staticmethod
    def window_mean(window: Tree) -> Tensors:
        """(1/W) sum of the stored models (FedIMA eq. 5)."""
        return tree_map(lambda b: b.mean(0), window)


def unstack_last(window: Tree, count: torch.Tensor) -> Tensors:
    """The model pushed last (slot (count - 1) mod W)."""
    return tree_map(lambda b: b[(int(count) - 1) % b.shape[0]], window)
