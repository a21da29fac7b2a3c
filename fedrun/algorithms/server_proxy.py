"""What server-side methods that train on the proxy set share (FedLAW, FedDF, FedBE, Server-FT)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from fedrun.algorithms.base import Batch
from fedrun.algorithms.fedavg import FedAvg
from fedrun.data.proxy import ProxySet
from fedrun.errors import ConfigError


class ProxyMethod(FedAvg):
    """A FedAvg-client method whose server trains on ``env["proxy"]`` (refuses to run without one)."""

    def setup(self, env: dict[str, Any]) -> None:
        super().setup(env)
        proxy = env.get("proxy")
        if proxy is None or len(proxy) == 0:
            raise ConfigError("proxy.per_class", f"{type(self).__name__} trains on a server proxy set; set it > 0")
        self.proxy: ProxySet = proxy

    def proxy_epochs(self, rnd: int, epochs: int) -> Iterator[tuple[int, list[Batch]]]:
        """(epoch, that epoch's proxy batches) for ``epochs`` server epochs of round ``rnd`` (keyed order)."""
        gen = self.proxy.generator(self.env.get("seed", 0), rnd)
        for e in range(epochs):
            yield e, [self.proxy_batch(idx) for idx in self.proxy.epoch_batches(gen)]

    def proxy_batch(self, idx: torch.Tensor | None = None) -> Batch:
        """The proxy samples at ``idx`` (all of them when None) as model input ``{x, y}``."""
        if idx is None:
            idx = torch.arange(len(self.proxy), device=self.proxy.split.y.device)
        return self.env["data"].batch(idx, self.proxy.split)


def adam(tensors: list[torch.Tensor], lr: float, betas: tuple[float, float]) -> torch.optim.Adam:
    """The server optimiser of FedLAW/FedDF/FedBE/Server-FT: Adam with betas (0.5, 0.999) (FedLAW App. C)."""
    return torch.optim.Adam(tensors, lr=lr, betas=betas)
