"""Fixed global weight shrinking (FedLAW Sec. 4.1): the aggregate is gamma x FedAvg's; gamma = 1 is FedAvg."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.optim.swa_utils import update_bn

from fedrun.algorithms.base import RoundInfo, average_buffers
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedavg_gws import FedAvgGWS
from fedrun.core.errors import ConfigError
from fedrun.core.tree import stack
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS

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


@pytest.mark.parametrize("gamma", ["0.9", "1.0"])
def test_bn_model_gets_statistics_re_estimated_on_the_proxy_set_for_every_gamma(
    make_spec, tmp_path, monkeypatch, gamma: str
) -> None:
    # gamma * sum_i p_i w_i normalised with the clients' statistics (those of the unshrunk models) is
    # mis-normalised in every layer; the server re-estimates them on the proxy set, and does so for gamma = 1
    # too, so that a table across gammas compares shrinking alone (issue 24 point 3: gamma = 1 kept the
    # clients' mean statistics while gamma < 1 re-estimated them)
    from test_fedlaw import BN_RUN, client_mean, one_bn_round

    gws = ("algorithm=fedavg_gws", f"algorithm.gamma={gamma}")
    seen, buffers = one_bn_round(make_spec, tmp_path, monkeypatch, FedAvgGWS, *gws)
    algo = seen["algo"]
    module = copy.deepcopy(algo.model.module)
    module.load_state_dict({**{k: float(gamma) * v for k, v in client_mean(seen).items()}, **seen["buffers"]})
    proxy = algo.setup_env.data.batch(torch.arange(len(algo.proxy)), algo.proxy.split)["x"]  # 100 <= one batch
    update_bn([proxy], module)  # torch's own re-estimation: one pass, cumulative average
    for k, v in module.state_dict().items():
        if k in buffers:
            torch.testing.assert_close(buffers[k], v)
    mean = average_buffers(seen["uploads"]["buffers"], seen["weights"])
    assert not torch.allclose(buffers["stem.1.running_var"], mean["stem.1.running_var"])
    # a BN model without a proxy set is refused, whatever gamma
    with pytest.raises(ConfigError, match="proxy.per_class") as e:
        build_experiment(make_spec(*BN_RUN, *gws, "proxy.per_class=0"))
    assert "\n" not in str(e.value)
