"""Label-skew partitions of the papers beyond plain Dirichlet and shards.

- ``dirichlet_equal``: per-client Dirichlet with equal client sizes (Acar et al. 2021, FedDyn; used by
  FedSAM/MoFedSAM through FL-Simulator).
- ``pct_noniid``: FedCos's "X% non-IID" (an IID pool mixed into label-sorted chunks).
- ``hybrid``: FedLAW's balanced/imbalanced Dirichlet (alpha1 for the first half, alpha2 for the rest).
- ``label_k``: "#label = k" quantity-based label skew (Li et al. 2022, NIID-Bench; FedIMA's ``_2`` split).

Each construction's docstring names the paper and code it was recovered from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrun.config.registry import PARTITIONS, in_range, positive
from fedrun.core.errors import ConfigError
from fedrun.data.partitions.base import PartitionInput, PartitionParams


def _by_class(labels: np.ndarray, num_classes: int) -> list[np.ndarray]:
    return [np.flatnonzero(labels == k) for k in range(num_classes)]


# --------------------------------------------------------------------------------------------- dirichlet_equal
@dataclass
class DirichletEqualParams(PartitionParams):
    """``partition=dirichlet_equal``: every client holds exactly floor(n/N) samples, class prior q_i ~ Dir_C(alpha).

    exhausted=redraw (Acar et al.'s FedDyn code, which FedSAM cites): a class that has run out is redrawn
    from the client's prior restricted to the classes left, so no sample is used twice.
    exhausted=refill (FL-Simulator's variant): an exhausted class is refilled with its samples again, so
    duplicates across clients are possible and the prior is followed exactly.
    """

    alpha: float = 0.6  # Dir_C(alpha) class prior per client (FedSAM's CIFAR and EMNIST splits)
    # redraw (FedDyn's code: a class that ran out is redrawn, no duplicates) | refill (FL-Simulator: duplicates)
    exhausted: str = "redraw"

    def __post_init__(self) -> None:
        positive("alpha", self.alpha)
        if self.exhausted not in ("redraw", "refill"):
            raise ConfigError("exhausted", f"invalid value {self.exhausted!r}; valid: redraw, refill")


@PARTITIONS.register("dirichlet_equal", DirichletEqualParams)
def dirichlet_equal(
    inp: PartitionInput, n_clients: int, p: DirichletEqualParams, rng: np.random.Generator
) -> list[np.ndarray]:
    """Acar et al. (2021): samples are dealt one at a time to a random client with room, class drawn from q_i."""
    n, c = len(inp.labels), inp.num_classes
    size = n // n_clients
    if size == 0:
        raise ConfigError("fl.clients", f"{n_clients} clients but only {n} training samples")
    prior = rng.dirichlet(np.full(c, p.alpha), n_clients)
    pools = [rng.permutation(ix) for ix in _by_class(inp.labels, c)]
    left = np.array([len(ix) for ix in pools])
    room = np.full(n_clients, size)
    parts = [np.empty(size, dtype=np.int64) for _ in range(n_clients)]
    u_client, u_class = rng.random(n_clients * size), rng.random(n_clients * size)
    active = np.arange(n_clients)
    for t in range(n_clients * size):
        j = active[int(u_client[t] * len(active))]
        q = prior[j] if p.exhausted == "refill" else prior[j] * (left > 0)
        total = q.sum()
        q = q / total if total > 0 else (left > 0) / (left > 0).sum()
        k = min(int(np.searchsorted(np.cumsum(q), u_class[t] * q.sum(), side="right")), c - 1)
        while q[k] == 0:  # guard against round-off landing on an empty class
            k = (k + 1) % c
        if left[k] == 0:  # refill
            left[k] = len(pools[k])
        left[k] -= 1
        room[j] -= 1
        parts[j][room[j]] = pools[k][left[k]]
        if room[j] == 0:
            active = active[active != j]
    return [np.sort(part) for part in parts]


# ------------------------------------------------------------------------------------------------- pct_noniid
@dataclass
class PctNonIIDParams(PartitionParams):
    """``partition=pct_noniid``: FedCos's "X% non-IID" has ``iid_fraction`` = 1 - X/100 (90% non-IID = 0.1)."""

    iid_fraction: float = 0.1  # 1 - X/100 of FedCos's "X% non-IID" (90% -> 0.1, 70% -> 0.3)

    def __post_init__(self) -> None:
        in_range("iid_fraction", self.iid_fraction, 0.0, 1.0)


@PARTITIONS.register("pct_noniid", PctNonIIDParams)
def pct_noniid(inp: PartitionInput, n_clients: int, p: PctNonIIDParams, rng: np.random.Generator) -> list[np.ndarray]:
    """FedCos utils/sampling.cifar_noniid(iidpart): the first ``iid_fraction`` of each label-sorted class forms
    a shuffled IID pool; the sorted rest is cut into N contiguous chunks; client j gets chunk j and 1/N of
    the pool (both cut with ``np.array_split``, so sizes differ by at most one)."""
    pool, rest = [], []
    for ix in _by_class(inp.labels, inp.num_classes):
        m = int(p.iid_fraction * len(ix))
        pool.append(ix[:m])
        rest.append(ix[m:])
    pool_ix = rng.permutation(np.concatenate(pool))
    chunks = np.array_split(np.concatenate(rest), n_clients)
    shares = np.array_split(pool_ix, n_clients)
    return [np.sort(np.concatenate([a, b])) for a, b in zip(chunks, shares, strict=True)]


# ----------------------------------------------------------------------------------------------------- hybrid
@dataclass
class HybridParams(PartitionParams):
    """``partition=hybrid``: FedLAW's build_non_iid_by_dirichlet_hybrid (App. D, Fig. 5: alpha1=10, alpha2=0.1)."""

    alpha1: float = 10.0  # Dir_N(alpha1) of the first half of the clients, balanced (FedLAW App. D, Fig. 5)
    alpha2: float = 0.1  # Dir_{N/2}(alpha2) of the other half's leftover class mass, imbalanced (FedLAW Fig. 5)

    def __post_init__(self) -> None:
        positive("alpha1", self.alpha1)
        positive("alpha2", self.alpha2)


@PARTITIONS.register("hybrid", HybridParams)
def hybrid(inp: PartitionInput, n_clients: int, p: HybridParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Per class k: P1 ~ Dir_N(alpha1), the first N/2 clients keep their P1 share (balanced clients); the
    class mass left, 1 - sum of those shares, is split over the other clients by Dir_{N/2}(alpha2)
    (imbalanced clients). Client i gets round(p_ik * n_k) of class k, the last client the remainder."""
    if n_clients < 2:
        raise ConfigError("fl.clients", "the hybrid partition needs at least 2 clients (half balanced, half not)")
    half = n_clients // 2
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for ix in _by_class(inp.labels, inp.num_classes):
        p1 = rng.dirichlet(np.full(n_clients, p.alpha1))[:half]
        p2 = rng.dirichlet(np.full(n_clients - half, p.alpha2)) * (1.0 - p1.sum())
        prop = np.concatenate([p1, p2])
        ix = rng.permutation(ix)
        counts = np.round(prop[:-1] * len(ix)).astype(np.int64)
        cuts = np.minimum(np.cumsum(counts), len(ix))
        for i, chunk in enumerate(np.split(ix, cuts)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(c)) for c in parts]


# ---------------------------------------------------------------------------------------------------- label_k
@dataclass
class LabelKParams(PartitionParams):
    """``partition=label_k``: each client holds exactly ``k`` classes (FedIMA's ``_2`` split is k=2)."""

    k: int = 2  # classes per client (NIID-Bench's "#label = k"; FedIMA's "_2" split is k=2)

    def __post_init__(self) -> None:
        positive("k", self.k)


def label_k_split(labels: np.ndarray, num_classes: int, n_clients: int, k: int, rng: np.random.Generator) -> list:
    """Client j takes class j mod C plus k-1 other distinct random classes; each class is split evenly
    (``np.array_split`` of a shuffled class) among the clients holding it (NIID-Bench ``noniid-#label``,
    FedIMA mixed_digit_dataloader ``_2``). Classes nobody drew stay unused."""
    present = [k_ for k_ in range(num_classes) if (labels == k_).any()]
    if k > len(present):
        raise ConfigError("partition.k", f"k={k} classes per client but the data has only {len(present)} classes")
    held = []
    for j in range(n_clients):
        first = present[j % len(present)]
        others = [c for c in present if c != first]
        held.append([first, *rng.choice(others, k - 1, replace=False).tolist()])
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in present:
        holders = [j for j in range(n_clients) if c in held[j]]
        if not holders:
            continue
        chunks = np.array_split(rng.permutation(np.flatnonzero(labels == c)), len(holders))
        for j, chunk in zip(holders, chunks, strict=True):
            parts[j].append(chunk)
    return [np.sort(np.concatenate(c)) for c in parts]


@PARTITIONS.register("label_k", LabelKParams)
def label_k(inp: PartitionInput, n_clients: int, p: LabelKParams, rng: np.random.Generator) -> list[np.ndarray]:
    """#label=k quantity skew (see :func:`label_k_split`)."""
    return label_k_split(inp.labels, inp.num_classes, n_clients, p.k, rng)
