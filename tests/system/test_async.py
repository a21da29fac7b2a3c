"""Asynchronous servers on the simulated clock (``system.server=fedasync|fedbuff``, fedrun/system/servers/): each
option's defining property, determinism across engines and across a kill and a
mid-update interrupt, the event order, and bad input refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from fedrun.config.identity import config_key, fingerprint
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.core.rng import derive, np_rng
from fedrun.core.tree import unstack
from fedrun.report import curves
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from fedrun.run.rounds import aggregation_weights, lr_at
from fedrun.run.rounds import train_step as train_update
from fedrun.run.state import fresh_state
from fedrun.storage.rundir import RunDir
from fedrun.system.registries import SERVERS
from fedrun.system.servers.base import AsyncServer, staleness_weight
from fedrun.system.servers.fedbuff import FedBuff, buffer_weights
from fedrun.system.servers.queue import Event, EventQueue
from fedrun.system.settings import ASYNC_KEYS
from tests.conftest import refused_in_one_line
from tests.run.run_util import killed_then_resumed, metrics, run_in

SMALL = (
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=10",
    "fl.rounds=6",
    "fl.participation=0.5",
    "fl.local_epochs=1",
    "fl.batch_size=20",
    "model.hidden=[32]",
    "hardware.threads=1",
    "checkpoint.every=1",
)
# every client runs 3 steps of 20 samples and moves the same bytes on one device: equal completion times
EQUAL_TIMES = ("fl.local_steps=3",)
ASYNC_COLUMNS = ["sim_seconds", "sim_clock", "staleness_mean", "staleness_max", "in_flight", "clients"]


def server(experiment: Any) -> Any:
    """The run's async server (its driver), holding its event queue."""
    return experiment.capabilities.driver


def test_staleness_functions_are_xie_et_al() -> None:
    assert [staleness_weight("constant", 0.5, 4, lag) for lag in (0, 3, 9)] == [1.0, 1.0, 1.0]
    assert [staleness_weight("polynomial", 0.5, 4, lag) for lag in (0, 3)] == [1.0, 0.5]  # (3 + 1)^-0.5
    assert [staleness_weight("hinge", 10, 4, lag) for lag in (0, 4, 5, 6)] == [1.0, 1.0, 1 / 11, 1 / 21]
    for k in range(12):  # s(k) of a lag-k arrival, by the paper's formulas; s(0) = 1 for all three
        assert staleness_weight("polynomial", 0.5, 4, k) == (k + 1.0) ** -0.5
        assert staleness_weight("hinge", 4, 2, k) == (1.0 if k <= 2 else 1.0 / (4 * (k - 2) + 1.0))


def test_fedasyncs_staleness_is_the_versions_since_dispatch_a_fresh_update_mixing_at_alpha(
    make_spec: Callable[..., RunSpec],
) -> None:
    """Xie et al. 2019, Alg. 1 as their code indexes it (xcgoner/async_fl, ``worker_delay = epoch - worker_ts``): an
    update trained from the model it is mixed into has lag 0 and s(0) = 1; one from k versions back has s(k) =
    (k + 1)^-a, and w <- (1 - alpha s) w + alpha s x."""
    a, alpha = 0.5, 0.6
    fedasync = ("system.server=fedasync", "system.concurrency=2", "system.staleness=polynomial")
    spec = make_spec(*SMALL, *EQUAL_TIMES, *fedasync, f"system.staleness_a={a}", f"system.mixing={alpha}")
    experiment = build_experiment(spec)
    state = fresh_state(experiment)
    driver = server(experiment)
    step, seen = driver.step, []

    def spy(params: dict[str, torch.Tensor], arrivals: list[Event], staleness: list[float]) -> Any:
        out = step(params, arrivals, staleness)
        x = {k: v[0] for k, v in driver.gather(arrivals, "params").items()}
        for k, w in params.items():  # the paper's mixing, by hand
            torch.testing.assert_close(out[k], (1 - alpha * staleness[0]) * w + alpha * staleness[0] * x[k])
        seen.append((arrivals[0].version, staleness[0]))
        return out

    driver.step = spy
    for t in range(spec.fl.rounds):
        train_update(experiment, state, t)
    # two clients of equal times from w_0 arrive at updates 0 and 1 (lags 0 and 1); their slots are refilled when no
    # arrival is due, at the start of update 2, from w_2: they arrive at updates 2 and 3 (lags 0 and 1), and so on
    assert [t - version for t, (version, _) in enumerate(seen)] == [0, 1, 0, 1, 0, 1]
    assert [s for _, s in seen[0::2]] == [1.0] * 3  # fresh: s(0) = 1, full weight alpha
    assert [s for _, s in seen[1::2]] == [2**-a] * 3  # one version behind: s(1) = (1 + 1)^-a


def test_events_are_ordered_by_time_then_dispatch_order() -> None:
    q = EventQueue()
    q.push({}, np.array([7, 2, 5]), np.array([2.0, 1.0, 2.0]), version=0)  # 7 and 5 tie at t = 2
    q.push({}, np.array([1]), np.array([1.0]), version=0)  # ties with 2, dispatched later
    order = [q.pop()[2] for _ in range(4)]
    assert order == [2, 1, 7, 5] and q.clock == 2.0
    again = EventQueue.from_tree(EventQueue(heap=[Event(1.0, 0, 3, 0, 0, 0)], batches={0: {}}).to_tree(), "x")
    assert again.heap == [(1.0, 0, 3, 0, 0, 0)]


def test_the_queues_sampling_seeds_and_counts_are_those_made_one_at_a_time() -> None:
    """idle_sample and keyed_draw (made PREFETCH dispatches at once) against np_rng and derive per dispatch, and
    the derived idle mask and live counts against the heap, across a copy (a rewound queue rebuilds them)."""
    q, clients = EventQueue(), 30
    for d in range(150):
        in_flight = {e.client for e in q.heap}
        idle = np.array([c for c in range(clients) if c not in in_flight])
        n = 1 + d % 4
        want = idle if n >= len(idle) else idle[np.sort(np_rng(7, "sample", d).choice(len(idle), n, replace=False))]
        got = q.idle_sample(n, clients, 7)
        assert got.tolist() == want.tolist()
        assert q.keyed_draw("torch", 7) == derive(7, "torch-global-dispatch", d)
        q.push({"loss": torch.tensor(0.0)}, got, np.full(len(got), 1.0 + d % 3), version=0)
        for _ in range(min(len(q.heap), 2 + d % 2)):
            q.pop()
        if d == 80:
            q = q.copy()
        q.release()
        assert set(q.batches) == {e.batch for e in q.heap}


def test_the_dispatch_draw_is_numpys_sorted_choice_on_either_side_of_its_floyd_bound() -> None:
    """idle_sample skips numpy's shuffle of the drawn set up to 10,000 idle clients; numpy's method choice above
    that depends on ``shuffle`` (tail shuffle from pop // 50 with it, pop // 20 without), so there it is kept:
    the same sorted ids as ``np.sort(choice(...))`` with numpy's defaults, sizes around both cut-offs."""
    for clients in (9_999, 10_000, 10_001, 25_000):
        for n in (1, 3, clients // 50, clients // 50 + 1, clients // 30, clients // 20 + 1):
            q = EventQueue()
            want = np.sort(np_rng(3, "sample", 0).choice(clients, n, replace=False))
            assert q.idle_sample(n, clients, 3).tolist() == want.tolist(), (clients, n)


def test_fedbuff_weights_are_aggregation_weights_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for trial in range(300):
        k = int(rng.integers(1, 13))
        sizes = [0] * k if trial % 10 == 0 else rng.integers(0, 700, k).tolist()
        stale = (rng.integers(0, 20, k) + 1.0) ** -rng.uniform(0, 2)
        for weighting in ("size", "uniform"):
            p = aggregation_weights(torch.tensor(sizes, dtype=torch.float64), weighting)
            want = 0.7 * (p * torch.tensor(stale, dtype=torch.float64))
            got = torch.tensor(buffer_weights(sizes, weighting, stale.tolist(), 0.7), dtype=torch.float64)
            assert torch.equal(got, want)


def test_fedbuff_with_k_equal_c_equal_cohort_and_no_staleness_is_fedavg(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    fedavg = run_in(tmp_path, "fedavg", make_spec(*SMALL, *EQUAL_TIMES))
    buff = run_in(tmp_path, "fedbuff", make_spec(*SMALL, *EQUAL_TIMES, "system.server=fedbuff", "system.buffer=5"))
    assert (buff["staleness_max"] == 0).all() and (buff["clients"] == 5).all()
    assert buff["sim_clock"].is_monotonic_increasing and (buff["sim_seconds"] > 0).all()
    # w + (sum_i p_i y_i - w) against sum_i p_i y_i: the same up to float rounding
    for col in ("test_acc", "test_loss", "local_loss"):
        np.testing.assert_allclose(buff[col], fedavg[col], rtol=1e-5, atol=1e-6)
    # with staleness (K < C) it is another algorithm: a check that the property above is not vacuous
    stale = run_in(tmp_path, "stale", make_spec(*SMALL, *EQUAL_TIMES, "system.server=fedbuff", "system.buffer=2"))
    assert stale["staleness_max"].max() > 0


def test_fedasync_with_mixing_1_and_concurrency_1_is_sequential_sgd(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL, "system.server=fedasync", "system.mixing=1.0", "system.concurrency=1")
    experiment = build_experiment(spec)
    state = fresh_state(experiment)
    start = dict(state.params)
    for t in range(spec.fl.rounds):
        train_update(experiment, state, t)
    # the same clients, one after the other, each from the previous one's model
    params, engine = start, build_experiment(spec).engine
    for t in range(spec.fl.rounds):
        client = torch.as_tensor(np_rng(spec.seed, "sample", t).choice(spec.fl.clients, 1), dtype=torch.long)
        res = engine.train_cohort(t, params, {}, client, {}, lr_at(spec, t))
        params = unstack(res.uploads["params"], 0)
    for k, v in params.items():
        assert torch.equal(state.params[k], v), k
    assert server(experiment).queue.dispatches == spec.fl.rounds  # refills wait for the next update


def test_the_clients_dispatched_at_one_version_train_as_one_cohort(make_spec: Callable[..., RunSpec]) -> None:
    """FedBuff refills a slot at each arrival and steps every K: the refills of one version join one cohort (one
    train_cohort call, never a client twice), which trains from that version before the update."""
    fedbuff = ("system.server=fedbuff", "system.buffer=2", "system.concurrency=5", "system.devices=tiers")
    spec = make_spec(*SMALL, "fl.rounds=8", *fedbuff)
    experiment = build_experiment(spec)
    state = fresh_state(experiment)
    calls: list[tuple[int, list[int], dict[str, torch.Tensor]]] = []
    train = experiment.engine.train_cohort

    def spy(key: int, params: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        calls.append((key, args[1].tolist(), params))
        return train(key, params, *args, **kwargs)

    experiment.engine.train_cohort = spy  # type: ignore[method-assign]
    versions: dict[int, set[int]] = {}
    for t in range(spec.fl.rounds):
        before = len(calls)
        train_update(experiment, state, t)
        queue = server(experiment).queue
        assert queue.open is None  # nothing left untrained between updates
        for e in queue.heap:
            versions.setdefault(e.batch, set()).add(e.version)
        assert all(params is calls[before][2] for _, _, params in calls[before:])  # all from w_t
    assert all(len(v) == 1 for v in versions.values())  # a cohort's clients all started from one version
    assert all(len(set(ids)) == len(ids) for _, ids, _ in calls)
    assert server(experiment).queue.dispatches > len(calls) + 2  # refills were merged (the property is not vacuous)


def test_fedbuffs_step_is_the_buffers_weighted_delta_sum(make_spec: Callable[..., RunSpec]) -> None:
    """The step read cohort by cohort from the uploads matrices (rows in completion order, slices or index_select)
    equals w + eta_g sum_i p_i s_i Delta_i computed in float64 from each arrival's own delta, through a kill and a
    restore of the queue from its checkpoint tree."""
    fedbuff = ("system.server=fedbuff", "system.buffer=3", "system.concurrency=6", "system.devices=tiers")
    spec = make_spec(*SMALL, "fl.rounds=10", *fedbuff, "system.staleness=polynomial", "system.server_lr=0.8")
    experiment = build_experiment(spec)
    state = fresh_state(experiment)
    srv = server(experiment)
    step, worst, reordered = srv.step, [0.0], [0]

    def checked(params: Any, arrivals: list[Event], weights: list[float]) -> Any:
        new = step(params, arrivals, weights)
        deltas = srv.gather(arrivals, "params")
        sizes = srv.system.sizes[[e.client for e in arrivals]].tolist()
        q = torch.tensor(buffer_weights(sizes, spec.fl.weighting, weights, spec.system.server_lr), dtype=torch.float64)
        for k, w in params.items():
            want = w.double() + torch.tensordot(q, deltas[k].double(), dims=1)
            worst[0] = max(worst[0], float((new[k].double() - want).abs().max()))
        reordered[0] += len(srv.queue.rowmap)
        return new

    srv.step = checked
    for t in range(spec.fl.rounds):
        train_update(experiment, state, t)
        if t == 4:  # a queue restored from its checkpoint tree: rows renumbered, matrices rebuilt
            srv.queue = EventQueue.from_tree(srv.queue.to_tree(), "test")
    assert worst[0] < 1e-6 and reordered[0] > 0  # (some cohort's rows were stored out of dispatch order)


def test_fedbuffs_step_on_a_model_of_mixed_dtypes_takes_its_tensors_one_by_one() -> None:
    """No one uploads matrix for tensors of two dtypes: the deltas stay per tensor and the step sums each."""
    start = {"w": torch.zeros(2, 3), "b": torch.zeros(3, dtype=torch.float64)}
    ends = {"w": torch.arange(12.0).reshape(2, 2, 3), "b": torch.ones(2, 3, dtype=torch.float64)}
    srv = object.__new__(FedBuff)
    srv.settings, srv.fl = SimpleNamespace(server="fedbuff", server_lr=0.5), SimpleNamespace(weighting="size")
    srv.system = SimpleNamespace(sizes=np.array([0, 0, 0, 0, 10, 0, 0, 30]))  # type: ignore[assignment]
    deltas, flat = srv.uploads(ends, start)
    assert flat is None and deltas["b"].dtype == torch.float64
    srv.queue = EventQueue(batches={0: {"params": deltas}})
    arrivals = [Event(1.0, 0, 4, 0, 0, 0), Event(2.0, 1, 7, 0, 0, 1)]
    new = srv.step(start, arrivals, [1.0, 1.0])
    want_w = 0.5 * (0.25 * ends["w"][0] + 0.75 * ends["w"][1])
    assert torch.allclose(new["w"], want_w) and new["b"].dtype == torch.float64
    assert torch.allclose(new["b"], torch.full((3,), 0.5, dtype=torch.float64))


def test_same_stream_on_every_engine(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    setting = (*SMALL, "system.server=fedasync", "system.devices=tiers", "system.staleness=polynomial")
    seq = run_in(tmp_path, "seq", make_spec(*setting))
    vec = run_in(tmp_path, "vec", make_spec(*setting, "hardware.engine=vectorised"))
    assert seq["staleness_max"].max() > 0  # tiers make clients overtake each other
    pd.testing.assert_frame_equal(seq[ASYNC_COLUMNS], vec[ASYNC_COLUMNS], check_exact=True)
    np.testing.assert_allclose(seq["test_loss"], vec["test_loss"], rtol=1e-4)


def test_killed_and_resumed_mid_stream_gives_the_same_numbers(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*SMALL, "system.server=fedbuff", "system.buffer=2", "system.devices=tiers")

    def in_flight(ck: Any) -> None:  # what a run killed after update 3 leaves: >= C - K in flight, their work saved
        events = ck.capabilities["system"]["events"]
        assert len(events["times"]) >= 3 and events["batches"]

    summary, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, 3, in_flight)
    pd.testing.assert_frame_equal(resumed, full, check_exact=True)
    assert summary["sim_clock"] == full["sim_clock"].iloc[-1]


def test_an_interrupt_mid_update_rewinds_the_queue(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*SMALL, "system.server=fedbuff", "system.buffer=2", "system.devices=tiers", "checkpoint.every=0")
    full = run_in(tmp_path, "full", spec)
    push, calls = EventQueue.push, []

    def push_then_stop(self: EventQueue, *args: Any, **kwargs: Any) -> None:
        push(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 4:  # a dispatch inside an update, after arrivals were popped
            raise KeyboardInterrupt

    monkeypatch.setattr(EventQueue, "push", push_then_stop)
    (tmp_path / "cut").mkdir()
    assert run(spec, tmp_path / "cut")["status"] == "interrupted"
    monkeypatch.setattr(EventQueue, "push", push)
    assert run(spec, tmp_path / "cut")["status"] == "completed"
    pd.testing.assert_frame_equal(metrics(tmp_path / "cut"), full, check_exact=True)


def test_eval_every_seconds_follows_the_clock_and_curves_draw_against_it(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    spec = make_spec(*SMALL, "system.server=fedasync", "system.eval_every_seconds=0.05")
    (tmp_path / "t").mkdir()
    assert run(spec, RunDir(tmp_path / "t"))["status"] == "completed"
    m = metrics(tmp_path / "t")
    assert len(m) < 6 and m["round"].iloc[-1] == 6
    buckets = (m["sim_clock"].iloc[:-1] // 0.05).tolist()
    assert buckets == sorted(set(buckets))  # at most one row per period
    out = tmp_path / "c.png"
    assert curves.main([str(tmp_path / "t"), "--x", "sim_clock", "--out", str(out)]) == 0
    drawn = pd.read_csv(out.with_suffix(".csv"), comment="#")
    assert list(drawn["sim_clock"]) == list(m["sim_clock"]) and list(drawn["mean"]) == list(100 * m["test_acc"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("system.server=fedbuff", "system.buffer=6"), "system.buffer: not with system.server=fedbuff; valid: at most"),
        (("system.server=fedasync", "system.deadline=5"), "system.deadline: not with system.server=fedasync"),
        (("system.server=fedbuff", "system.concurrency=11"), "system.concurrency: not with system.server=fedbuff"),
        (("system.server=fedbuff", "fl.sampling=bernoulli"), "fl.sampling: not with system.server=fedbuff"),
        (("system.server=lazy",), "system.server: invalid value 'lazy'; valid: sync, " + ", ".join(SERVERS.names())),
        (("system.mixing=0",), r"system.mixing: must be in \(0.0, 1.0\]"),
        (("system.eval_every_seconds=3",), "system.eval_every_seconds: evaluates an async server's stream"),
        (("system.server=fedbuff", "system.buffer=2", "compression=topk"), "compression.name: not with system.serv"),
    ],
)
def test_bad_settings_are_refused_in_one_line(
    make_spec: Callable[..., RunSpec], overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        make_spec(*SMALL, *overrides)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("method", ["scaffold", "fednova"])
def test_a_server_step_that_is_not_an_average_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, method: str
) -> None:
    args = [*SMALL, f"algorithm={method}", "system.server=fedbuff", "system.buffer=2", f"cache_dir={tmp_path / 'c'}"]
    refused_in_one_line(tmp_path, monkeypatch, capsys, args, "system.server: fedbuff replaces the server step")


def test_a_model_with_buffers_is_refused(make_spec: Callable[..., RunSpec]) -> None:
    experiment = build_experiment(make_spec(*SMALL))
    bn = SimpleNamespace(buffers={"bn.running_mean": torch.zeros(3)})
    with pytest.raises(ConfigError, match=r"system.server: fedasync mixes parameters, but the model has buffers"):
        AsyncServer.check_method("fedasync", experiment.algorithm, bn)  # type: ignore[arg-type]
    AsyncServer.check_method("fedasync", experiment.algorithm, experiment.model)


def test_a_sync_system_run_keeps_the_identity_it_had_before_the_async_keys(make_spec: Callable[..., RunSpec]) -> None:
    raw = make_spec(*SMALL, "system.dropout=0.2").raw
    before = {**raw, "system": {k: v for k, v in raw["system"].items() if k not in ASYNC_KEYS}}
    assert config_key(raw) == config_key(before) and fingerprint(raw) == fingerprint(before)
    fedbuff = make_spec(*SMALL, "system.dropout=0.0", "system.server=fedbuff", "system.buffer=2").raw
    assert config_key(fedbuff) != config_key(make_spec(*SMALL, "system.devices=uniform").raw)


def test_a_cohort_whose_first_client_arrives_before_its_last_dispatch_keeps_its_work(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """K < C on fast and slow devices: a client dispatched at a version can arrive before the version's last
    dispatch joins the same open cohort; the cohort's work stays until its last client arrives (it was dropped, and
    the next checkpoint or update failed with a KeyError on its batch)."""
    spec = make_spec(*SMALL, "fl.clients=8", "system.server=fedbuff", "system.buffer=3", "system.devices=tiers",
                     "system.staleness=polynomial", "model.hidden=[16]")  # fmt: skip
    summary, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, 3)
    assert summary["status"] == "completed"
    pd.testing.assert_frame_equal(resumed, full, check_exact=True)
