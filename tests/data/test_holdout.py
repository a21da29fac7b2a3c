"""Client hold-out (``data.client_valid_ratio``, FedLAW code 0.3) and input scaling (``data.normalize``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.data.holdout import hold_out
from fedrun.run.experiment import build_experiment

SMALL = ("data.max_train_samples=600", "data.max_test_samples=100", "fl.clients=6", "hardware.threads=1")


def test_hold_out_keeps_n_minus_int_ratio_n_of_each_client_seeded() -> None:
    rng = np.random.default_rng(0)
    parts = [np.sort(rng.choice(10_000, n, replace=False)) for n in (0, 1, 3, 4, 10, 333)]
    kept = hold_out(parts, 0.3, seed=5)
    # nodes.py train_val_split: idxs_test = idxs[:int(0.3 * n)], the client trains on the rest
    assert [len(k) for k in kept] == [n - int(0.3 * n) for n in (0, 1, 3, 4, 10, 333)] == [0, 1, 3, 3, 7, 234]
    for p, k in zip(parts, kept, strict=True):
        assert set(k) <= set(p) and np.all(np.diff(k) > 0)
    assert all(np.array_equal(a, b) for a, b in zip(kept, hold_out(parts, 0.3, seed=5), strict=True))
    assert not np.array_equal(kept[-1], hold_out(parts, 0.3, seed=6)[-1])
    assert hold_out(parts, 0.0, seed=5) is parts


def test_runner_trains_clients_on_the_held_in_part(make_spec: Callable[..., RunSpec]) -> None:
    full = build_experiment(make_spec(*SMALL))
    held = build_experiment(make_spec(*SMALL, "data.client_valid_ratio=0.3"))
    n = np.array([len(p) for p in full.parts])
    assert [len(p) for p in held.parts] == n.tolist()  # the partition (partition.csv) is the whole of it
    assert held.fed.sizes.tolist() == (n - (0.3 * n).astype(int)).tolist()
    for c, p in zip(held.fed.clients, held.parts, strict=True):
        assert set(c.tolist()) <= set(p.tolist())


@pytest.mark.parametrize("bad", ["-0.1", "1.0"])
def test_client_valid_ratio_range(make_spec: Callable[..., RunSpec], bad: str) -> None:
    with pytest.raises(ConfigError, match="client_valid_ratio"):
        make_spec(f"data.client_valid_ratio={bad}")


@pytest.mark.parametrize(("mode", "shift", "scale"), [("none", 0.0, 1.0), ("half", 0.5, 0.5)])
def test_normalize_scales_inputs_as_the_authors_transforms(
    make_spec: Callable[..., RunSpec], mode: str, shift: float, scale: float
) -> None:
    exp = build_experiment(make_spec(*SMALL, f"data.normalize={mode}"))
    idx = torch.arange(5)
    raw = exp.fed.train.x[:5].float() / 255.0  # transforms.ToTensor()
    torch.testing.assert_close(exp.fed.batch(idx)["x"], (raw - shift) / scale)  # then Normalize(shift, scale)
    default = build_experiment(make_spec(*SMALL))
    mean, std = default.data.mean[0], default.data.std[0]
    torch.testing.assert_close(default.fed.batch(idx)["x"], (raw - mean) / std)


def test_normalize_rejects_unknown_modes(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError, match="normalize"):
        make_spec("data.normalize=zscore")
