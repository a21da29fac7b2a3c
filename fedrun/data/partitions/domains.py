"""Feature skew (clients grouped by domain, label skew inside) and natural partitions.

``domains`` follows FedIMA's mixed_digit_dataloader.py / PACS_dataloader.py: Digit-Five with K=100 has
20 clients per domain, PACS with K=80 also 20; inside a domain the samples are split by ``inner``:
``label_k`` (FedIMA's ``_2``: #label=2), ``dirichlet`` (fedlab's per-class Dirichlet with resampling,
FedIMA's ``dir``), ``shards`` (FedIMA's PACS ``_2``: 2 label-sorted shards per client) or ``iid``.
Clients ``d*cpd .. (d+1)*cpd-1`` belong to domain d (FedIMA draws the assignment at random; with uniform
client sampling the numbering does not matter, and contiguous blocks keep the heatmaps readable).

``natural`` uses the dataset's own clients (Shakespeare speaking roles, writers, Synthetic devices).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrun.config.registry import PARTITIONS, positive
from fedrun.core.errors import ConfigError
from fedrun.data.partitions.base import PartitionInput, PartitionParams
from fedrun.data.partitions.basic import DirichletParams, ShardsParams, dirichlet, iid, shards
from fedrun.data.partitions.label_skew import label_k_split

INNER = ("label_k", "dirichlet", "shards", "iid")


@dataclass
class DomainsParams(PartitionParams):
    """``partition=domains``: ``clients_per_domain`` (null: clients / domains), label skew ``inner`` in a domain.

    ``k`` is the classes per client for inner=label_k and the shards per client for inner=shards;
    ``alpha`` and ``min_size`` configure inner=dirichlet.
    """

    clients_per_domain: int | None = None  # None: fl.clients / domains (FedIMA: 20 for Digit-Five and PACS)
    # label skew inside a domain: label_k (FedIMA "_2") | dirichlet (FedIMA "dir") | shards (PACS "_2") | iid
    inner: str = "dirichlet"
    k: int = 2  # inner=label_k: classes per client; inner=shards: shards per client (FedIMA: 2)
    alpha: float = 0.5  # inner=dirichlet: Dir(alpha) concentration
    min_size: int = 10  # inner=dirichlet: the fewest samples a client may hold

    def __post_init__(self) -> None:
        positive("clients_per_domain", self.clients_per_domain)
        if self.inner not in INNER:
            raise ConfigError("inner", f"invalid value {self.inner!r}; valid: {', '.join(INNER)}")
        positive("k", self.k)
        positive("alpha", self.alpha)
        positive("min_size", self.min_size, allow_zero=True)


def _inner_split(labels: np.ndarray, num_classes: int, n: int, p: DomainsParams, rng: np.random.Generator) -> list:
    sub = PartitionInput(labels, num_classes)
    if p.inner == "label_k":
        return label_k_split(labels, num_classes, n, p.k, rng)
    if p.inner == "dirichlet":
        return dirichlet(sub, n, DirichletParams(alpha=p.alpha, min_size=p.min_size), rng)
    if p.inner == "shards":
        return shards(sub, n, ShardsParams(shards_per_client=p.k), rng)
    return iid(sub, n, PartitionParams(), rng)


@PARTITIONS.register("domains", DomainsParams)
def domains(inp: PartitionInput, n_clients: int, p: DomainsParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Feature skew: each client holds samples of one domain only, label-skewed by ``inner`` within it."""
    if inp.domains is None:
        raise ConfigError(
            "partition.name", "domains needs a dataset with a domain per sample (fmnist_domains, digit5, pacs)"
        )
    names = np.unique(inp.domains)
    cpd = p.clients_per_domain or n_clients // len(names)
    if cpd * len(names) != n_clients:
        raise ConfigError(
            "fl.clients",
            f"{n_clients} clients cannot be grouped as {p.clients_per_domain or 'an equal number'} per domain over "
            f"{len(names)} domains; set fl.clients={max(cpd, 1) * len(names)}",
        )
    parts: list[np.ndarray] = []
    for d in names:
        where = np.flatnonzero(inp.domains == d)
        if len(where) < cpd:
            raise ConfigError("partition.clients_per_domain", f"domain {d} has {len(where)} samples for {cpd} clients")
        try:
            local = _inner_split(inp.labels[where], inp.num_classes, cpd, p, rng)
        except ConfigError as e:
            field = e.field.replace("fl.clients", "partition.clients_per_domain")
            raise ConfigError(field, f"in domain {d}: {e.message}") from None
        parts.extend(np.sort(where[ix]) for ix in local)
    return parts


@dataclass
class NaturalParams(PartitionParams):
    """``partition=natural``: if fewer clients than natural ones are asked for, ``choose`` which (random, largest)."""

    choose: str = "random"  # with fewer fl.clients than natural ones: random (seeded) or largest

    def __post_init__(self) -> None:
        if self.choose not in ("random", "largest"):
            raise ConfigError("choose", f"invalid value {self.choose!r}; valid: random, largest")


@PARTITIONS.register("natural", NaturalParams)
def natural(inp: PartitionInput, n_clients: int, p: NaturalParams, rng: np.random.Generator) -> list[np.ndarray]:
    """The dataset's own clients (LEAF users, Synthetic devices); ``fl.clients`` of them, chosen by ``choose``."""
    if inp.natural is None:
        raise ConfigError(
            "partition.name",
            "natural needs a dataset with natural clients (shakespeare, emnist source=leaf, synthetic)",
        )
    have = len(inp.natural)
    if n_clients > have:
        raise ConfigError("fl.clients", f"{n_clients} clients but the dataset has only {have} natural clients")
    if p.choose == "largest":
        pick = np.sort(np.argsort([-len(c) for c in inp.natural], kind="stable")[:n_clients])
    else:
        pick = np.sort(rng.choice(have, n_clients, replace=False))
    return [np.sort(np.asarray(inp.natural[i], dtype=np.int64)) for i in pick]
