"""FedBuff (Nguyen et al. 2022, "Federated learning with buffered asynchronous aggregation", Alg. 1): each arrival's
delta Delta_i = y_i - w_tau joins the buffer; at K = ``system.buffer`` of them

    w_t = w_{t-1} + eta_g sum_i p_i s(t - tau_i) Delta_i

with eta_g = ``system.server_lr``, s the staleness function and p_i fedrun's aggregation weights over the buffer
(``fl.weighting``: n_i / sum n_j, or the paper's 1/K with ``uniform``).
"""

from __future__ import annotations

from typing import Any

import torch

from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.system.servers.base import SERVERS, AsyncServer, flat_base, split
from fedrun.system.servers.queue import Event


def buffer_weights(sizes: list[int], weighting: str, staleness: list[float], server_lr: float) -> list[float]:
    """FedBuff's eta_g p_i s(t - tau_i) in float64, with p_i the synchronous aggregation weights (n_i / sum_j n_j,
    or 1/K uniform or when the buffer holds no sample) as the same floats: the sizes are integers, so their sum is
    exact in any order, and each n_i / sum is one rounded division, as are the products after it."""
    total = sum(sizes)
    p = [n / total for n in sizes] if weighting == "size" and total > 0 else [1 / len(sizes)] * len(sizes)
    return [server_lr * (p_i * s_i) for p_i, s_i in zip(p, staleness, strict=True)]


@SERVERS.register("fedbuff")
class FedBuff(AsyncServer):
    """K arrivals an update; clients upload their deltas (so the server needs no old version)."""

    @property
    def arrivals(self) -> int:
        return int(self.settings.buffer)

    @classmethod
    def check(cls, settings: Any, fl: Any) -> None:
        super().check(settings, fl)
        c = settings.concurrency if settings.concurrency is not None else fl.cohort_size
        if settings.buffer > c:
            raise ConfigError(
                "system.buffer", f"not with system.server=fedbuff; valid: at most the concurrency C={c} (K <= C)"
            )

    def uploads(self, ends: Tensors, start: Tensors) -> tuple[Tensors, torch.Tensor | None]:
        """Deltas Delta_i = y_i - w_tau, written as one (clients x parameters) matrix, the tensors side by side in the
        order of ``start``'s names, and returned also as views of it."""
        if len({t.dtype for t in start.values()}) > 1:  # (mixed dtypes: no one matrix; the step reads them one by one)
            return {k: ends[k] - w for k, w in start.items()}, None
        rows = next(iter(ends.values())).shape[0]
        first = next(iter(start.values()))
        flat = torch.empty(rows, sum(t.numel() for t in start.values()), dtype=first.dtype, device=first.device)
        deltas, off = {}, 0
        for k, w in start.items():
            block = flat[:, off : off + w.numel()].view(rows, *w.shape)
            torch.sub(ends[k], w, out=block)
            deltas[k], off = block, off + w.numel()
        return deltas, flat

    def step(self, params: Tensors, arrivals: list[Event], staleness: list[float]) -> Tensors:
        sizes = self.system.sizes[[e.client for e in arrivals]].tolist()
        q = buffer_weights(sizes, self.fl.weighting, staleness, self.settings.server_lr)
        if len({t.dtype for t in params.values()}) > 1:  # (a model of mixed dtypes: its tensors one by one)
            deltas, q64 = self.gather(arrivals, "params"), torch.tensor(q, dtype=torch.float64)
            return {k: w + torch.tensordot(q64.to(w.device, w.dtype), deltas[k], dims=1) for k, w in params.items()}
        # w + sum_i q_i Delta_i summed cohort by cohort, in the order the cohorts first arrive: per cohort one
        # (1 x r)(r x parameters) product over its arriving rows of its uploads matrix, added to w by addmm (into the
        # previous cohorts' sum). A cohort's rows are stored in completion order, so an update's arrivals from it are
        # consecutive rows, read where the cohort left them (else one index_select)
        queue = self.queue
        parts: dict[int, list[tuple[int, float]]] = {}
        for e, q_i in zip(arrivals, q, strict=True):
            parts.setdefault(e.batch, []).append((queue.row(e), q_i))
        out: torch.Tensor | None = None
        for b, rows in parts.items():
            rows.sort()
            ix = [r for r, _ in rows]
            m = queue.uploads_matrix(b)
            if ix[-1] - ix[0] == len(ix) - 1:
                m = m[ix[0] : ix[-1] + 1]
            else:
                m = m.index_select(0, torch.tensor(ix, device=m.device))
            row = torch.tensor([[q_i for _, q_i in rows]], dtype=m.dtype, device=m.device)
            if out is None:
                w = flat_base(params)
                w = torch.cat([t.reshape(1, -1) for t in params.values()], dim=1) if w is None else w
                out = torch.addmm(w, row, m)
            else:
                out.addmm_(row, m)
        assert out is not None
        return split(params, out[0])
