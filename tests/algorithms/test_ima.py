"""IMA: window 1 is the base method, the window output is the mean of the stored FMA models, schedules."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from fedrun.algorithms.base import RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.algorithms.fedgma import FedGMA, FedGMAParams
from fedrun.algorithms.fedopt import AdaptiveParams, FedAdam, FedAvgM, FedAvgMParams, FedYogi
from fedrun.algorithms.ima import IMA
from fedrun.config.schema import FLConfig, IMAConfig
from fedrun.core.errors import ConfigError
from fedrun.run.loop import run

W = torch.tensor([0.5, -1.0, 2.0])
WEIGHTS = torch.tensor([0.2, 0.8])


def uploads_at(r: int) -> dict:
    g = torch.Generator().manual_seed(100 + r)
    return {"params": {"w": torch.randn(2, 3, generator=g)}}


def info(r: int) -> RoundInfo:
    return RoundInfo(r, 2, torch.tensor([0, 1]), torch.tensor([1.0, 4.0]), torch.tensor([1, 1]), 0.1)


def rollout(algo, rounds: int) -> list[tuple[dict, dict, dict]]:  # noqa: ANN001
    """(params, state, diagnostics) after each round, from W with the same uploads for every algorithm."""
    params, state, out = {"w": W.clone()}, algo.server_init({"w": W.clone()}), []
    for r in range(rounds):
        params, state, diag = algo.aggregate(params, state, uploads_at(r), WEIGHTS, info(r))
        out.append(({"w": params["w"].clone()}, state, diag))
    return out


def test_window_one_equals_the_base_method() -> None:
    fl = FLConfig(rounds=8)
    # FedAvg (aggregate path), FedAvgM (server_update path, state kept), FedGMA (masked aggregate)
    for make in (
        lambda: FedAvg(None, fl, None),
        lambda: FedAvgM(FedAvgMParams(), fl, None),
        lambda: FedGMA(FedGMAParams(), fl, None),
    ):
        plain = rollout(make(), 8)
        wrapped = rollout(IMA(make(), IMAConfig(start=0.0, window=1)), 8)
        assert [d["ima_active"] for _, _, d in wrapped] == [0.0] + [1.0] * 7
        for (p, _, _), (q, _, _) in zip(plain, wrapped, strict=True):
            torch.testing.assert_close(p["w"], q["w"], rtol=0, atol=0)


def test_window_average_is_the_mean_of_the_stored_fma_models() -> None:
    fl = FLConfig(rounds=10)
    ima = IMA(FedAvg(None, fl, None), IMAConfig(start=0.5, window=3))  # t_s = 5
    out = rollout(ima, 10)
    # FedAvg's output does not depend on w^t, so the FMA of round r is the weighted mean of its uploads.
    fma = [(WEIGHTS[:, None] * uploads_at(r)["params"]["w"]).sum(0) for r in range(10)]
    for r, (p, _, diag) in enumerate(out):
        if r < 5:
            torch.testing.assert_close(p["w"], fma[r])
            assert diag["ima_active"] == 0.0
        else:
            torch.testing.assert_close(p["w"], torch.stack(fma[r - 2 : r + 1]).mean(0))
            assert diag["ima_active"] == 1.0
    stored = out[-1][1]["window"]["w"]
    assert sorted(stored.sum(1).tolist()) == pytest.approx(sorted(f.sum().item() for f in fma[7:]))


def fedima_adaptive_rollout(second, hp: AdaptiveParams, start: int, window: int, rounds: int) -> list[torch.Tensor]:
    """FedIMA's ``aggregator.py`` fedadam/fedyogi(+ima), transcribed: the caller's m, v are updated in place
    every round except t_s, whose step uses freshly zeroed local moments (the rebinding does not reach the
    caller); the window mean replaces the average once t >= W and t >= t_s."""
    w, m, v, stored, out = W.clone(), torch.zeros(3), torch.zeros(3), [], []
    for t in range(rounds):
        avg = (WEIGHTS[:, None] * uploads_at(t)["params"]["w"]).sum(0)
        stored = (stored + [avg])[-window:]
        if t >= window and t >= start:
            avg = torch.stack(stored).mean(0)
        d = avg - w
        mm, vv = (torch.zeros(3), torch.zeros(3)) if (t == start and t >= window) else (m, v)
        mm = hp.beta1 * mm + (1 - hp.beta1) * d
        vv = second(vv, d * d)
        if not (t == start and t >= window):
            m, v = mm, vv
        w = w + hp.server_lr * mm / (vv.sqrt() + hp.tau)
        out.append(w)
    return out


def test_fedadam_fedyogi_ima_reset_lasts_one_round_as_in_fedima_code() -> None:
    fl, hp = FLConfig(rounds=8), AdaptiveParams()
    adam = lambda v, d2: hp.beta2 * v + (1 - hp.beta2) * d2  # noqa: E731
    yogi = lambda v, d2: v - (1 - hp.beta2) * d2 * torch.sign(v - d2)  # noqa: E731
    for cls, second in ((FedAdam, adam), (FedYogi, yogi)):
        out = rollout(IMA(cls(hp, fl, None), IMAConfig(start=0.5, window=2)), 8)  # t_s = 4 >= W
        ref = fedima_adaptive_rollout(second, hp, start=4, window=2, rounds=8)
        for r in range(8):  # rounds 5-7 (after t_s) differ from a reset that persists
            torch.testing.assert_close(out[r][0]["w"], ref[r])
    # t_s < W: the code's reset sits in the t >= W branch, so it never happens
    out = rollout(IMA(FedAdam(hp, fl, None), IMAConfig(start=0.125, window=2)), 8)  # t_s = 1
    ref = fedima_adaptive_rollout(adam, hp, start=1, window=2, rounds=8)
    for r in range(8):
        torch.testing.assert_close(out[r][0]["w"], ref[r])


def test_lr_schedules_after_the_start_round() -> None:
    fl = FLConfig(rounds=100, lr=0.1, lr_decay=0.99, local_epochs=3)
    lr = lambda t: 0.1 * 0.99**t  # noqa: E731 - the configured schedule
    ts = 75

    def sched(name: str, t: int) -> float:
        return IMA(FedAvg(None, fl, None), IMAConfig(schedule=name, period=20)).local_lr(t, lr(t))

    assert sched("exd", 10) == pytest.approx(lr(10))
    assert sched("exd", 80) == pytest.approx(0.1 * 0.99**ts * 0.97**5)
    assert sched("nad", 80) == pytest.approx(lr(80))
    assert sched("clr", 80) == 5e-5
    assert sched("cd", ts) == pytest.approx(lr(ts)) and sched("cd", ts + 10) == pytest.approx(5e-5)
    assert sched("sd", ts + 19) == pytest.approx(lr(ts)) and sched("sd", ts + 20) == pytest.approx(lr(ts) / 2)
    ima = IMA(FedAvg(None, fl, None), IMAConfig(schedule="ed", period=10))
    assert [ima.round_fl(t).local_epochs for t in (0, 75, 85, 95, 99, 80)] == [3, 3, 2, 1, 1, 3]
    assert fl.local_epochs == 3  # the run's settings are not mutated: a per-round value the engines read
    with pytest.raises(ConfigError, match="ima.schedule"):
        IMA(FedAvg(None, FLConfig(local_steps=5), None), IMAConfig(schedule="ed"))


def test_ima_on_a_real_run_logs_and_config_validation(make_spec, tmp_path: Path) -> None:  # noqa: ANN001
    spec = make_spec(
        "algorithm=fedprox",
        "experiment=smoke",
        "data.max_train_samples=600",
        "data.max_test_samples=300",
        "fl.rounds=4",
        "fl.clients=4",
        "fl.batch_size=300",
        "ima.enabled=true",
        "ima.start=0.5",
        "ima.window=2",
    )
    (tmp_path / "run").mkdir()
    summary = run(spec, tmp_path / "run")
    assert summary["status"] == "completed" and summary["test_acc_final"] > 0.3
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert [float(r["ima_active"]) for r in rows] == [0.0, 0.0, 1.0, 1.0]
    assert all(float(r["aggregate_seconds"]) >= 0 for r in rows)
    assert float(rows[-1]["lr"]) == pytest.approx(spec.fl.lr * 0.97)  # exd: one round after t_s = 2
    with pytest.raises(ConfigError, match="ima.schedule"):
        make_spec("ima.schedule=linear")
    with pytest.raises(ConfigError, match="ima.window"):
        make_spec("ima.window=0")


SERVER_METHODS = ["fedlaw", "fedlaw_swa", "fedlaw_gamma", "fedlaw_lambda", "fedavgm", "fedadam", "fedyogi"]
SERVER_METHODS += ["fedadagrad", "fedopt", "fedgma", "feddf", "fedbe", "serverft", "fedprox"]


@pytest.mark.parametrize("name", SERVER_METHODS)
def test_every_method_composes_with_its_paper_defaults_and_ima(make_spec, name: str) -> None:  # noqa: ANN001
    spec = make_spec(f"algorithm={name}", "ima.enabled=true")
    assert spec.ima == IMAConfig(enabled=True) and spec.algorithm.name == name
    algo = spec.algorithm.obj(spec.algorithm.params, spec.fl, None)
    ima = IMA(algo, spec.ima)
    state = ima.server_init({"w": W})
    assert state["inner"].keys() == algo.server_init({"w": W}).keys()
    assert state["window"]["w"].shape == (5, 3) and ima.start_round == int(0.75 * spec.fl.rounds)
    assert ima.hp is algo.hp and ima.local_lr(0, 0.1) == algo.local_lr(0, 0.1)
