"""What server-side methods that train on the proxy set share (FedLAW, FedDF, FedBE, Server-FT), and the
re-estimation of a model's BatchNorm statistics on it (fixed-gamma FedAvg-GWS)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from fedrun.algorithms.base import Batch, SetupEnv
from fedrun.algorithms.fedavg import FedAvg
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.data.proxy import ProxySet
from fedrun.models.base import FunctionalModel


def require_proxy(env: SetupEnv, what: str) -> ProxySet:
    """``env.proxy``, or a one-line ConfigError saying that ``what`` needs one."""
    proxy = env.proxy
    if proxy is None or len(proxy) == 0:
        raise ConfigError("proxy.per_class", f"{what} on a server proxy set; set it > 0")
    return proxy


def proxy_epochs(env: SetupEnv, proxy: ProxySet, rnd: int, epochs: int) -> Iterator[tuple[int, list[Batch]]]:
    """(epoch, that epoch's proxy batches ``{x, y}``) for ``epochs`` server epochs of round ``rnd`` (keyed order)."""
    gen = proxy.generator(env.seed, rnd)
    for e in range(epochs):
        yield e, [env.data.batch(idx, proxy.split) for idx in proxy.epoch_batches(gen)]


class ProxyMethod(FedAvg):
    """A FedAvg-client method whose server trains on ``env.proxy`` (refuses to run without one).

    Its server passes run the global model in train mode, so they update the global BatchNorm statistics
    (``self.model.buffers``) as FedLAW's code's central model does: such a method owns the buffers.
    """

    owns_buffers = True

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        self.proxy: ProxySet = require_proxy(env, f"{type(self).__name__} trains")

    def proxy_epochs(self, rnd: int, epochs: int) -> Iterator[tuple[int, list[Batch]]]:
        """(epoch, that epoch's proxy batches) for ``epochs`` server epochs of round ``rnd`` (keyed order)."""
        return proxy_epochs(self.setup_env, self.proxy, rnd, epochs)

    def proxy_batch(self, idx: torch.Tensor | None = None) -> Batch:
        """The proxy samples at ``idx`` (all of them when None) as model input ``{x, y}``."""
        if idx is None:
            idx = torch.arange(len(self.proxy), device=self.proxy.split.y.device)
        return self.setup_env.data.batch(idx, self.proxy.split)


def adam(tensors: list[torch.Tensor], lr: float, betas: tuple[float, float]) -> torch.optim.Adam:
    """The server optimiser of FedLAW/FedDF/FedBE/Server-FT: Adam with betas (0.5, 0.999) (FedLAW App. C)."""
    return torch.optim.Adam(tensors, lr=lr, betas=betas)


BN_RESET = {"running_mean": torch.zeros_like, "running_var": torch.ones_like, "num_batches_tracked": torch.zeros_like}


def reestimate_bn(model: FunctionalModel, params: Tensors, batches: Iterable[Batch]) -> Tensors:
    """BatchNorm statistics of ``params`` re-estimated on ``batches`` (``torch.optim.swa_utils.update_bn``).

    Running means and variances restart at 0 and 1 and become the cumulative average of the per-batch
    statistics (BatchNorm ``momentum=None``) over one train-mode pass; other buffers keep their values.
    Returns the new buffers; ``model.buffers`` is left as it was.
    """
    bns = [m for m in model.module.modules() if isinstance(m, _BatchNorm)]
    fresh = {}
    for k, v in model.buffers.items():
        stat = k.rpartition(".")[2]
        fresh[k] = BN_RESET[stat](v) if stat in BN_RESET else v.clone()
    momenta = [m.momentum for m in bns]
    try:
        for m in bns:
            m.momentum = None
        with torch.no_grad():
            for batch in batches:
                model.logits(params, batch["x"], fresh)
    finally:
        for m, mom in zip(bns, momenta, strict=True):
            m.momentum = mom
    return fresh
