"""``engine=auto`` decides by measurement and caches; the runner builds the configured engine end to end."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.core.tree import leaves
from fedrun.engines import auto, auto_budget
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.models.base import FunctionalModel
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run

TINY = (
    "hardware.engine=auto",
    "data.max_train_samples=300",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.batch_size=20",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.threads=1",
)


def test_auto_measures_once_then_reads_the_cache(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*TINY, "hardware.engine=sequential")
    exp = build_experiment(spec)
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto_budget, "BUDGET", float("inf"))  # TINY is too small to time otherwise
    choice = auto.choose(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, str(tmp_path))
    assert choice["reason"] == "measured" and choice["how"] == "measured" and choice["probe_seconds"] > 0
    assert choice["engine"] == ("vectorised" if choice["vectorised_s"] < choice["sequential_s"] else "sequential")
    assert choice["vectorised_s"] > 0 and choice["sequential_s"] > 0
    stored = json.loads((tmp_path / "engine-auto.json").read_text())
    assert [v["engine"] for v in stored.values()] == [choice["engine"]]

    # a new process (empty memory cache) reads the file instead of measuring again
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("measured although cached"))
    again = auto.choose(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, str(tmp_path))
    assert again["reason"] == "cached measurement" and again["engine"] == choice["engine"]
    assert again["how"] == "cache"


def test_auto_key_separates_what_decides_speed(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*TINY)
    exp = build_experiment(spec)
    k = auto.probe_key(spec.hardware, exp.algorithm, exp.fed, spec.fl, 4)
    assert k != auto.probe_key(spec.hardware, exp.algorithm, exp.fed, spec.fl, 8)
    other = build_experiment(make_spec(*TINY, "model.hidden=[32]"))
    assert k != auto.probe_key(spec.hardware, other.algorithm, other.fed, spec.fl, 4)


def test_auto_uses_sequential_for_batchnorm_models_without_measuring(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*TINY)
    exp = build_experiment(spec)
    bn = FunctionalModel(nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.BatchNorm1d(8), nn.Linear(8, 10)))
    algo = type(exp.algorithm)(exp.algorithm.hp, spec.fl, bn)
    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("a BatchNorm model cannot be vmapped"))
    engine = auto.EngineFactory(spec.hardware, None)(algo, exp.fed, spec.fl, spec.seed)
    assert isinstance(engine, SequentialEngine)
    assert "buffers" in engine.selection["reason"]


def test_forced_engines_and_hardware_options_reach_the_engine(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*TINY, "hardware.engine=vectorised", "hardware.chunk=3"))
    assert isinstance(exp.engine, VectorisedEngine) and exp.engine.chunk == 3
    assert isinstance(build_experiment(make_spec(*TINY, "hardware.engine=sequential")).engine, SequentialEngine)


def test_chunk_must_be_positive(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError, match="hardware.chunk"):
        make_spec("hardware.chunk=0")


def test_runner_gives_the_same_metrics_on_both_engines(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    out = {}
    for engine in ("sequential", "vectorised"):
        (tmp_path / engine).mkdir()
        out[engine] = run(make_spec(*TINY, f"hardware.engine={engine}"), tmp_path / engine)
        assert out[engine]["status"] == "completed"
    loss = {e: [float(r["test_loss"]) for r in csv.DictReader(open(tmp_path / e / "metrics.csv"))] for e in out}
    assert len(loss["sequential"]) == 2
    assert loss["vectorised"] == pytest.approx(loss["sequential"], rel=1e-5)
    assert out["vectorised"]["test_acc_final"] == pytest.approx(out["sequential"]["test_acc_final"], abs=1e-2)
    assert out["vectorised"]["engine"] == "vectorised"


def test_bf16_autocast_stays_close_to_fp32(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    # bf16 is meant for CUDA; CPU autocast runs the same code path, so the check runs here too
    out = {}
    for precision in ("fp32", "bf16"):
        (tmp_path / precision).mkdir()
        spec = make_spec(*TINY, "hardware.engine=vectorised", f"hardware.precision={precision}")
        out[precision] = run(spec, tmp_path / precision)
    assert out["bf16"]["test_loss_final"] != out["fp32"]["test_loss_final"]  # autocast really ran
    assert out["bf16"]["test_loss_final"] == pytest.approx(out["fp32"]["test_loss_final"], rel=0.05)
    assert out["bf16"]["test_acc_final"] == pytest.approx(out["fp32"]["test_acc_final"], abs=0.05)


def test_precision_context_is_autocast_only_for_bf16() -> None:
    x = torch.ones(2, 2)
    with auto.precision_context("bf16", torch.device("cpu")):
        assert (x @ x).dtype == torch.bfloat16
    with auto.precision_context("fp32", torch.device("cpu")):
        assert (x @ x).dtype == torch.float32


class _BranchyFedAvg(FedAvg):
    """A user's method with a data-dependent Python branch in its loss: fine eagerly, impossible under vmap."""

    def local_loss(self, params, batch, ctx):  # noqa: ANN001, ANN201
        loss = super().local_loss(params, batch, ctx)
        if loss.item() > 1e6:  # .item() cannot run on a vmapped tensor
            return loss * 0.0
        return loss


def test_auto_falls_back_to_sequential_for_a_method_vmap_cannot_run(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    spec = make_spec(*TINY)
    exp = build_experiment(make_spec(*TINY, "hardware.engine=sequential"))
    algo = _BranchyFedAvg(exp.algorithm.hp, spec.fl, exp.model)
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto_budget, "BUDGET", float("inf"))  # TINY is too small to time otherwise
    capsys.readouterr()
    engine = auto.EngineFactory(spec.hardware, str(tmp_path))(algo, exp.fed, spec.fl, spec.seed)
    assert isinstance(engine, SequentialEngine)
    reason = engine.selection["reason"]
    assert reason.startswith("not vmappable: RuntimeError") and "item" in reason
    err = capsys.readouterr().err
    assert err == f"fedrun: engine=auto: _BranchyFedAvg runs on the sequential engine ({reason})\n"
    # the sequential engine trains it as written, to FedAvg's numbers (the branch is never taken)
    params = exp.model.init_params()
    clients = torch.arange(2)

    def cohort(engine: SequentialEngine, algorithm: FedAvg) -> dict:
        extras = algorithm.broadcast(params, algorithm.server_init(params))
        states = auto.stacked_states(algorithm, spec.fl, params, 2)
        return engine.train_cohort(0, params, extras, clients, states, spec.fl.lr).uploads

    mine = cohort(engine, algo)
    ref = cohort(SequentialEngine(exp.algorithm, exp.fed, spec.fl, spec.seed), exp.algorithm)
    assert len(leaves(ref)) > 0 and all(torch.equal(a, b) for a, b in zip(leaves(mine), leaves(ref), strict=True))
    # the fallback is cached like a measurement, and said again when read back
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("measured although cached"))
    again = auto.choose(spec.hardware, algo, exp.fed, spec.fl, spec.seed, str(tmp_path))
    assert again["engine"] == "sequential" and again["reason"] == reason
    assert "runs on the sequential engine" in capsys.readouterr().err
