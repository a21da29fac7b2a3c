"""PFLlib's label-skew partitions (TsingZ0/PFLlib ``dataset/utils/dataset_utils.py``, ``separate_data``).

PFLlib's benchmark (``docs/benchmark.html``) deals the merged training and test sets of a dataset out to 20
clients with one of two schemes, drawn from NumPy's global legacy generator seeded once per dataset
(``generate_FashionMNIST.py``: ``np.random.seed(1)``), so its three trials per method share one partition:

- ``pat`` (pathological): class by class, the first ceil(N / C x k) clients that still lack a class (k classes
  each, ``class_per_client``) share it; unbalanced, the first of them draw their counts uniformly from
  [max(n_c / m / 10, least / C), n_c / m) with ``randint`` and the last takes the rest (balanced: n_c / m each,
  the last the rest);
- ``dir`` (practical): per class a shuffle and a Dir(alpha) draw over the clients, clients already holding N / n of
  the samples getting no share, cut at floor(cumsum x n_c); the whole draw repeated until every client holds
  ``least`` samples.

``least`` = int(min(batch_size / (1 - train_ratio), n / N / 2)): PFLlib guarantees a batch of local test samples
(40 for batch 10 and train ratio 0.75). With ``seed`` set the draws are those of ``numpy.random.RandomState(seed)``
in PFLlib's order, so the clients hold the samples PFLlib's generator gives them (given the samples in its order:
the training set, then the test set, ``data.merge_test``); ``seed: null`` draws from the run's seed instead.
The 75/25 split of each client's samples that PFLlib then makes with scikit-learn's ``train_test_split`` (on the
same generator) is fedrun's ``eval.local_test=split``: the same ratio, another draw (docs/reproducing.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedrun.config.registry import PARTITIONS, in_range, positive
from fedrun.core.errors import ConfigError
from fedrun.data.partitions.base import PartitionInput, PartitionParams

SCHEMES = ("pat", "dir")


@dataclass
class PFLlibParams(PartitionParams):
    """``partition=pfllib``: PFLlib's ``separate_data`` (its benchmark's FMNIST settings by default)."""

    scheme: str = "pat"  # pat (pathological, k classes per client) | dir (Dirichlet label skew)
    class_per_client: int = 2  # pat: classes per client (generate_FashionMNIST.py: 2)
    alpha: float = 0.1  # dir: the Dirichlet concentration (dataset_utils.py: 0.1)
    balance: bool = False  # pat: equal counts per client and class (the benchmark: "varying numbers of samples")
    batch_size: int = 10  # sets the fewest samples a client holds, with train_ratio (dataset_utils.py: 10)
    train_ratio: float = 0.75  # the share of a client's samples it trains on (dataset_utils.py: 0.75)
    seed: int | None = 1  # the legacy generator's seed (generate_FashionMNIST.py: 1); null: the run's seed

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError("scheme", f"invalid value {self.scheme!r}; valid: {', '.join(SCHEMES)}")
        positive("class_per_client", self.class_per_client)
        positive("alpha", self.alpha)
        positive("batch_size", self.batch_size)
        in_range("train_ratio", self.train_ratio, 0.0, 1.0, lo_open=True, hi_open=True)
        positive("seed", self.seed, allow_zero=True)


def least_samples(n: int, n_clients: int, p: PFLlibParams) -> int:
    """The fewest samples a client may hold: a batch of local test samples, or half an equal share if smaller."""
    return int(min(p.batch_size / (1 - p.train_ratio), n / n_clients / 2))


def _pathological(
    labels: np.ndarray, num_classes: int, n_clients: int, p: PFLlibParams, rs: np.random.RandomState
) -> list[list[np.ndarray]]:
    least = least_samples(len(labels), n_clients, p)
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    slots = [p.class_per_client] * n_clients  # classes each client still takes
    share = math.ceil(n_clients / num_classes * p.class_per_client)  # clients per class
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for idx_c in by_class:
        takers = [i for i in range(n_clients) if slots[i] > 0][:share]
        if not takers:
            break
        per = len(idx_c) / len(takers)
        if p.balance:
            counts = [int(per)] * (len(takers) - 1)
        else:  # PFLlib passes the float bounds, which randint truncates: int() draws the same stream
            counts = rs.randint(int(max(per / 10, least / num_classes)), int(per), len(takers) - 1).tolist()
        counts.append(len(idx_c) - sum(counts))
        start = 0
        for i, k in zip(takers, counts, strict=True):
            parts[i].append(idx_c[start : start + k])
            start += k
            slots[i] -= 1
    return parts


def _dirichlet(
    labels: np.ndarray, num_classes: int, n_clients: int, p: PFLlibParams, rs: np.random.RandomState
) -> list[list[np.ndarray]]:
    n, least = len(labels), least_samples(len(labels), n_clients, p)
    for _ in range(10_000):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        sizes = np.zeros(n_clients, dtype=np.int64)
        for c in range(num_classes):
            idx_c = np.flatnonzero(labels == c)
            rs.shuffle(idx_c)
            prop = rs.dirichlet(np.repeat(p.alpha, n_clients)) * (sizes < n / n_clients)
            if prop.sum() == 0:
                raise ConfigError("partition.alpha", f"Dir({p.alpha}) gave class {c} to no client with room")
            cuts = (np.cumsum(prop / prop.sum()) * len(idx_c)).astype(int)[:-1]
            for i, chunk in enumerate(np.split(idx_c, cuts)):
                parts[i].append(chunk)
                sizes[i] += len(chunk)
        if sizes.min() >= least:
            return parts
    raise ConfigError(
        "partition.alpha",
        f"Dir({p.alpha}) left a client below {least} samples in 10000 draws; valid: a larger partition.alpha or"
        " fewer clients",
    )


@PARTITIONS.register("pfllib", PFLlibParams)
def pfllib(inp: PartitionInput, n_clients: int, p: PFLlibParams, rng: np.random.Generator) -> list[np.ndarray]:
    """PFLlib's ``pat`` or ``dir`` split of the samples over ``n_clients`` (module docstring)."""
    rs = np.random.RandomState(p.seed if p.seed is not None else int(rng.integers(2**32)))
    labels = np.asarray(inp.labels, dtype=np.int64)
    scheme = _pathological if p.scheme == "pat" else _dirichlet
    parts = scheme(labels, inp.num_classes, n_clients, p, rs)
    return [np.sort(np.concatenate(c)) if c else np.zeros(0, np.int64) for c in parts]
