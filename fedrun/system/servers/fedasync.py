"""FedAsync (Xie et al. 2019, "Asynchronous federated optimization", Alg. 1 and sec. 3): each arrival x_new,
dispatched at version tau, is one server update

    w_t = (1 - a_t) w_{t-1} + a_t x_new,   a_t = alpha s(t - tau)

with ``system.mixing`` = alpha and ``system.staleness`` = s (fedrun/system/servers/base.py).

The lag t - tau is counted as the authors' released code counts it (xcgoner/async_fl,
``train_cifar10_mxnet_fedasync_singlethread_impl.py``: ``worker_delay = epoch - worker_ts``, the newest model stamped
with the number of updates applied): an arrival trained from w_{t-1}, the model it is mixed into, has lag 0 and
s(0) = 1, full weight alpha; one dispatched k versions earlier has s(k), e.g. (k + 1)^-a. Alg. 1's indices (the
updater's epoch t mixes x_new into x_{t-1}; the worker sets tau to the stamp of the x_tau it received) would give
that fresh arrival t - tau = 1.
"""

from __future__ import annotations

import torch

from fedrun.core.tree import Tensors, leaves
from fedrun.system.servers.base import SERVERS, AsyncServer, unflatten
from fedrun.system.servers.queue import Event


@SERVERS.register("fedasync")
class FedAsync(AsyncServer):
    """One arrival an update; clients upload their models."""

    def step(self, params: Tensors, arrivals: list[Event], staleness: list[float]) -> Tensors:
        a = self.settings.mixing * staleness[0]
        # (1 - a) w + a x as torch's lerp, one pass over each tensor: w + a (x - w) for a < 0.5, else
        # x - (1 - a)(x - w), so that a = 1 gives x exactly (FedAsync with mixing 1 is sequential SGD)
        ws, xs = leaves(params), [x[0] for x in leaves(self.gather(arrivals, "params"))]
        out: Tensors = unflatten(params, torch._foreach_lerp(ws, xs, a))
        return out
