"""``system.server=fedasync_mean``: FedAsync's mixing (Xie et al. 2019) of the mean of a buffer of arrivals. The server
waits for K = ``system.buffer`` arrivals, then

    w_t = (1 - a) w_{t-1} + a mean_i(x_i),   a = alpha mean_i s(t - tau_i)

with alpha = ``system.mixing`` and s the staleness function (fedrun/system/servers/base.py): FedAsync's update on the
buffer's mean model, which K = 1 makes FedAsync itself and K > 1 smooths."""

from __future__ import annotations

import torch

from fedrun.core.tree import Tensors
from fedrun.system.servers.base import SERVERS, AsyncServer
from fedrun.system.servers.queue import Event


@SERVERS.register("fedasync_mean")
class FedAsyncMean(AsyncServer):
    """K arrivals an update; clients upload their models, whose mean the server mixes in."""

    @property
    def arrivals(self) -> int:
        return int(self.settings.buffer)

    def step(self, params: Tensors, arrivals: list[Event], staleness: list[float]) -> Tensors:
        a = self.settings.mixing * sum(staleness) / len(staleness)
        models = self.gather(arrivals, "params")  # the arrivals' models, stacked in arrival order
        return {k: torch.lerp(w, models[k].mean(0), a) for k, w in params.items()}
