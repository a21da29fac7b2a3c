"""The Synthetic(alpha, beta) benchmark of FedProx (Li et al., MLSys 2020, Sec. 5.1): no files needed.

Device k draws a softmax-regression model W_k, b_k ~ N(u_k, 1) with u_k ~ N(0, alpha) and inputs
x ~ N(v_k, Sigma) with v_k ~ N(B_k, 1), B_k ~ N(0, beta), Sigma diagonal with Sigma_jj = j^-1.2;
labels are argmax(softmax(W_k x + b_k)). Device sizes follow a lognormal law. alpha controls how much
the local models differ, beta how much the local input distributions differ. Each sample keeps its
generating device as ``domain``; the devices are also offered as the natural partition.

Two readings (``data.variant``):

- ``paper`` (the default): N(0, alpha) and N(0, beta) read as variances, sizes lognormal(4, 2) + 50 capped at
  5,000 (fedrun's cap, neither the paper's nor the code's), a random 20% of each device held out (the paper's
  80/20 split).
- ``code``: litian96/FedProx data/synthetic_*/generate_synthetic.py as it runs: alpha and beta are the standard
  deviations of u_k and B_k (``np.random.normal(0, alpha, ...)``), sizes are not capped, each device's samples
  are shuffled by Python's ``random.shuffle`` and the first int(0.9 n) train (a 90/10 split). Its draws are made
  in the script's order from ``np.random.RandomState(seed)`` and ``random.Random(seed)``, so the data equal the
  script's output after ``np.random.seed(seed); random.seed(seed)`` (the script itself sets no seed). The data the
  FedProx experiments ran on (the JSON files committed beside the script) came from an unseeded run: the same
  distribution, not the same draws.
- ``pfedme``: CharlieDinh/pFedMe data/Synthetic/generate_synthetic_05_05.py (pFedMe, Dinh et al. NeurIPS 2020),
  the same script as ``code`` but for the device sizes, five times FedProx's: (lognormal(4, 2) + 50) * 5 (its line
  24); NUM_USER = 100 there (``data.devices=100``). That script seeds numpy itself (``np.random.seed(0)``, line 12),
  so with ``data.seed=0`` the devices' samples and labels are the authors' draws; its ``random.shuffle`` (line 103)
  is unseeded, so which 10% of a device is its test part is fedrun's (``random.Random(seed)``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from fedrun.config.registry import DATASETS, in_range, positive
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.standin import signature

# the held-out fraction of each variant: the paper's 80/20 split; the code's train_len = int(0.9 * num_samples)
TEST_FRACTION = {"paper": 0.2, "code": 0.1, "pfedme": 0.1}
# the code readings' device sizes: FedProx's lognormal(4, 2) + 50, times 5 in pFedMe's generate_synthetic_05_05.py
SIZE_FACTOR = {"code": 1, "pfedme": 5}
SIZE_CAP = 5000  # the paper variant's cap on a device's size (fedrun's, from before the code variant existed)


@dataclass
class SyntheticParams(DataParams):
    """``data=synthetic``: FedProx's Synthetic(alpha, beta) (Li et al. 2020, Sec. 5.1)."""

    # paper: Sec. 5.1 as written (alpha, beta variances, 80/20 split, sizes capped at 5,000); code: the authors'
    # generate_synthetic.py (alpha, beta standard deviations, 90/10 split, uncapped sizes, the script's draw order);
    # pfedme: pFedMe's generate_synthetic_05_05.py, the code reading with device sizes times 5
    variant: Literal["paper", "code", "pfedme"] = "paper"
    alpha: float = 1.0  # how much the devices' models differ (FedProx: Synthetic(1, 1))
    beta: float = 1.0  # how much the devices' inputs differ (FedProx: Synthetic(1, 1))
    devices: int = 30  # the natural clients (FedProx: 30)
    dim: int = 60  # input features (FedProx: 60)
    classes: int = 10  # classes (FedProx: 10)
    mean_size: float = 4.0  # lognormal mean of log device size (generate_synthetic.py: lognormal(4, 2))
    # of each device's samples, held out as the test set; None: the variant's (paper 0.2, code 0.1)
    test_fraction: float | None = None
    seed: int = 0  # draws the devices' data

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("alpha", self.alpha, allow_zero=True)
        positive("beta", self.beta, allow_zero=True)
        positive("devices", self.devices)
        positive("dim", self.dim)
        positive("classes", self.classes)
        in_range("test_fraction", self.test_fraction, 0.0, 1.0, lo_open=True, hi_open=True)

    @property
    def held_out(self) -> float:
        """The test fraction in effect: ``test_fraction``, else the variant's (:data:`TEST_FRACTION`)."""
        return TEST_FRACTION[self.variant] if self.test_fraction is None else self.test_fraction


def _sigma(dim: int) -> np.ndarray:
    """The diagonal of Sigma: Sigma_jj = j^-1.2 for j = 1..dim (Sec. 5.1)."""
    return np.arange(1, dim + 1, dtype=np.float64) ** -1.2


def paper_devices(p: SyntheticParams) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per device: inputs, labels and the test mask of the ``paper`` reading (alpha, beta variances; a random
    ``held_out`` part of each device is its test data). The draws are fedrun's own (``default_rng(seed)``)."""
    rng = np.random.default_rng(p.seed)
    sizes = (rng.lognormal(p.mean_size, 2.0, p.devices).astype(int) + 50).clip(max=SIZE_CAP)
    sigma = _sigma(p.dim)
    xs, ys = [], []
    for k in range(p.devices):
        u = rng.normal(0, np.sqrt(p.alpha))
        big_b = rng.normal(0, np.sqrt(p.beta))
        w = rng.normal(u, 1, (p.dim, p.classes))
        b = rng.normal(u, 1, p.classes)
        v = rng.normal(big_b, 1, p.dim)
        x = rng.normal(v, np.sqrt(sigma), (sizes[k], p.dim))
        xs.append(x)
        ys.append(np.argmax(x @ w + b, axis=1))
    tests = []
    for y in ys:
        mask = np.zeros(len(y), dtype=bool)
        mask[rng.choice(len(y), max(1, int(len(y) * p.held_out)), replace=False)] = True
        tests.append(mask)
    return xs, ys, tests


def _softmax_argmax(logits: np.ndarray) -> np.ndarray:
    """argmax of exp(z) / sum exp(z) per row, computed as generate_synthetic.py's ``softmax`` does (no max
    subtraction): a row whose exp overflows gets the label that script gives it (np.argmax's first NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ex = np.exp(logits)
        return np.argmax(ex / ex.sum(axis=1, keepdims=True), axis=1)


def code_devices(p: SyntheticParams) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per device: inputs, labels and the test mask of the ``code`` (and ``pfedme``) reading, drawn in
    generate_synthetic.py's order: sizes, every u_k (b_k's mean is u_k too), every B_k, every v_k, then per device
    W_k, b_k and its inputs; then per device a ``random.shuffle`` of its samples, the first int((1 - held_out) n) of
    which train. ``pfedme`` multiplies the sizes by 5 (:data:`SIZE_FACTOR`), nothing else."""
    rs = np.random.RandomState(p.seed)
    sizes = (rs.lognormal(p.mean_size, 2, p.devices).astype(int) + 50) * SIZE_FACTOR[p.variant]
    mean_w = rs.normal(0, p.alpha, p.devices)  # a standard deviation: N(0, alpha) of the paper, as the code reads it
    big_b = rs.normal(0, p.beta, p.devices)
    cov = np.diag(_sigma(p.dim))
    v = [rs.normal(big_b[k], 1, p.dim) for k in range(p.devices)]
    xs, ys = [], []
    for k in range(p.devices):
        w = rs.normal(mean_w[k], 1, (p.dim, p.classes))
        b = rs.normal(mean_w[k], 1, p.classes)
        x = rs.multivariate_normal(v[k], cov, sizes[k])
        xs.append(x)
        ys.append(_softmax_argmax(x @ w + b))
    shuffle = random.Random(p.seed)
    tests = []
    for k in range(p.devices):
        order = list(range(sizes[k]))
        shuffle.shuffle(order)  # the permutation random.shuffle applies to the script's zip(X, y) list
        xs[k], ys[k] = xs[k][order], ys[k][order]
        mask = np.zeros(sizes[k], dtype=bool)
        mask[int((1 - p.held_out) * sizes[k]) :] = True
        tests.append(mask)
    return xs, ys, tests


@DATASETS.register(
    "synthetic", SyntheticParams, signature=lambda p: signature("synthetic", p.classes, (p.dim,), p, inputs="features")
)
def load_synthetic(p: SyntheticParams) -> Dataset:
    xs, ys, tests = (paper_devices if p.variant == "paper" else code_devices)(p)
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(ys).astype(np.int64)
    d = np.concatenate([np.full(len(yk), k) for k, yk in enumerate(ys)])
    is_test = np.concatenate(tests)
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
