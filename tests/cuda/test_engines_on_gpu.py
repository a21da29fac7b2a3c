"""Every engine on the GPU against the CPU result, for a few methods of each family; fp32 and bf16 autocast.

Tolerances, fp32: one round of client training from the same inputs agrees with the CPU sequential
reference to rtol 1e-4 / atol 2e-5 (what the vectorised engine keeps to the sequential one on the CPU);
whole runs of 3 rounds, where server steps and later rounds carry the rounding differences along, to
rtol 1e-3 on losses, 0.01 on accuracies (3 of 500 test images) and rtol 1e-3 / atol 1e-4 on the final
parameters and states. bf16 autocast against fp32 on the CPU: losses within 5 %, accuracies within 0.05,
parameters within atol 2e-2, and never equal to fp32 (autocast ran).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fedrun.engines.ray_engine import RayEngine
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import build_experiment
from tests.cuda.gpu_util import (
    DEVICE,
    ENGINES,
    HARD,
    METHODS,
    ON_GPU,
    assert_close_trees,
    assert_rounds_match_cpu,
    assert_same_metrics,
    engine_overrides,
    run_on,
    spec_of,
)

RUN = ("fl.rounds=3", "checkpoint.every=0")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster for the module (a GPU in it when testing a GPU); each engine ends its own actors."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'fedrun[dist]')")
    import ray

    gpus = 1 if ON_GPU else 0
    ray.init(address="local", num_cpus=2, num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per method, the whole run on the CPU with the sequential engine (computed once per method)."""
    root = tmp_path_factory.mktemp("cpu-reference")

    class Lazy(dict):
        def __missing__(self, method: str) -> Any:
            self[method] = run_on(root / method, "cpu", *METHODS[method], *HARD, *RUN, cache_dir=root / "cache")
            return self[method]

    return Lazy()


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", list(METHODS))
def test_engine_on_the_gpu_matches_the_cpu_result(
    method: str, engine: str, cpu_reference: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    overrides = (*METHODS[method], *HARD, *RUN)

    # round by round: the engine on the GPU, from the CPU reference's w^t, extras and states
    ref = build_experiment(spec_of(tmp_path / "cache", *overrides, "hardware.device=cpu"))
    exp = build_experiment(
        spec_of(tmp_path / "cache", *overrides, *engine_overrides(engine), f"hardware.device={DEVICE}")
    )
    assert exp.device.type == torch.device(DEVICE).type
    try:
        assert_rounds_match_cpu(ref, exp, exp.engine, rounds=2, rtol=1e-4, atol=2e-5)
    finally:
        exp.engine.close()
    if engine == "ray":
        assert isinstance(exp.engine, RayEngine) and exp.engine.width is not None

    # the whole run: server steps (SCAFFOLD's c, FedDyn's h, FedLAW's proxy optimisation, IMA's window) on the GPU
    summary, metrics, ck = run_on(tmp_path / "run", DEVICE, *overrides, *engine_overrides(engine))
    assert summary["device"].startswith(torch.device(DEVICE).type)
    assert summary["engine"] == engine if engine != "auto" else summary["engine"] in ("sequential", "vectorised")
    _, ref_metrics, ref_ck = cpu_reference[method]
    assert_same_metrics(metrics, ref_metrics, rtol=1e-3, acc_atol=0.01)
    assert_close_trees(ck.params, ref_ck.params, rtol=1e-3, atol=1e-4)
    assert_close_trees(ck.server_state, ref_ck.server_state, rtol=1e-3, atol=1e-4)
    assert_close_trees(ck.client_states, ref_ck.client_states, rtol=1e-3, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("method", ["fedavg", "scaffold"])
def test_chunks_on_the_gpu_match_the_cpu_result(method: str, tmp_path: Path) -> None:
    # a cohort of 4 in chunks of 3: a full chunk and a short one, kept momentum and client states across chunks
    overrides = (*METHODS[method], *HARD, *RUN)
    ref = build_experiment(spec_of(tmp_path / "cache", *overrides, "hardware.device=cpu"))
    exp = build_experiment(spec_of(tmp_path / "cache", *overrides, f"hardware.device={DEVICE}"))
    vec = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=3)
    assert_rounds_match_cpu(ref, exp, vec, rounds=2, rtol=1e-4, atol=2e-5)
    assert vec.stats["chunks"] == 4 and vec.stats["chunk_width"] == 3  # 2 rounds x ceil(4 clients / 3)


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["sequential", "vectorised"])
def test_bf16_autocast_on_the_gpu_stays_near_fp32_on_the_cpu(
    engine: str, cpu_reference: dict[str, Any], tmp_path: Path
) -> None:
    overrides = (*METHODS["fedavg"], *HARD, *RUN, f"hardware.engine={engine}", "hardware.precision=bf16")
    summary, metrics, ck = run_on(tmp_path / "run", DEVICE, *overrides)
    _, ref_metrics, ref_ck = cpu_reference["fedavg"]
    assert (metrics["test_loss"] != ref_metrics["test_loss"]).all()  # autocast really ran in every round
    assert metrics["test_loss"].to_numpy() == pytest.approx(ref_metrics["test_loss"].to_numpy(), rel=0.05)
    assert metrics["local_loss"].to_numpy() == pytest.approx(ref_metrics["local_loss"].to_numpy(), rel=0.05)
    assert metrics["test_acc"].to_numpy() == pytest.approx(ref_metrics["test_acc"].to_numpy(), abs=0.05)
    assert all(t.dtype == torch.float32 for t in ck.params.values())  # autocast: fp32 master weights
    assert_close_trees(ck.params, ref_ck.params, rtol=0.0, atol=2e-2)
    assert summary["engine"] == engine


def test_ray_on_a_gpu_reserves_one_gpu_per_actor(tmp_path: Path) -> None:
    # without a cluster: what a GPU run asks Ray for (one GPU each, one actor per GPU by default)
    pytest.importorskip("ray", reason="ray is not installed (pip install 'fedrun[dist]')")
    exp = build_experiment(spec_of(tmp_path / "cache", *engine_overrides("ray"), "fl.rounds=1"))
    hw = dataclasses.replace(exp.spec.hardware, actors=0)
    exp.fed.device = torch.device("cuda")  # only the device's type is read: nothing is moved there
    engine = RayEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, hw=hw)

    class FakeRay:
        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 16.0, "GPU": 3.0}

    engine.ray = FakeRay()
    assert engine._resources() == ("GPU", 1, {"num_cpus": 1, "num_gpus": 1})
    assert engine.n_actors() == 3
