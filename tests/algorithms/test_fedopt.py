"""FedOpt family: hand-computed Adam/Yogi/Adagrad steps, server SGD at lr 1 is FedAvg, FedAvgM, IMA reset."""

from __future__ import annotations

import math

import pytest
import torch

from fedrun.algorithms.base import RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedopt import (
    AdagradParams,
    AdaptiveParams,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedAvgMParams,
    FedYogi,
    ServerSGD,
    ServerSGDParams,
)
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError

W0 = [1.0, -2.0]
ROUNDS = [  # client models per round (two clients, weights 0.25 / 0.75)
    [[1.4, -2.2], [0.6, -1.0]],
    [[0.2, -1.5], [1.0, -0.7]],
]
P = [0.25, 0.75]
INFO = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 3.0]), torch.tensor([1, 1]), 0.1)


def run(algo, rounds: int = 2) -> tuple[list[float], dict]:  # noqa: ANN001
    params = {"w": torch.tensor(W0, dtype=torch.float64)}
    state = algo.server_init(params)
    for r in range(rounds):
        uploads = {"params": {"w": torch.tensor(ROUNDS[r], dtype=torch.float64)}}
        params, state, _ = algo.aggregate(params, state, uploads, torch.tensor(P, dtype=torch.float64), INFO)
    return params["w"].tolist(), state


def hand(kind: str, eta: float, b1: float, b2: float, tau: float) -> list[float]:
    """Reddi et al. Alg. 2 in plain Python floats, coordinate by coordinate."""
    out = []
    for j in range(2):
        w, m, v = W0[j], 0.0, 0.0
        for r in range(2):
            avg = P[0] * ROUNDS[r][0][j] + P[1] * ROUNDS[r][1][j]
            d = avg - w
            m = b1 * m + (1 - b1) * d
            if kind == "adagrad":
                v = v + d * d
            elif kind == "adam":
                v = b2 * v + (1 - b2) * d * d
            else:
                v = v - (1 - b2) * d * d * math.copysign(1.0, v - d * d) if v != d * d else v
            w = w + eta * m / (math.sqrt(v) + tau)
        out.append(w)
    return out


@pytest.mark.parametrize(
    ("cls", "params", "kind"),
    [
        (FedAdam, AdaptiveParams(), "adam"),
        (FedYogi, AdaptiveParams(), "yogi"),
        (FedAdagrad, AdagradParams(), "adagrad"),
    ],
)
def test_adaptive_matches_hand_computed_steps(cls, params, kind: str) -> None:  # noqa: ANN001
    got, state = run(cls(params, FLConfig(), None))
    want = hand(kind, params.server_lr, params.beta1, params.beta2, params.tau)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert set(state) == {"m", "v"} and float(state["v"]["w"].abs().sum()) > 0


def test_nondefault_hyperparameters_are_used() -> None:
    p = AdaptiveParams(server_lr=0.5, beta1=0.5, beta2=0.9, tau=0.1)
    got, _ = run(FedAdam(p, FLConfig(), None))
    assert got == pytest.approx(hand("adam", 0.5, 0.5, 0.9, 0.1), rel=1e-9)


def test_server_sgd_lr_one_is_fedavg_and_lr_scales_the_step() -> None:
    got, _ = run(ServerSGD(ServerSGDParams(server_lr=1.0), FLConfig(), None))
    ref, _ = run(FedAvg(None, FLConfig(), None))
    assert got == pytest.approx(ref, abs=1e-12)
    got15, _ = run(ServerSGD(ServerSGDParams(), FLConfig(), None), rounds=1)  # default 1.5 (FedCos)
    avg = [P[0] * ROUNDS[0][0][j] + P[1] * ROUNDS[0][1][j] for j in range(2)]
    assert got15 == pytest.approx([W0[j] + 1.5 * (avg[j] - W0[j]) for j in range(2)])


def test_fedavgm_standard_and_cos_forms() -> None:
    got, _ = run(FedAvgM(FedAvgMParams(server_lr=1.0, beta=0.9), FLConfig(), None))
    cos, _ = run(FedAvgM(FedAvgMParams(beta=0.5, form="cos"), FLConfig(), None))
    for j in range(2):
        w, v, wc, vc = W0[j], 0.0, W0[j], None
        for r in range(2):
            d = P[0] * ROUNDS[r][0][j] + P[1] * ROUNDS[r][1][j] - w
            v = 0.9 * v + d
            w = w + v
            dc = P[0] * ROUNDS[r][0][j] + P[1] * ROUNDS[r][1][j] - wc
            vc = dc if vc is None else 0.5 * vc + 0.5 * dc
            wc = wc + vc
        assert got[j] == pytest.approx(w) and cos[j] == pytest.approx(wc)


def test_ima_reset_zeroes_adam_and_yogi_moments_only() -> None:
    for cls, p, reset in (
        (FedAdam, AdaptiveParams(), True),
        (FedYogi, AdaptiveParams(), True),
        (FedAdagrad, AdagradParams(), False),
    ):
        algo = cls(p, FLConfig(), None)
        _, state = run(algo)
        after = algo.ima_reset(state)
        assert (float(after["v"]["w"].abs().sum()) == 0) == reset


def test_bad_values_raise_config_errors(make_spec) -> None:  # noqa: ANN001 - fixture
    with pytest.raises(ConfigError, match="algorithm.beta1"):
        make_spec("algorithm=fedadam", "algorithm.beta1=1.5")
    with pytest.raises(ConfigError, match="algorithm.server_lr"):
        make_spec("algorithm=fedopt", "algorithm.server_lr=0")
    assert make_spec("algorithm=fedyogi").algorithm.params.tau == 1e-3
