"""The Synthetic(alpha, beta) benchmark of FedProx (Li et al., 2020, Sec. 5.1): no files needed.

Device k draws a softmax-regression model W_k, b_k ~ N(u_k, 1) with u_k ~ N(0, alpha) and inputs
x ~ N(v_k, Sigma) with v_k ~ N(B_k, 1), B_k ~ N(0, beta), Sigma diagonal with Sigma_jj = j^-1.2;
labels are argmax(softmax(W_k x + b_k)). Device sizes follow a lognormal law. alpha controls how much
the local models differ, beta how much the local input distributions differ. Each sample keeps its
generating device as ``domain``; the devices are also offered as the natural partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.config.registry import DATASETS, positive
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.standin import signature


@dataclass
class SyntheticParams(DataParams):
    """``data=synthetic``: FedProx's Synthetic(alpha, beta) (Li et al. 2020, Sec. 5.1)."""

    alpha: float = 1.0  # how much the devices' models differ (FedProx: Synthetic(1, 1))
    beta: float = 1.0  # how much the devices' inputs differ (FedProx: Synthetic(1, 1))
    devices: int = 30  # the natural clients (FedProx: 30)
    dim: int = 60  # input features (FedProx: 60)
    classes: int = 10  # classes (FedProx: 10)
    mean_size: float = 4.0  # lognormal mean of log device size
    test_fraction: float = 0.2  # of each device's samples, held out as the test set
    seed: int = 0  # draws the devices' data

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("alpha", self.alpha, allow_zero=True)
        positive("beta", self.beta, allow_zero=True)
        positive("devices", self.devices)
        positive("dim", self.dim)
        positive("classes", self.classes)


@DATASETS.register(
    "synthetic", SyntheticParams, signature=lambda p: signature("synthetic", p.classes, (p.dim,), p, inputs="features")
)
def load_synthetic(p: SyntheticParams) -> Dataset:
    rng = np.random.default_rng(p.seed)
    sizes = (rng.lognormal(p.mean_size, 2.0, p.devices).astype(int) + 50).clip(max=5000)
    sigma = np.arange(1, p.dim + 1, dtype=np.float64) ** -1.2
    xs, ys, dev = [], [], []
    for k in range(p.devices):
        u = rng.normal(0, np.sqrt(p.alpha))
        big_b = rng.normal(0, np.sqrt(p.beta))
        w = rng.normal(u, 1, (p.dim, p.classes))
        b = rng.normal(u, 1, p.classes)
        v = rng.normal(big_b, 1, p.dim)
        x = rng.normal(v, np.sqrt(sigma), (sizes[k], p.dim))
        y = np.argmax(x @ w + b, axis=1)
        xs.append(x)
        ys.append(y)
        dev.append(np.full(sizes[k], k))
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(ys).astype(np.int64)
    d = np.concatenate(dev)
    is_test = np.zeros(len(y), dtype=bool)
    for k in range(p.devices):
        idx = np.flatnonzero(d == k)
        is_test[rng.choice(idx, max(1, int(len(idx) * p.test_fraction)), replace=False)] = True
    tr, te = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    mk = lambda i: Split(torch.from_numpy(x[i]), torch.from_numpy(y[i]), domain=torch.from_numpy(d[i]))  # noqa: E731
    natural = [np.flatnonzero(d[tr] == k) for k in range(p.devices)]
    return Dataset(
        "synthetic",
        mk(tr),
        mk(te),
        p.classes,
        (p.dim,),
        natural_clients=natural,
        domain_names=[f"device{k}" for k in range(p.devices)],
    )
