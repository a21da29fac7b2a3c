"""The Ray engine across nodes, with real processes: one Ray cluster of several nodes on this machine
(``ray.cluster_utils.Cluster``: a head that holds no CPU and worker nodes of 1 CPU each), shared by every test of
the module. A run's actors land on different nodes (read from each actor's own Ray runtime context) and its
metrics equal the single-process vectorised run's with the same chunks, bit for bit; so do a run whose actor is
SIGKILLed mid-round, one whose node is removed mid-round, and one whose driver is SIGKILLed and resumed from its
checkpoint. A 2-job sweep goes through Hydra's Ray launcher (``hydra/launcher=ray_cluster``) to the same cluster.

Cost: the cluster starts once per module (about 20 s on a loaded 2-core machine); every run is 5 clients, 400
samples and 3 rounds; the single-process reference run is computed once.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedrun.config.validate import validate
from fedrun.core.tree import leaves, tree_map
from fedrun.engines import ray_engine
from fedrun.engines.auto import stacked_states
from fedrun.engines.ray_dispatch import ClusterLost
from fedrun.engines.ray_engine import RayEngine
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from tests.conftest import REPO, compose_cfg
from tests.engines.ray_local import leave_local_cluster
from tests.engines.test_ray_engine import RAY, RUN, ray_workers_not_niced  # noqa: F401 - the module's fixture
from tests.engines.test_vectorised_engine import SMALL
from tests.run.run_util import metrics, run_in

ray = pytest.importorskip("ray")  # the dist extra
from ray.cluster_utils import Cluster  # noqa: E402 - after the skip

# the Ray modules on one xdist worker under `pytest -n 2 --dist loadgroup`: one Ray cluster at a time on the box
pytestmark = pytest.mark.xdist_group("ray")

BASE = ("output.quiet=true", "output.plots=false", "hardware.chunk=2")
VECTORISED = (*RUN, "hardware.engine=vectorised")


def ray_args(cluster: Cluster, *extra: str) -> tuple[str, ...]:
    """A Ray run of two actors, one per node (strict spread), joining ``cluster``."""
    return (*RUN, *RAY, f"hardware.address={cluster.address}", *extra)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head with no CPU (no actor lands beside the driver's Ray processes) and two worker nodes of 1 CPU."""
    leave_local_cluster()  # the engines join this cluster, not the Ray instance the tests before may have left up
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})  # no web UI
    try:
        for _ in range(2):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """The single-process vectorised run with the same chunks (2 clients): the metrics every Ray run must equal."""
    tmp = tmp_path_factory.mktemp("reference")
    return run_in(tmp, "vectorised", spec_of(tmp, VECTORISED))


def spec_of(tmp: Path, args: tuple[str, ...]) -> Any:
    return validate(compose_cfg([*BASE, f"cache_dir={tmp / 'cache'}", *args]))


def engines_at_close(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """At each RayEngine.close: its live actors' nodes and the shards it re-ran (read before it ends them)."""
    seen: list[dict[str, Any]] = []
    close = RayEngine.close

    def spy(self: RayEngine) -> None:
        try:
            if not self._closed:
                seen.append({"nodes": self.actor_nodes(), "reruns": self.reruns, "shards": self.shards})
        finally:  # the engine ends (its placement group too) even where reading its actors failed
            close(self)

    monkeypatch.setattr(RayEngine, "close", spy)
    return seen


def in_round(monkeypatch: pytest.MonkeyPatch, rnd: int, act: Callable[[dict[str, Any]], None]) -> None:
    """Call ``act({"pids": ..., "nodes": ...})`` (the actors', read before the round) in round ``rnd`` right after
    shard 0 was sent: mid-round, while the actors train."""
    real = ray_engine.run_shards

    def wrapped(ray_: Any, actors: list[Any], submit: Callable[[Any, int], Any], shards: int, r: int) -> Any:
        if r != rnd:
            return real(ray_, actors, submit, shards, r)
        fired: list[bool] = []
        info = {
            "pids": ray_.get([a.pid.remote() for a in actors]),
            "nodes": ray_.get([a.node.remote() for a in actors]),
        }

        def submit_then_act(actor: Any, k: int) -> Any:
            ref = submit(actor, k)
            if not fired:
                fired.append(True)
                act(info)
            return ref

        return real(ray_, actors, submit_then_act, shards, r)

    monkeypatch.setattr(ray_engine, "run_shards", wrapped)


def test_actors_on_two_nodes_equal_the_vectorised_run(
    cluster: Cluster, reference: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = engines_at_close(monkeypatch)
    got = run_in(tmp_path, "ray", spec_of(tmp_path, ray_args(cluster, "hardware.placement=strict_spread")))
    pd.testing.assert_frame_equal(got, reference, check_exact=True)
    workers = {node.node_id for node in cluster.worker_nodes}
    assert len(seen) == 1 and len(set(seen[0]["nodes"])) == 2 and set(seen[0]["nodes"]) <= workers
    assert seen[0]["reruns"] == 0


def test_an_actor_killed_mid_round_is_replaced_by_a_survivor(
    cluster: Cluster, reference: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = engines_at_close(monkeypatch)
    in_round(monkeypatch, 1, lambda info: os.kill(info["pids"][0], signal.SIGKILL))
    got = run_in(tmp_path, "ray", spec_of(tmp_path, ray_args(cluster, "hardware.placement=spread")))
    pd.testing.assert_frame_equal(got, reference, check_exact=True)
    assert seen[0]["reruns"] >= 1 and len(seen[0]["nodes"]) == 1 and seen[0]["shards"] == 2  # one survivor


def test_a_node_removed_mid_round_loses_no_work(
    cluster: Cluster, reference: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.add_node(num_cpus=1)  # a third worker: the module's cluster keeps two after this test
    cluster.wait_for_nodes()
    seen = engines_at_close(monkeypatch)
    removed: list[str] = []

    def remove(info: dict[str, Any]) -> None:
        driver = ray.get_runtime_context().get_node_id()  # the node the driver joined cannot be removed
        victim = next(n for n in info["nodes"] if n != driver)
        node = next(n for n in cluster.worker_nodes if n.node_id == victim)
        cluster.remove_node(node, allow_graceful=False)
        removed.append(victim)

    in_round(monkeypatch, 1, remove)
    got = run_in(tmp_path, "ray", spec_of(tmp_path, ray_args(cluster, "hardware.placement=strict_spread")))
    pd.testing.assert_frame_equal(got, reference, check_exact=True)
    assert len(removed) == 1 and seen[0]["reruns"] >= 1 and seen[0]["nodes"] and removed[0] not in seen[0]["nodes"]


def test_no_surviving_actor_fails_in_one_line(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_round(monkeypatch, 1, lambda info: [os.kill(pid, signal.SIGKILL) for pid in info["pids"]])
    (tmp_path / "ray").mkdir()
    with pytest.raises(ClusterLost) as err:
        run(spec_of(tmp_path, ray_args(cluster)), tmp_path / "ray")
    assert "\n" not in str(err.value) and "all 2 Ray actors died in round 2" in str(err.value)
    assert len(metrics(tmp_path / "ray")) == 1  # round 1 stays written


CHILD = """
import json, os, signal, sys
from pathlib import Path
import fedrun.run.state as state
from fedrun.config.validate import validate
from fedrun.core.tree import leaves, tree_map
from fedrun.engines.auto import stacked_states
from fedrun.run.loop import run
from tests.conftest import compose_cfg

args, run_dir, k = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
save = state.save_checkpoint

def save_then_die(path, ck):
    save(path, ck)
    if ck.round == k:  # the driver dies right after round k's checkpoint, its actors still up
        os.kill(os.getpid(), signal.SIGKILL)

state.save_checkpoint = save_then_die
run(validate(compose_cfg(args)), run_dir)
"""


def test_a_killed_driver_resumes_from_its_checkpoint(cluster: Cluster, reference: pd.DataFrame, tmp_path: Path) -> None:
    args = [*BASE, f"cache_dir={tmp_path / 'cache'}", *ray_args(cluster, "checkpoint.every=1")]
    (tmp_path / "ray").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args), str(tmp_path / "ray"), "1"], env=env, timeout=300
    )
    assert child.returncode == -signal.SIGKILL
    assert len(metrics(tmp_path / "ray")) == 1  # what the killed driver had finished
    summary = run(validate(compose_cfg(args)), tmp_path / "ray")  # joins the same cluster, new actors
    assert summary["status"] == "completed" and summary.get("resumed_from_round") == 1
    pd.testing.assert_frame_equal(metrics(tmp_path / "ray"), reference, check_exact=True)


def test_a_two_job_sweep_through_the_ray_launcher(cluster: Cluster, reference: pd.DataFrame, tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")  # the ray-launcher extra
    sweep = tmp_path / "sweep"
    argv = ["-m", "hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address={cluster.address}"]
    argv += ["+hydra.launcher.ray.remote.scheduling_strategy=SPREAD"]  # a job per node, even one after the other
    argv += [*BASE, f"cache_dir={tmp_path / 'cache'}", *VECTORISED, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run(
        [sys.executable, "-m", "fedrun.cli", *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400
    )
    assert p.returncode == 0, p.stderr[-2000:]
    jobs = {json.loads((d / "summary.json").read_text())["seed"]: d for d in sweep.iterdir() if d.is_dir()}
    assert sorted(jobs) == [0, 1]
    pd.testing.assert_frame_equal(metrics(jobs[0]), reference, check_exact=True)  # a job equals its run here
    seed1 = run_in(tmp_path, "seed1", spec_of(tmp_path, (*VECTORISED, "seed=1")))
    pd.testing.assert_frame_equal(metrics(jobs[1]), seed1, check_exact=True)
    workers = {node.node_id for node in cluster.worker_nodes}
    nodes = {json.loads((d / "summary.json").read_text())["ray_node"] for d in jobs.values()}
    assert len(nodes) == 2 and nodes <= workers  # Ray's own record of where each job ran (summary.json ray_node)


COHORT = torch.tensor([7, 2, 11, 0, 5, 9])


def tagged(t: torch.Tensor) -> torch.Tensor:
    """Client c's rows of a stacked state, shifted by (c + 1) / 1000: no two clients' states are alike."""
    tag = (COHORT.to(t.dtype) + 1) * 1e-3
    return t + tag.view(-1, *[1] * (t.dim() - 1))


def test_each_client_gets_its_own_state_back(cluster: Cluster, tmp_path: Path) -> None:
    # SCAFFOLD's control variates and Ditto's personal models, each client's rows tagged with its id: an
    # unsorted cohort of 6 of 12 clients, 3 chunks over 2 actors, against the single-process engine
    cohort = COHORT
    for method in ("scaffold", "ditto"):
        args = (*SMALL, "fl.clients=12", "data.max_train_samples=240", f"algorithm={method}")
        spec = spec_of(tmp_path, (*args, *RAY, f"hardware.address={cluster.address}"))
        exp = build_experiment(spec)
        params = exp.model.init_params()
        extras = exp.algorithm.broadcast(params, exp.algorithm.server_init(params))
        fresh = stacked_states(exp.algorithm, spec.fl, params, len(cohort))
        states = tree_map(tagged, fresh)
        engine = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=spec.hardware)
        engine.traffic = {}
        try:
            got = engine.train_cohort(0, params, extras, cohort, states, 0.05)
        finally:
            engine.close()
        want = VectorisedEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, chunk=2).train_cohort(
            0, params, extras, cohort, states, 0.05
        )
        assert set(got.states) == set(want.states) and got.states, method
        for x, y in zip(
            leaves(got.states) + leaves(got.uploads), leaves(want.states) + leaves(want.uploads), strict=True
        ):
            assert torch.equal(x, y), method  # row j is client cohort[j]'s, computed from its own tagged state
        # each client's state went to one actor only: the shards' states add up to the cohort's, not twice it
        cohort_bytes = len(pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL))
        assert engine.traffic["states_out"] < 1.2 * cohort_bytes, (method, engine.traffic, cohort_bytes)
