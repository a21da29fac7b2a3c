"""The Ray engine: 2 CPU actors reproduce the vectorised engine bit for bit, and leave no process behind."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.tree import leaves, tree_map
from fedrun.engines.ray_engine import RayEngine, shard_chunks, split_contiguous
from fedrun.engines.sampling import sample_clients
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from tests.conftest import compose_cfg
from tests.engines.ray_local import leave_local_cluster
from tests.engines.test_vectorised_engine import SMALL

ray = pytest.importorskip("ray")  # the dist extra

# the Ray modules on one xdist worker under `pytest -n 2 --dist loadgroup`: one Ray cluster at a time on the box
pytestmark = pytest.mark.xdist_group("ray")

RUN = (*SMALL, "fl.rounds=3", "fl.momentum=0.5", "fl.keep_momentum=true", "checkpoint.every=0")
TIMINGS = ["round_seconds", "aggregate_seconds", "seconds"]
RAY = ("hardware=ray", "hardware.engine=ray", "hardware.actors=2")  # the engine override beats SMALL's
# IMA with t_s = 1 and period 1: its ed schedule trains 3, 3, 2, 1 local epochs; the other schedules change the lr only
IMA = ("fl.rounds=4", "fl.local_epochs=3", "ima.enabled=true", "ima.start=0.25", "ima.window=2", "ima.period=1")
# RUN's momentum kept (client states travel too); 100 samples: what a round trains is counted, not learned
ED_RUN = (*RUN, *IMA, "ima.schedule=ed", "data.max_train_samples=100", "hardware.chunk=2")


@pytest.fixture(scope="module", autouse=True)
def ray_workers_not_niced() -> Iterator[None]:
    """Ray starts its worker processes at niceness 15 (to keep its own services responsive): on a machine shared
    with other work at niceness 0 (a loaded CI box, `pytest -n 2`) the actors then get almost no CPU and each
    Ray test runs minutes longer. A cluster started with this in its environment runs its workers at 0."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_worker_niceness", "0")
        yield


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (the Ray head processes a driver starts, and their workers)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier} - found
        found |= frontier
    return {p for p in found if alive(p)}


def wait_gone(pids: set[int], limit_s: float = 60.0) -> set[int]:
    """The pids still alive after waiting up to ``limit_s`` for them to exit (a bound, not a timing)."""
    end = time.monotonic() + limit_s
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.2)
    return {p for p in pids if alive(p)}


def watch_close(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """Record, at each RayEngine.close, the actor and Ray head process ids that must not outlive it."""
    seen: list[set[int]] = []
    close = RayEngine.close

    def spy(self: RayEngine) -> None:
        seen.append(set(self.worker_pids()) | descendants(os.getpid()))
        close(self)

    monkeypatch.setattr(RayEngine, "close", spy)
    return seen


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory, module_local_cluster: None) -> dict[str, Any]:
    """One whole run of the Ray engine through the runner (2 actors on the local cluster, IMA's ed schedule): its
    directory, its summary and the pids of the actors it closed. Read by the cleanup test (the actors end on normal
    exit; the run equals the vectorised one) and the IMA test (the samples each round trains): one run's actors
    started for both."""
    tmp = tmp_path_factory.mktemp("ray-run")
    actors: list[set[int]] = []
    close = RayEngine.close

    def spy(self: RayEngine) -> None:
        actors.append(set(self.worker_pids()))
        close(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RayEngine, "close", spy)
        (tmp / "ray").mkdir()
        summary = run(spec_in(tmp, *ED_RUN, *RAY), tmp / "ray")
    return {"dir": tmp / "ray", "summary": summary, "actors": actors}


def spec_in(tmp: Path, *overrides: str) -> RunSpec:
    """What the ``make_spec`` fixture composes (quiet, no plots, cache in ``tmp``), for a module-scoped run."""
    return validate(compose_cfg(["output.quiet=true", "output.plots=false", f"cache_dir={tmp / 'cache'}", *overrides]))


# ---- sharding (no Ray) -------------------------------------------------------------------------------------------
def test_shards_are_whole_size_sorted_chunks_balanced_by_samples() -> None:
    sizes = [5, 90, 40, 40, 7, 60, 10]
    shards = shard_chunks(sizes, width=2, actors=2)
    # sorted: 1(90) 5(60) 2(40) 3(40, after 2: stable) 6(10) 4(7) 0(5) -> chunks [1,5] [2,3] [6,4] [0]
    assert shards == [[1, 5], [2, 3, 6, 4, 0]]
    assert sorted(i for s in shards for i in s) == list(range(7))
    for s in shards:  # each shard stays sorted, so the actor's engine cuts the same chunks
        assert [sizes[i] for i in s] == sorted((sizes[i] for i in s), reverse=True)
    assert shard_chunks([3, 3], width=4, actors=3) == [[0, 1]]  # idle actors get nothing
    assert split_contiguous(5, 2) == [[0, 1], [2, 3, 4]] and split_contiguous(1, 4) == [[0]]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("hardware.actors=-1", "hardware.actors"),
        ("hardware.address=' '", "hardware.address"),
        ("hardware.placement=diagonal", "hardware.placement"),
    ],
)
def test_bad_ray_settings_name_the_field(override: str, field: str, make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError) as err:
        make_spec("hardware=ray", override)
    assert err.value.field == field and "\n" not in str(err.value)


def test_the_ray_preset_selects_the_ray_engine(make_spec: Callable[..., RunSpec]) -> None:
    hw = make_spec("hardware=ray").hardware
    assert (hw.engine, hw.actors, hw.address) == ("ray", 0, None)


def test_default_actor_count_fills_the_cluster(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL)
    exp = build_experiment(spec)

    class FakeRay:  # no cluster needed: only the arithmetic
        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 8.0}

    for threads, actors, expected in ((1, 0, 8), (2, 0, 4), (3, 0, 2), (1, 5, 5)):
        hw = dataclasses.replace(spec.hardware, engine="ray", threads=threads, actors=actors)
        engine = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=hw)
        engine.ray = FakeRay()
        assert engine.n_actors() == expected


# ---- exactness and cleanup ------------------------------------------------------------------------------------------
def test_two_actors_equal_the_vectorised_engine_exactly(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    leave_local_cluster()  # no Ray up: the engine starts its own cluster, and must end it
    spec = make_spec(*RUN, "fl.participation=0.8")
    exp = build_experiment(spec)
    fl, algo = spec.fl, exp.algorithm
    hw = dataclasses.replace(spec.hardware, engine="ray", actors=2, chunk=2)
    engine = RayEngine(algo, exp.fed, fl, spec.seed, hw=hw)
    vec = VectorisedEngine(algo, exp.fed, fl, spec.seed, chunk=2)
    seen = watch_close(monkeypatch)
    try:
        params = exp.model.init_params()
        states = {"_momentum": tree_map(lambda t: torch.zeros(4, *t.shape), params)}
        pids = None
        for rnd in range(2):
            clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
            a = vec.train_cohort(rnd, params, {}, clients, states, 0.05)
            b = engine.train_cohort(rnd, params, {}, clients, states, 0.05)
            assert a.loss == b.loss and a.samples == b.samples and torch.equal(a.steps, b.steps)
            for x, y in zip(leaves(a.uploads) + leaves(a.states), leaves(b.uploads) + leaves(b.states), strict=True):
                assert torch.equal(x, y)
            assert pids is None or engine.worker_pids() == pids  # the same actors every round
            pids = engine.worker_pids()
            params, states = tree_map(lambda t: t.mean(0), b.uploads["params"]), b.states
        assert len(set(pids)) == 2 and os.getpid() not in pids
        bad = tree_map(lambda t: torch.full_like(t, float("nan")), params)
        with pytest.raises(DivergenceError, match="round 2, client"):  # raised in an actor, re-raised here
            engine.train_cohort(2, bad, {}, clients, states, 0.05)

    finally:
        engine.close()
    engine.close()  # idempotent
    assert not ray.is_initialized()
    assert wait_gone(seen[0]) == set()


def stop_in_round_2(exc: type[BaseException]) -> Callable[..., object]:
    """A stand-in for the runner's ``evaluate`` that raises ``exc`` in round 2 (the engine is up by then)."""
    calls = {"n": 0}

    def fake(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise exc("stop")
        return 0.5, 1.0

    return fake


def test_runner_ends_the_actors_on_normal_exit_and_on_failure(
    ray_run: dict[str, Any],
    make_spec: Callable[..., RunSpec],
    tmp_path: Path,
    local_cluster: None,
) -> None:
    # normal exit: the module's Ray run, whole, bit for bit the vectorised engine's; its 2 actors ended
    summary = ray_run["summary"]
    assert summary["status"] == "completed" and summary["engine"] == "ray"
    (tmp_path / "vectorised").mkdir()
    assert run(make_spec(*ED_RUN, "hardware.engine=vectorised"), tmp_path / "vectorised")["engine"] == "vectorised"
    got, want = (
        pd.read_csv(d / "metrics.csv").drop(columns=TIMINGS) for d in (ray_run["dir"], tmp_path / "vectorised")
    )
    pd.testing.assert_frame_equal(got, want, check_exact=True)

    # a failure (round 2's evaluation raises): the runner ends the actors all the same
    actors, checked = failed_ray_run(make_spec(*RUN, *RAY), tmp_path / "failed")
    assert [len(a) for a in [*ray_run["actors"], *actors]] == [2, 2]
    assert wait_gone(set().union(*ray_run["actors"], *actors)) == set()
    assert ray.is_initialized()  # the test's cluster: not the engine's to shut down

    [(a, b, seq)] = checked  # each client computed as by the sequential engine
    assert seq.inner == "sequential" and seq.shards == 2
    assert a.samples == b.samples and torch.equal(a.steps, b.steps) and b.loss == pytest.approx(a.loss, rel=1e-12)
    for x, y in zip(leaves(a.uploads) + leaves(a.states), leaves(b.uploads) + leaves(b.states), strict=True):
        assert torch.equal(x, y)

    spec = make_spec(*RUN)
    exp = build_experiment(spec)
    hw = dataclasses.replace(spec.hardware, engine="ray", actors=3)
    too_many = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=hw)
    with pytest.raises(ConfigError, match="3 actors x 1 CPU exceed the Ray cluster's 2 CPUs"):
        too_many.train_cohort(0, exp.model.init_params(), {}, torch.tensor([0, 1]), {}, 0.1)  # not a silent wait
    too_many.close()


def failed_ray_run(spec: RunSpec, run_dir: Path) -> tuple[list[set[int]], list[tuple[Any, Any, RayEngine]]]:
    """Run ``spec`` (the Ray engine) in ``run_dir`` until round 2's evaluation raises, with a model vmap cannot run
    (its actors run the sequential engine): the pids of the actors each engine closed, and at each close, before
    the actors end, :func:`sequential_and_ray` of that engine."""
    actors: list[set[int]] = []
    checked: list[tuple[Any, Any, RayEngine]] = []
    close = RayEngine.close

    def spy(self: RayEngine) -> None:
        try:
            actors.append(set(self.worker_pids()))
            checked.append((*sequential_and_ray(self), self))
        finally:  # the actors end even where the check failed
            close(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fedrun.engines.ray_engine.vmap_blocker", lambda algorithm: "BatchNorm")
        mp.setattr(RayEngine, "close", spy)
        mp.setattr("fedrun.run.rounds.evaluate", stop_in_round_2(RuntimeError))
        run_dir.mkdir()
        with pytest.raises(RuntimeError, match="stop"):
            run(spec, run_dir)
    return actors, checked


def sequential_and_ray(engine: RayEngine) -> tuple[Any, Any]:
    """An unsorted cohort of 4 of the 5 clients, with momentum states, trained by the single-process sequential
    engine and by ``engine``'s live actors (from the same global model): the two results."""
    assert len(engine.actors) == 2  # both actors still up: they compute this cohort
    params, clients = engine.algorithm.model.init_params(), torch.tensor([3, 0, 4, 1])
    states = {"_momentum": tree_map(lambda t: torch.zeros(4, *t.shape), params)}
    seq = SequentialEngine(engine.algorithm, engine.data, engine.fl, engine.seed)
    return seq.train_cohort(0, params, {}, clients, states, 0.1), engine.train_cohort(
        0, params, {}, clients, states, 0.1
    )


def test_a_placement_the_cluster_cannot_hold_is_refused_in_one_line(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, local_cluster: None
) -> None:
    # one node: two actors on two different nodes cannot be placed; refused (not a silent wait), no actor started
    monkeypatch.setattr("fedrun.engines.ray_dispatch.PLACEMENT_WAIT_S", 2.0)
    spec = make_spec(*RUN, *RAY, "hardware.placement=strict_spread")
    exp = build_experiment(spec)
    params = exp.model.init_params()
    engine = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=spec.hardware)
    try:
        with pytest.raises(ConfigError) as err:
            engine.train_cohort(0, params, {}, torch.tensor([0, 1]), {}, 0.1)
    finally:
        engine.close()
    assert err.value.field == "hardware.placement" and "\n" not in str(err.value)
    assert "2 actors" in str(err.value) and "strict_spread" in str(err.value) and not engine.actors
    assert ray.util.placement_group_table() == {} or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values()
    )


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_runner_closes_the_engine_however_the_run_ends(
    exc: type[BaseException], make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same ``finally`` for every engine: checked without Ray (Ctrl-C is a KeyboardInterrupt in the driver)
    closed: list[str] = []
    monkeypatch.setattr(SequentialEngine, "close", lambda self: closed.append("closed"))
    monkeypatch.setattr("fedrun.run.rounds.evaluate", stop_in_round_2(exc))
    if exc is KeyboardInterrupt:
        assert run(make_spec(*RUN), tmp_path)["status"] == "interrupted"
    else:
        with pytest.raises(RuntimeError, match="stop"):
            run(make_spec(*RUN), tmp_path)
    assert closed == ["closed"]


# ---- per-round settings --------------------------------------------------------------------------------------------
IMA_SCHEDULES = ("exd", "nad", "clr", "cd", "ed", "sd")


def test_every_engine_trains_the_same_samples_under_each_ima_schedule(
    ray_run: dict[str, Any], make_spec: Callable[..., RunSpec], tmp_path: Path
) -> None:
    engines = {"sequential": ("hardware.engine=sequential",), "vectorised": ("hardware.engine=vectorised",)}
    n_train = 100  # data.max_train_samples (of ED_RUN too); every client trains every round (participation 1)
    for schedule in IMA_SCHEDULES:
        epochs = [3, 3, 2, 1] if schedule == "ed" else [3, 3, 3, 3]
        runs = {}
        for name, extra in engines.items():
            runs[name] = tmp_path / f"{schedule}-{name}"
            runs[name].mkdir()
            spec = make_spec(*RUN, *IMA, f"ima.schedule={schedule}", "data.max_train_samples=100", *extra)
            assert run(spec, runs[name])["engine"] == name
        # Ray only under ed (the module's Ray run), the one schedule that changes what a client trains
        # (Algorithm.round_fl, which each actor computes itself); the others change the lr, which travels with
        # every round's call
        if schedule == "ed":
            runs["ray"] = ray_run["dir"]
        ref = pd.read_csv(runs["sequential"] / "metrics.csv")["lr"].tolist()
        for name, run_dir in runs.items():
            summary = json.loads((run_dir / "summary.json").read_text())
            assert summary["engine"] == name
            assert summary["train_samples"] == n_train * sum(epochs), (schedule, name)
            assert pd.read_csv(run_dir / "metrics.csv")["lr"].tolist() == ref, (schedule, name)


def test_ray_actors_start_from_the_drivers_buffers(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, local_cluster: None
) -> None:
    # a BatchNorm model: the actors run the sequential engine; the global statistics change on the driver
    # between rounds, and a client's uploaded statistics start from them
    small = [o for o in SMALL if not o.startswith("model.")]
    spec = make_spec(*small, "model=resnet8", "data.image_size=32", "data.max_train_samples=60", "fl.batch_size=30")
    exp = build_experiment(spec)
    hw = dataclasses.replace(spec.hardware, engine="ray", actors=1)  # one actor proves it: every actor runs this code
    engine = RayEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, hw=hw)
    seq = SequentialEngine(exp.algorithm, exp.fed, spec.fl, spec.seed)
    params, clients = exp.model.init_params(), torch.arange(spec.fl.clients)
    try:
        for rnd in range(2):
            a = seq.train_cohort(rnd, params, {}, clients, {}, 0.05)
            b = engine.train_cohort(rnd, params, {}, clients, {}, 0.05)
            for x, y in zip(leaves(a.uploads["buffers"]), leaves(b.uploads["buffers"]), strict=True):
                torch.testing.assert_close(x, y)
            # the driver's global statistics move (as the runner sets them after aggregation)
            exp.model.set_buffers({k: v + 1.0 if v.is_floating_point() else v for k, v in exp.model.buffers.items()})
    finally:
        engine.close()
