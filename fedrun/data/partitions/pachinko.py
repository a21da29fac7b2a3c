"""Pachinko allocation for CIFAR-100 (Li & McCallum 2006; as used by Reddi et al. 2021, cited by FedIMA).

Each client has a coarse-label distribution ~ Dir(alpha) over the superclasses and, per superclass, a
fine-label distribution ~ Dir(beta) over that superclass's fine labels. A client's samples are drawn
one at a time (coarse, then fine) without replacement; when a fine label runs out it is removed from every
client's distribution for its superclass (renormalised), and when a superclass runs out it is removed
from every client's coarse distribution. Reddi et al.: 500 clients x 100 samples, alpha=0.1, beta=10.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrun.config.registry import PARTITIONS, positive
from fedrun.core.errors import ConfigError
from fedrun.data.partitions.base import PartitionInput, PartitionParams


@dataclass
class PachinkoParams(PartitionParams):
    """``partition=pachinko``: ``alpha`` for the superclass prior, ``beta`` for the fine prior per superclass."""

    alpha: float = 0.1  # Dir(alpha) superclass prior (Reddi et al. 2021's CIFAR-100: 0.1)
    beta: float = 10.0  # Dir(beta) fine prior per superclass (Reddi et al. 2021: 10)

    def __post_init__(self) -> None:
        positive("alpha", self.alpha)
        positive("beta", self.beta)


def hierarchy(fine: np.ndarray, coarse: np.ndarray) -> dict[int, list[int]]:
    """superclass -> its fine labels, checked to be a tree (every fine label under exactly one superclass)."""
    tree: dict[int, list[int]] = {}
    for f in np.unique(fine):
        parents = np.unique(coarse[fine == f])
        if len(parents) != 1:
            raise ConfigError(
                "partition.name", f"pachinko: fine label {f} appears under superclasses {parents.tolist()}"
            )
        tree.setdefault(int(parents[0]), []).append(int(f))
    return tree


@PARTITIONS.register("pachinko", PachinkoParams)
def pachinko(inp: PartitionInput, n_clients: int, p: PachinkoParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Every client gets exactly floor(n/N) samples, drawn coarse-then-fine (see the module docstring)."""
    if inp.coarse is None:
        raise ConfigError("partition.name", "pachinko needs coarse labels (e.g. data=cifar100); this dataset has none")
    tree = hierarchy(inp.labels, inp.coarse)
    supers = sorted(tree)
    size = len(inp.labels) // n_clients
    if size == 0:
        raise ConfigError("fl.clients", f"{n_clients} clients but only {len(inp.labels)} training samples")
    pools = {f: list(rng.permutation(np.flatnonzero(inp.labels == f))) for fs in tree.values() for f in fs}
    coarse_p = rng.dirichlet(np.full(len(supers), p.alpha), n_clients)
    fine_p = {s: rng.dirichlet(np.full(len(tree[s]), p.beta), n_clients) for s in supers}
    coarse_alive = np.ones(len(supers), dtype=bool)
    fine_alive = {s: np.ones(len(tree[s]), dtype=bool) for s in supers}
    parts = []
    for j in range(n_clients):
        mine = np.empty(size, dtype=np.int64)
        for t in range(size):
            s_i = _draw(coarse_p[j] * coarse_alive, coarse_alive, rng)
            s = supers[s_i]
            f_i = _draw(fine_p[s][j] * fine_alive[s], fine_alive[s], rng)
            f = tree[s][f_i]
            mine[t] = pools[f].pop()
            if not pools[f]:
                fine_alive[s][f_i] = False
                if not fine_alive[s].any():
                    coarse_alive[s_i] = False
        parts.append(np.sort(mine))
    return parts


def _draw(weights: np.ndarray, alive: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn from ``weights`` renormalised; uniform over ``alive`` if all live weight underflowed."""
    live = np.flatnonzero(weights > 0)
    if live.size == 0:
        live, weights = np.flatnonzero(alive), alive.astype(float)
    cum = np.cumsum(weights[live])
    return int(live[min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), live.size - 1)])
