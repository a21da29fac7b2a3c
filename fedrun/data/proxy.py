"""The server's proxy set: a small labelled sample carved out of the test split (FedLAW, App. C).

FedLAW, FedDF, FedBE and Server-FT train on it at the server. It is removed from the test split for every
method of a run config, so methods with and without a proxy set are evaluated on the same images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.config.schema import ProxyConfig
from fedrun.core.rng import np_rng, torch_gen
from fedrun.data.base import Split


def proxy_counts(per_class: int, num_classes: int, rho: float) -> list[int]:
    """Samples kept per class: int(per_class * rho^(-k/(C-1))) (FedLAW code's long-tailed proxy, Table 6).

    rho = 1 gives the class-balanced proxy of the paper (``per_class`` of every class).
    """
    if num_classes == 1:
        return [per_class]
    return [int(per_class * (1.0 / rho) ** (k / (num_classes - 1))) for k in range(num_classes)]


def carve_proxy(test: Split, num_classes: int, cfg: ProxyConfig, seed: int) -> tuple[Split, Split]:
    """(proxy split, remaining test split): a seeded per-class sample without replacement.

    A class with fewer test samples than asked gives all it has. Both splits keep the original order.
    """
    y = test.y.numpy()
    rng = np_rng(seed, "proxy")
    take = []
    for k, n in enumerate(proxy_counts(cfg.per_class, num_classes, cfg.rho)):
        idx = np.flatnonzero(y == k)
        if n and idx.size:
            take.append(rng.choice(idx, min(n, idx.size), replace=False))
    pick = np.sort(np.concatenate(take)) if take else np.zeros(0, dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(y)), pick)
    return test.subset(pick), test.subset(rest)


@dataclass
class ProxySet:
    """The proxy split on the compute device and how the server draws batches from it."""

    split: Split
    num_classes: int
    batch_size: int = 128
    balanced_sampling: bool = False

    def __len__(self) -> int:
        return len(self.split)

    def epoch_batches(self, gen: torch.Generator) -> list[torch.Tensor]:
        """One server epoch of index batches: a shuffle, or with ``balanced_sampling`` len(proxy) indices
        drawn with replacement with probability proportional to 1 / (count of the sample's class)."""
        n = len(self.split)
        if self.balanced_sampling:
            y = self.split.y.cpu()
            counts = torch.bincount(y, minlength=self.num_classes).to(torch.float64)
            order = torch.multinomial(1.0 / counts[y], n, replacement=True, generator=gen)
        else:
            order = torch.randperm(n, generator=gen)
        order = order.to(self.split.y.device)
        return [order[i : i + self.batch_size] for i in range(0, n, self.batch_size)]

    def generator(self, seed: int, rnd: int) -> torch.Generator:
        """The batch-order generator of round ``rnd`` (keyed, so it is the same for every method)."""
        return torch_gen(seed, "proxy_batches", rnd)
