"""``data=synthetic data.variant=pfedme``: the data of pFedMe's generate_synthetic_05_05.py (CharlieDinh/pFedMe,
data/Synthetic/), checked against a re-implementation of that script's formulas as its text states them:

- line 12: ``np.random.seed(0)``; line 24: n_i = (int(lognormal(4, 2)) + 50) * 5 for NUM_USER = 100 devices;
- lines 33-35: u_i ~ N(0, alpha) (b_i's mean is u_i too, ``mean_b = mean_W``), B_i ~ N(0, beta), standard deviations;
- lines 38-47: Sigma_jj = j^-1.2, v_i ~ N(B_i, 1) per feature (the non-iid branch), drawn for every device first;
- lines 56-68: per device W_i ~ N(u_i, 1) [60 x 10], b_i ~ N(u_i, 1), x ~ N(v_i, Sigma), y = argmax softmax(xW + b);
- lines 105-106: each device shuffled, its first int(0.9 n_i) samples train, the rest test.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedrun.data.sources.synthetic import SyntheticParams, load_synthetic


def authors_devices(devices: int, alpha: float, beta: float, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(x, y) of every device, in the order the script draws them from numpy's global generator."""
    rng = np.random.RandomState(seed)
    dim, classes = 60, 10
    n = (rng.lognormal(4, 2, devices).astype(int) + 50) * 5
    u = rng.normal(0, alpha, devices)
    big_b = rng.normal(0, beta, devices)
    v = np.stack([rng.normal(big_b[i], 1, dim) for i in range(devices)])
    cov = np.diag(np.array([(j + 1) ** -1.2 for j in range(dim)]))
    out = []
    for i in range(devices):
        w = rng.normal(u[i], 1, (dim, classes))
        b = rng.normal(u[i], 1, classes)
        x = rng.multivariate_normal(v[i], cov, n[i])
        logits = x @ w + b
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        out.append((x, np.argmax(p, axis=1)))
    return out


def per_device(d, devices: int) -> list[tuple[np.ndarray, np.ndarray, int]]:  # noqa: ANN001
    """(x, y, train count) of every device, train and test samples together, rows sorted."""
    out = []
    for k in range(devices):
        tr, te = d.train.domain.numpy() == k, d.test.domain.numpy() == k
        x = np.concatenate([d.train.x.numpy()[tr], d.test.x.numpy()[te]])
        y = np.concatenate([d.train.y.numpy()[tr], d.test.y.numpy()[te]])
        order = np.lexsort(x.T[::-1])
        out.append((x[order], y[order], int(tr.sum())))
    return out


@pytest.mark.parametrize(("alpha", "beta"), [(0.5, 0.5), (1.0, 0.0)])
def test_every_device_holds_the_scripts_samples_and_labels(alpha: float, beta: float) -> None:
    devices = 6
    d = load_synthetic(SyntheticParams(variant="pfedme", alpha=alpha, beta=beta, devices=devices, seed=0))
    ref = authors_devices(devices, alpha, beta)
    for (x, y, n_train), (rx, ry) in zip(per_device(d, devices), ref, strict=True):
        order = np.lexsort(rx.astype(np.float32).T[::-1])
        np.testing.assert_array_equal(x, rx.astype(np.float32)[order])
        np.testing.assert_array_equal(y, ry[order])
        assert n_train == int(0.9 * len(ry))  # the script's train_len = int(0.9 * num_samples)


def test_one_hundred_devices_five_times_fedprox_sizes_split_90_10() -> None:
    d = load_synthetic(SyntheticParams(variant="pfedme", alpha=0.5, beta=0.5, devices=100, seed=0))
    train = np.bincount(d.train.domain.numpy(), minlength=100)
    n = train + np.bincount(d.test.domain.numpy(), minlength=100)
    expected = (np.random.RandomState(0).lognormal(4, 2, 100).astype(int) + 50) * 5
    np.testing.assert_array_equal(n, expected)
    assert n.sum() == 205_795 and n.min() == 250  # the authors' seed-0 data: 100 devices, at least (0 + 50) * 5
    np.testing.assert_array_equal(train, (0.9 * n).astype(int))
    assert [len(c) for c in d.natural_clients] == train.tolist()
    # the statistics the script's law gives: a device's mean input spreads around B_i ~ N(0, 0.5) plus N(0, 1/60)
    means = np.stack([d.train.x.numpy()[d.train.domain.numpy() == k].mean(0).mean() for k in range(100)])
    assert 0.35 < means.std() < 0.7


def test_code_variant_draws_the_same_devices_at_a_fifth_of_the_size() -> None:
    code = load_synthetic(SyntheticParams(variant="code", devices=5, seed=2))
    pfedme = load_synthetic(SyntheticParams(variant="pfedme", devices=5, seed=2))
    n_code = np.bincount(code.train.domain.numpy(), minlength=5) + np.bincount(code.test.domain.numpy(), minlength=5)
    n_pf = np.bincount(pfedme.train.domain.numpy(), minlength=5) + np.bincount(pfedme.test.domain.numpy(), minlength=5)
    np.testing.assert_array_equal(n_pf, 5 * n_code)
