"""Fixed global weight shrinking (FedLAW Sec. 4.1): the aggregate is gamma x FedAvg's; gamma = 1 is FedAvg."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrun.algorithms.base import RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.errors import ConfigError
from fedrun.outputs import TIMING_COLUMNS
from fedrun.runner import build_experiment, run
from fedrun.tree import stack

SMALL = (
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "hardware.threads=1",
)


def test_aggregate_is_gamma_times_fedavg(make_spec) -> None:
    exp = build_experiment(make_spec(*SMALL, "algorithm=fedavg_gws", "algorithm.gamma=0.93"))
    w = exp.model.init_params()
    torch.manual_seed(0)
    uploads = {"params": stack([{k: v + 0.1 * torch.randn_like(v) for k, v in w.items()} for _ in range(3)])}
    weights = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    info = RoundInfo(0, 3, torch.arange(3), torch.tensor([5.0, 2.0, 3.0]), torch.tensor([1, 1, 1]), 0.1)
    new, _, diag = exp.algorithm.aggregate(w, {}, uploads, weights, info)
    avg, _, _ = FedAvg(exp.algorithm.hp, exp.spec.fl, exp.model).aggregate(w, {}, uploads, weights, info)
    assert set(new) == set(w) and diag["gamma"] == 0.93
    for k in w:  # every parameter, normalisation or not, is scaled
        torch.testing.assert_close(new[k], 0.93 * avg[k], rtol=0, atol=0)
        assert not torch.allclose(new[k], avg[k])


def test_gamma_one_is_fedavg_bit_for_bit(make_spec, tmp_path: Path) -> None:
    out = {}
    for name in ("fedavg", "fedavg_gws"):
        (tmp_path / name).mkdir()
        run(make_spec(*SMALL, f"algorithm={name}", "fl.rounds=2", "fl.momentum=0.9"), tmp_path / name)
        out[name] = pd.read_csv(tmp_path / name / "metrics.csv").drop(columns=list(TIMING_COLUMNS))
    assert out["fedavg_gws"].pop("gamma").eq(1.0).all()
    pd.testing.assert_frame_equal(out["fedavg_gws"], out["fedavg"], check_exact=True)


@pytest.mark.parametrize("gamma", ["0", "-0.5"])
def test_non_positive_gamma_is_refused(make_spec, gamma: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_spec("algorithm=fedavg_gws", f"algorithm.gamma={gamma}")
    assert e.value.field == "algorithm.gamma" and "\n" not in str(e.value)
