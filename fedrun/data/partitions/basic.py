"""IID, Dirichlet label skew (two variants) and pathological shards."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrun.config.registry import PARTITIONS, positive
from fedrun.core.errors import ConfigError
from fedrun.data.partitions.base import PartitionInput, PartitionParams


@PARTITIONS.register("iid", PartitionParams)
def iid(inp: PartitionInput, n_clients: int, p: PartitionParams, rng: np.random.Generator) -> list[np.ndarray]:
    """A uniformly random split into ``n_clients`` parts of equal size (+-1)."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(inp.labels)), n_clients)]


@dataclass
class DirichletParams(PartitionParams):
    """``partition=dirichlet``: per-class Dir(alpha) label skew (Hsu et al. 2019).

    variant=resample (fedlab's hetero_dir_partition, used by FedIMA/FedCos): clients already holding
    n/N samples get no share of later classes, and the whole draw is repeated until every client has
    at least ``min_size`` samples, at most ``max_tries`` times.
    variant=no_resample (FedLAW's build_non_iid_by_dirichlet_new): one draw, client i gets
    round(p_ik * n_k) of class k, the last client the remainder; clients may be tiny or empty.
    """

    alpha: float = 0.5  # Dir(alpha) concentration: smaller = more skew
    # resample (fedlab/FedIMA/FedCos: redraw until every client has >= min_size) | no_resample (FedLAW's code)
    variant: str = "resample"
    min_size: int = 10  # variant=resample: the fewest samples a client may hold (fedlab's 10)
    max_tries: int = 1000  # variant=resample: draws before giving up

    def __post_init__(self) -> None:
        positive("alpha", self.alpha)
        if self.variant not in ("resample", "no_resample"):
            raise ConfigError("variant", f"invalid value {self.variant!r}; valid: resample, no_resample")
        positive("min_size", self.min_size, allow_zero=True)
        positive("max_tries", self.max_tries)


def _dirichlet_resample(labels: np.ndarray, n_clients: int, p: DirichletParams, rng: np.random.Generator) -> list:
    n = len(labels)
    if n_clients * p.min_size > n:
        raise ConfigError(
            "partition.min_size", f"{n_clients} clients x min_size {p.min_size} exceeds the {n} training samples"
        )
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == k) for k in classes]
    for _ in range(p.max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        sizes = np.zeros(n_clients, dtype=np.int64)
        for idx_k in by_class:
            idx_k = rng.permutation(idx_k)
            prop = rng.dirichlet(np.full(n_clients, p.alpha))
            prop = prop * (sizes < n / n_clients)
            total = prop.sum()
            # With tiny alpha all the mass can land on full clients; spread over the others then.
            prop = prop / total if total > 0 else (sizes < n / n_clients) / max(1, (sizes < n / n_clients).sum())
            cuts = (np.cumsum(prop) * len(idx_k)).astype(int)[:-1]
            for i, chunk in enumerate(np.split(idx_k, cuts)):
                parts[i].append(chunk)
                sizes[i] += len(chunk)
        if sizes.min() >= p.min_size:
            return [np.sort(np.concatenate(c)) for c in parts]
    raise ConfigError(
        "partition.alpha",
        f"Dirichlet(alpha={p.alpha}) gave some of the {n_clients} clients fewer than min_size={p.min_size} samples "
        f"in {p.max_tries} draws; raise partition.alpha, lower partition.min_size or use fewer clients",
    )


def _dirichlet_no_resample(labels: np.ndarray, n_clients: int, p: DirichletParams, rng: np.random.Generator) -> list:
    classes = np.unique(labels)
    props = rng.dirichlet(np.full(n_clients, p.alpha), len(classes))
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for k, cls in enumerate(classes):
        idx_k = rng.permutation(np.flatnonzero(labels == cls))
        counts = np.round(props[k, :-1] * len(idx_k)).astype(np.int64)
        cum = np.minimum(np.cumsum(counts), len(idx_k))
        for i, chunk in enumerate(np.split(idx_k, cum)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(c)) for c in parts]


@PARTITIONS.register("dirichlet", DirichletParams)
def dirichlet(inp: PartitionInput, n_clients: int, p: DirichletParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Label skew: each class is spread over the clients by a Dirichlet(alpha) draw; smaller alpha, more skew."""
    if p.variant == "resample":
        return _dirichlet_resample(inp.labels, n_clients, p, rng)
    return _dirichlet_no_resample(inp.labels, n_clients, p, rng)


@dataclass
class ShardsParams(PartitionParams):
    """``partition=shards``: McMahan et al.'s pathological split, k label-sorted shards per client."""

    shards_per_client: int = 2  # label-sorted shards per client (McMahan et al.: 2)

    def __post_init__(self) -> None:
        positive("shards_per_client", self.shards_per_client)


@PARTITIONS.register("shards", ShardsParams)
def shards(inp: PartitionInput, n_clients: int, p: ShardsParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Sort by label, cut into ``n_clients * k`` equal shards (sizes +-1), give each client k random shards."""
    n_shards = n_clients * p.shards_per_client
    if n_shards > len(inp.labels):
        raise ConfigError("partition.shards_per_client", f"{n_shards} shards exceed the {len(inp.labels)} samples")
    order = np.argsort(inp.labels, kind="stable")
    pieces = np.array_split(order, n_shards)
    assign = rng.permutation(n_shards).reshape(n_clients, p.shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in assign]
